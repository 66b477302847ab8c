package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// admins runs `tollgate admins ...` with stdin against dsn.
func admins(t *testing.T, dsn, stdin string, args ...string) (string, error) {
	t.Helper()
	cfg, err := loadConfig(envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = adminsCmd(context.Background(), cfg, slog.New(slog.DiscardHandler), args, cliIO{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr})
	if strings.Contains(stdout.String()+stderr.String(), "horse") {
		t.Errorf("admins %v printed the password", args)
	}
	return stdout.String(), err
}

func TestAdminsCommand(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	out, err := admins(t, dsn, "correct horse battery\n", "create", "--email", "Ops@Example.com")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		AdminID string `json:"admin_id"`
		Email   string `json:"email"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || !uuidShape.MatchString(got.AdminID) || got.Email != "ops@example.com" {
		t.Fatalf("printed %q: %v", out, err)
	}
	for _, c := range []struct {
		name, stdin string
		args        []string
		usage       bool
		want        string
	}{
		{"taken", "correct horse battery\n", []string{"create", "--email", "ops@example.com"}, false, "already has an account"},
		{"short password", "short\n", []string{"create", "--email", "new@example.com"}, false, "12 to 1024 characters"},
		{"no password", "", []string{"create", "--email", "new@example.com"}, false, "no password on stdin"},
		{"no email", "correct horse battery\n", []string{"create"}, true, "--email"},
		{"bad email", "correct horse battery\n", []string{"create", "--email", "ops"}, true, "--email"},
		{"password as argument", "", []string{"create", "--email", "a@b.c", "hunter2hunter2"}, true, "stdin"},
		{"unknown admin", "correct horse battery\n", []string{"set-password", "--email", "nobody@example.com"}, false, "no admin"},
		{"no subcommand", "", nil, true, "create or set-password"},
	} {
		_, err := admins(t, dsn, c.stdin, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errUsage) != c.usage {
			t.Errorf("%s: %v, want an error with %q (usage %v)", c.name, err, c.want, c.usage)
		}
	}
	if _, err := admins(t, dsn, "another horse battery\r\n", "set-password", "--email", "ops@example.com"); err != nil {
		t.Fatalf("set-password: %v", err)
	}
}
