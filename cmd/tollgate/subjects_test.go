package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// checkAllowed asks a running server whether subject may pass policy, with
// key, and returns the answer's allowed.
func checkAllowed(t *testing.T, base, key, policy, subject string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", strings.NewReader(fmt.Sprintf(`{"items":[{"policy":%q,"subject":%q}]}`, policy, subject)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Allowed bool `json:"allowed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("check %s of %s: %d, %v", policy, subject, resp.StatusCode, err)
	}
	return v.Allowed
}

// runWith runs tollgate with args and the environment env.
func runWith(env map[string]string, args ...string) (string, error) {
	out, _, err := runWithStderr(env, args...)
	return out, err
}

// runWithStderr is runWith that returns what was written to stderr too.
func runWithStderr(env map[string]string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, envOf(env), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

type subjectReset struct {
	TenantID     string  `json:"tenant_id"`
	Policy       string  `json:"policy"`
	SubjectKey   string  `json:"subject_key"`
	Sandbox      bool    `json:"sandbox"`
	CounterStore string  `json:"counter_store"`
	LastRefused  *string `json:"last_refused_at"`
}

// decodeReset reads the one JSON line subjects reset prints.
func decodeReset(t *testing.T, out string) subjectReset {
	t.Helper()
	var r subjectReset
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("subjects reset printed %q: %v", out, err)
	}
	return r
}

// TestSubjectsResetCommand: `tollgate subjects reset` unlocks a subject
// that a running server refuses, on the counter stores a command can
// reach — PostgreSQL through DATABASE_URL, Redis through REDIS_URL — with
// the servers' pepper, which keys the subject's counter: the server's next
// check of the subject is allowed, exactly once more for a limit of one.
// It is audited as cli:<os user> with the counter's key, never the
// subject. It names what it did (the store, the counter's key, when the
// servers last refused that counter) as JSON. Under another pepper it
// clears a counter no server uses, and says that it found none of the
// servers' refusals of it.
func TestSubjectsResetCommand(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"postgres", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.New(t)
			env := map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": store}
			if store == "redis" {
				env["REDIS_URL"] = redistest.StartServer(t)
			}
			serverEnv := map[string]string{}
			for k, v := range env {
				serverEnv[k] = v
			}
			base, _, _ := startServer(t, serverEnv)
			var acme created
			cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
			var p policyPrinted
			cliJSON(t, dsn, &p, "policies", "put", "exports", "--tenant", acme.TenantID, "--limit", "1", "--window", "30d", "--algorithm", "token_bucket")
			for i, want := range []bool{true, false} {
				if got := checkAllowed(t, base, acme.LiveKey, "exports", "acct-42"); got != want {
					t.Fatalf("check %d before the reset: allowed %t, want %t", i+1, got, want)
				}
			}
			checkAllowed(t, base, acme.LiveKey, "exports", "bystander")
			l := audit.NewLog(pgstore.NewAudit(pgtest.PoolAt(t, dsn)))
			eventually.True(t, 10*time.Second, "the server's refusal of acct-42 in the audit log", func() bool {
				es, _ := l.List(context.Background(), audit.Filter{TenantID: acme.TenantID, Kind: audit.KindRefusal})
				return len(es) > 0
			})

			// Another pepper keys another counter: the command cannot tell
			// it from an idle one, but it finds none of the servers'
			// refusals of it and says so; the server still refuses.
			wrong := map[string]string{}
			for k, v := range env {
				wrong[k] = v
			}
			wrong["TOLLGATE_PEPPER"] = strings.Repeat("x", 40)
			out, stderr, err := runWithStderr(wrong, "subjects", "reset", "acct-42", "--tenant", acme.TenantID, "--policy", "exports")
			if err != nil {
				t.Fatalf("subjects reset with another pepper: %v", err)
			}
			if r := decodeReset(t, out); r.LastRefused != nil || !strings.Contains(stderr, "holds no refusal of this counter") || !strings.Contains(stderr, "TOLLGATE_PEPPER") {
				t.Errorf("with another pepper: printed %+v and said %q; want no refusal found, and why that matters", r, stderr)
			}
			if checkAllowed(t, base, acme.LiveKey, "exports", "acct-42") {
				t.Fatal("a reset under another pepper unlocked acct-42")
			}

			out, stderr, err = runWithStderr(env, "subjects", "reset", "acct-42", "--tenant", acme.TenantID, "--policy", "exports")
			if err != nil {
				t.Fatalf("subjects reset: %v", err)
			}
			r := decodeReset(t, out)
			if r.TenantID != acme.TenantID || r.Policy != "exports" || r.Sandbox || r.CounterStore != store || r.SubjectKey == "" || strings.Contains(r.SubjectKey, "acct-42") || r.LastRefused == nil {
				t.Errorf("subjects reset printed %+v, want the counter's key and the server's refusal of it", r)
			}
			if strings.Contains(stderr, "holds no refusal") {
				t.Errorf("with the servers' pepper the command doubts its counter: %q", stderr)
			}
			if !checkAllowed(t, base, acme.LiveKey, "exports", "acct-42") {
				t.Fatal("after the reset the server refuses acct-42")
			}
			if checkAllowed(t, base, acme.LiveKey, "exports", "acct-42") {
				t.Fatal("after the reset acct-42 got more than its limit of one")
			}
			if checkAllowed(t, base, acme.LiveKey, "exports", "bystander") {
				t.Fatal("resetting acct-42 reset another subject")
			}

			es, err := l.List(context.Background(), audit.Filter{TenantID: acme.TenantID, Kind: audit.KindCounterReset})
			me, _ := user.Current()
			if err != nil || len(es) != 2 || es[0].Actor != "cli:"+me.Username || es[0].Detail["subject_key"] != r.SubjectKey || es[0].Detail["policy"] != "exports" {
				t.Fatalf("audited %+v, %v", es, err)
			}
		})
	}
}

// TestSubjectsResetSaysWhatItCannotDo: the memory store's counters live in
// the serving process, which no command reaches: the command says so,
// points to what can, and resets nothing (the server still refuses the
// subject). Without the servers' pepper or Redis's address it does not
// start; a policy that counts no subject, an unknown one and an unknown
// tenant are errors that name them, nothing audited.
func TestSubjectsResetSaysWhatItCannotDo(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	env := map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "memory"}
	base, _, _ := startServer(t, map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "memory"})
	var acme created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
	var p policyPrinted
	cliJSON(t, dsn, &p, "policies", "put", "exports", "--tenant", acme.TenantID, "--limit", "1", "--window", "30d", "--algorithm", "token_bucket")
	cliJSON(t, dsn, &p, "policies", "put", "all-exports", "--tenant", acme.TenantID, "--limit", "5", "--window", "1h", "--scope", "global")
	checkAllowed(t, base, acme.LiveKey, "exports", "acct-42")

	out, err := runWith(env, "subjects", "reset", "acct-42", "--tenant", acme.TenantID, "--policy", "exports")
	if err == nil || errors.Is(err, errUsage) || out != "" {
		t.Fatalf("subjects reset on memory counters: %q, %v; want an error and no output", out, err)
	}
	for _, want := range []string{"TOLLGATE_COUNTER_STORE=memory", "nothing was reset", "dashboard", "DELETE /v1/policies/exports/subjects/"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the memory store's refusal %q does not say %q", err, want)
		}
	}
	if checkAllowed(t, base, acme.LiveKey, "exports", "acct-42") {
		t.Fatal("the server allows acct-42: something was reset after all")
	}

	pg := map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DATABASE_URL": dsn}, nil, "TOLLGATE_PEPPER"},
		{map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "redis"}, nil, "REDIS_URL"},
		{pg, []string{"--policy", "nope"}, `subjects reset: policy "nope" not found`},
		{pg, []string{"--policy", "all-exports"}, `subjects reset: SUBJECT: policy "all-exports" has scope "global"`},
		{pg, []string{"--policy", "exports", "--tenant", "00000000-0000-0000-0000-000000000000"}, "subjects reset: no tenant 00000000-0000-0000-0000-000000000000"},
	} {
		args := append([]string{"subjects", "reset", "acct-42", "--tenant", acme.TenantID, "--policy", "exports"}, c.args...)
		if _, err := runWith(c.env, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tollgate %s: %v, want an error saying %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	for _, args := range [][]string{
		{"subjects", "reset", "--tenant", acme.TenantID, "--policy", "exports"},
		{"subjects", "reset", "a", "b", "--tenant", acme.TenantID, "--policy", "exports"},
		{"subjects", "reset", "a", "--policy", "exports"},
		{"subjects", "reset", "a", "--tenant", acme.TenantID},
		{"subjects", "unlock", "a"},
	} {
		if _, err := runWith(pg, args...); !errors.Is(err, errUsage) {
			t.Errorf("tollgate %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
	l := audit.NewLog(pgstore.NewAudit(pgtest.PoolAt(t, dsn)))
	if es, _ := l.List(context.Background(), audit.Filter{TenantID: acme.TenantID, Kind: audit.KindCounterReset}); len(es) != 0 {
		t.Errorf("refused resets were audited: %+v", es)
	}
}
