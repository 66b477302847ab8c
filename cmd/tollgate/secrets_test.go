package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMaskURL(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in, want string
	}{
		"no secret":         {"postgres://app@db:5432/tollgate?sslmode=disable", "postgres://app@db:5432/tollgate?sslmode=disable"},
		"userinfo password": {"postgres://app:s3cret@db:5432/tollgate", "postgres://app:xxxxx@db:5432/tollgate"},
		"query password":    {"postgres://app@db/tollgate?password=s3cret&sslmode=require", "postgres://app@db/tollgate?password=xxxxx&sslmode=require"},
		"both":              {"postgres://app:one@db/t?password=two", "postgres://app:xxxxx@db/t?password=xxxxx"},
		"ssl password and key": {"postgres://db/t?sslpassword=s3cret&sslkey=%2Fetc%2Fkey.pem&sslcert=%2Fetc%2Fc.pem",
			"postgres://db/t?sslcert=%2Fetc%2Fc.pem&sslkey=xxxxx&sslpassword=xxxxx"},
		"token secret auth": {"rediss://cache:6380/0?token=a&client_secret=b&auth=c&db=2", "rediss://cache:6380/0?auth=xxxxx&client_secret=xxxxx&db=2&token=xxxxx"},
		"upper case name":   {"postgres://db/t?PASSWORD=s3cret", "postgres://db/t?PASSWORD=xxxxx"},
		"redis password":    {"redis://:hunter2@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		"not a url":         {"host=db password=s3cret", "xxxxx"},
		"empty":             {"", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := maskURL(c.in); got != c.want {
				t.Fatalf("maskURL(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestPublicPageAndLogKeepTheDatabaseSecret serves with a DATABASE_URL that
// carries a password twice (userinfo and query) and checks that neither the
// unauthenticated landing page nor the log shows it, and that the page shows
// nothing of the database at all.
func TestPublicPageAndLogKeepTheDatabaseSecret(t *testing.T) {
	u, _ := url.Parse(pgtest.New(t))
	u.User = url.UserPassword(u.User.Username(), "userinfo-s3cret")
	q := u.Query()
	q.Set("password", "query-s3cret")
	q.Set("sslpassword", "sslkey-s3cret")
	u.RawQuery = q.Encode()
	base, logs, stop := startServer(t, map[string]string{"DATABASE_URL": u.String(), "TOLLGATE_PEPPER": testPepper})
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/: %d", resp.StatusCode)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	for _, s := range []string{"userinfo-s3cret", "query-s3cret", "sslkey-s3cret", u.Host, dbName, "postgres://"} {
		if strings.Contains(string(body), s) {
			t.Errorf("the public page shows %q:\n%s", s, body)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"userinfo-s3cret", "query-s3cret", "sslkey-s3cret"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log shows %q", s)
		}
	}
}
