package main

import (
	"bytes"
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// noEnv is an environment that fails the test when read.
func noEnv(t *testing.T) func(string) string {
	return func(k string) string {
		t.Errorf("read %s: help, usage and version need no environment", k)
		return ""
	}
}

// TestHelpNeedsNoEnvironment: `tollgate --help`, `tollgate help [COMMAND]`,
// `tollgate COMMAND --help` and `tollgate version` print without reading
// the environment (no pepper, no database).
func TestHelpNeedsNoEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"usage: tollgate [command]", "serve [--demo]", "tenants list", "keys list --tenant TENANT_ID", "version", "help [COMMAND]"}},
		{[]string{"-h"}, []string{"usage: tollgate [command]"}},
		{[]string{"help"}, []string{"usage: tollgate [command]", "admins set-password --email EMAIL"}},
		{[]string{"help", "tenants"}, []string{"usage: tollgate tenants create --name NAME [--plan PLAN]", "tollgate tenants list", "environment: DATABASE_URL"}},
		{[]string{"tenants", "--help"}, []string{"usage: tollgate tenants create"}},
		{[]string{"keys", "create", "--help"}, []string{"usage: tollgate keys create --tenant TENANT_ID [--test]", "tollgate keys list --tenant TENANT_ID"}},
		{[]string{"serve", "-h"}, []string{"usage: tollgate serve [--demo]", "TOLLGATE_PEPPER is required unless TOLLGATE_DEV=1"}},
		{[]string{"version", "--help"}, []string{"usage: tollgate version", "environment: none."}},
		{[]string{"version"}, []string{"tollgate ", "go1."}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), tc.args, noEnv(t), &stdout, &stderr); err != nil {
				t.Fatalf("error %v; stderr %s", err, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("printed:\n%s\nwant %q in it", stdout.String(), w)
				}
			}
		})
	}
	for _, args := range [][]string{{"help", "nope"}, {"nope"}, {"version", "extra"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, noEnv(t), &stdout, &stderr); !errors.Is(err, errUsage) {
			t.Errorf("tollgate %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}

// TestUnknownCommandIsBrief: a mistyped command gets the error, then one
// hint line, not the whole usage; main exits 2 on it.
func TestUnknownCommandIsBrief(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"tenant", "create"}, noEnv(t), &stdout, &stderr)
	if !errors.Is(err, errUsage) {
		t.Fatalf("tollgate tenant create: %v, want a usage error", err)
	}
	if stdout.Len()+stderr.Len() > 0 {
		t.Errorf("printed before the error:\n%s%s", stdout.String(), stderr.String())
	}
	want := "unknown command \"tenant\"\nrun 'tollgate help' for the commands"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err.Error(), want)
	}
}

// TestOperatorCommandsReadOnlyTheirConfig: the operator commands read the
// database's settings only, so a missing pepper or a serve-only setting
// that is wrong does not stop them; serve, which reads them, refuses.
func TestOperatorCommandsReadOnlyTheirConfig(t *testing.T) {
	dsn := pgtest.New(t)
	env := envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PUBLIC_URL": "ftp://nope", "STRIPE_API_KEY": "pk_live_publishable"})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"tenants", "create", "--name", "Acme"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("tenants create without a pepper: %v", err)
	}
	if err := run(context.Background(), []string{"serve"}, env, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "TOLLGATE_PEPPER") {
		t.Errorf("serve without a pepper: %v, want an error naming TOLLGATE_PEPPER", err)
	}
	bad := envOf(map[string]string{"DATABASE_URL": "mysql://x"})
	if err := run(context.Background(), []string{"tenants", "list"}, bad, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || err.Error() != "DATABASE_URL: want postgres://user[:password]@host:port/dbname" {
		t.Errorf("tenants list with a bad DATABASE_URL: %v", err)
	}
}

// TestCheckURL: the one check of the environment's URLs names the variable,
// and shows the value only when it cannot hold a secret.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, v, want string
	}{
		{"DATABASE_URL", "postgres://u:secret@db:5432/tollgate", ""},
		{"DATABASE_URL", "mysql://u:secret@db/x", "DATABASE_URL: want postgres://"},
		{"DATABASE_URL", "postgres:///nohost", "DATABASE_URL: want postgres://"},
		{"REDIS_URL", "rediss+cluster://:secret@a:7000?addr=b:7001", ""},
		{"REDIS_URL", "localhost:6379", "REDIS_URL: want redis://"},
		{"TOLLGATE_PUBLIC_URL", "https://tollgate.example", ""},
		{"TOLLGATE_PUBLIC_URL", "tollgate.example", `TOLLGATE_PUBLIC_URL "tollgate.example": want http(s)://host[:port]`},
		{"STRIPE_API_BASE", "ftp://stripe", `STRIPE_API_BASE "ftp://stripe": want http(s)://host[:port]`},
	} {
		err := checkURL(tc.name, tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s=%s: %v", tc.name, tc.v, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s=%s: %v, want %q", tc.name, tc.v, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
}

// TestVersionLine: the version names the module version, the revision and
// whether the tree was modified, and says so when it knows none.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/tollgate/tollgate", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(bi), "tollgate v1.4.0 (revision 0123abcd, modified, 2026-11-30T12:00:00Z, go1.26.8)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	if got, want := versionLine(bi), "tollgate (devel) (revision unknown, go1.26.8)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := versionLine(nil); !strings.Contains(got, "no build information") {
		t.Errorf("without build information: %q", got)
	}
}
