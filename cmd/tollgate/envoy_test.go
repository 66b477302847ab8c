package main

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

type domainPrinted struct {
	Domain    string `json:"domain"`
	Rules     int    `json:"rules"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

// writeFile writes src to a file of the test's own and returns its path.
func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEnvoyCommands: an operator imports a tenant's envoyproxy/ratelimit
// file (as its own domain, or another with --domain), lists, exports it
// byte for byte and deletes it; a file the API would refuse is refused
// before the database is touched, as FILE:LINE: reason; every change is
// stored and audited as cli:<os user>.
func TestEnvoyCommands(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	var acme created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
	tn := acme.TenantID

	const edge = "# per client address\ndomain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n"
	good := writeFile(t, "edge.yaml", edge)
	misspelled := writeFile(t, "bad.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requestsperunit: 10\n")
	empty := writeFile(t, "empty.yaml", "")
	noDomain := writeFile(t, "nodomain.yaml", "descriptors: []\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"envoy", "import", misspelled, "--tenant", tn}, misspelled + `:6: unknown field "requestsperunit": did you mean "requests_per_unit"?`},
		{[]string{"envoy", "import", good, "--tenant", tn, "--domain", "api"}, good + `:2: the file's domain "edge" is not the domain "api" it is uploaded to`},
		{[]string{"envoy", "import", empty, "--tenant", tn}, empty + ": the file is empty"},
		{[]string{"envoy", "import", noDomain, "--tenant", tn}, noDomain + ":1: domain is required"},
		{[]string{"envoy", "import", good, "--tenant", tn, "--domain", "a/b"}, `envoy import: domain: cannot hold "/"`},
		{[]string{"envoy", "import", filepath.Join(t.TempDir(), "missing.yaml"), "--tenant", tn}, "envoy import: open "},
		{[]string{"envoy", "export", "edge", "--tenant", tn}, `envoy export: domain "edge" not found`},
		{[]string{"envoy", "delete", "..", "--tenant", tn}, `envoy delete: domain: cannot be "." or ".."`},
		{[]string{"envoy", "list", "--tenant", "00000000-0000-0000-0000-000000000000"}, "envoy list: no tenant 00000000-0000-0000-0000-000000000000"},
	} {
		_, err := cli(t, dsn, tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("tollgate %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"envoy", "import", good},
		{"envoy", "import", "--tenant", tn},
		{"envoy", "list", "--tenant", tn, "extra"},
		{"envoy", "export", "--tenant", tn},
		{"envoy", "rename", "a", "b"},
		{"envoy"},
	} {
		if _, err := cli(t, dsn, args...); !errors.Is(err, errUsage) {
			t.Errorf("tollgate %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}

	// Import as the file's domain, and as another.
	var d domainPrinted
	cliJSON(t, dsn, &d, "envoy", "import", good, "--tenant", tn)
	if d.Domain != "edge" || d.Rules != 1 || d.CreatedAt == "" {
		t.Errorf("import printed %+v", d)
	}
	api := writeFile(t, "api.yaml", "domain: api\n")
	cliJSON(t, dsn, &d, "envoy", "import", api, "--tenant", tn, "--domain", "api")
	out, err := cli(t, dsn, "envoy", "list", "--tenant", tn)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "api 0 ") || !strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "edge 1 ") {
		t.Errorf("envoy list printed:\n%s", out)
	}
	if out, err := cli(t, dsn, "envoy", "export", "edge", "--tenant", tn); err != nil || out != edge {
		t.Errorf("envoy export printed %q (%v), want the file as imported", out, err)
	}
	var deleted struct {
		Deleted string `json:"deleted"`
	}
	cliJSON(t, dsn, &deleted, "envoy", "delete", "edge", "--tenant", tn)
	if deleted.Deleted != "edge" {
		t.Errorf("delete printed %+v", deleted)
	}

	// In the store, and audited with the operator.
	pool := pgtest.PoolAt(t, dsn)
	if ds, err := pgstore.NewEnvoyDomains(pool).ListDomains(context.Background(), tn); err != nil || len(ds) != 1 || ds[0].Name != "api" {
		t.Errorf("after delete: %+v, %v", ds, err)
	}
	es, err := audit.NewLog(pgstore.NewAudit(pool)).List(context.Background(), audit.Filter{TenantID: tn})
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range es {
		if e.Actor != "cli:"+u.Username {
			t.Errorf("%s audited by %q, want cli:%s", e.Kind, e.Actor, u.Username)
		}
		kinds = append(kinds, e.Kind)
	}
	if want := []string{envoyconf.KindDomainDeleted, envoyconf.KindDomainPut, envoyconf.KindDomainPut}; !slices.Equal(kinds, want) {
		t.Errorf("audited %v, want %v", kinds, want)
	}
}
