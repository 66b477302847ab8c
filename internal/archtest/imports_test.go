package archtest

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/tollgate/tollgate/"

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", mod+"...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// root is the composition root: it builds the whole service, adapters and
// drivers included, and only cmd imports it (tests do too; go list's
// Imports leave them out).
const root = mod + "internal/app"

// isWiring reports whether rel (a path inside the module) is code that
// wires adapters: cmd/... or the composition root.
func isWiring(rel string) bool { return strings.HasPrefix(rel, "cmd/") || mod+rel == root }

func isStd(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }

// adapters are the packages only the wiring (cmd/tollgate and the
// composition root, internal/app) and test helpers may import: pgstore,
// stripeapi, and every backend of the counter contract, the in-memory one
// included (isAdapter). The wiring builds them and hands them to the domain
// as a counter.Store or the domain's own interfaces.
var adapters = []string{
	mod + "internal/pgstore",
	mod + "internal/billing/stripeapi",
}

// isAdapter reports whether path is an adapter: one of adapters, or a
// package under internal/counter/.
func isAdapter(path string) bool {
	if hasPrefix(path, adapters) {
		return true
	}
	rest, ok := strings.CutPrefix(path, mod+"internal/counter/")
	return ok && rest != ""
}

// webLayers are the transports, the packages that answer HTTP and gRPC;
// no adapter imports them.
var webLayers = []string{mod + "internal/httpapi", mod + "internal/dashboard", mod + "internal/rls"}

// observers are the packages told what the admission pipeline decided, and
// the database adapter that stores it: they import internal/admission, so
// that none of them compiles the pipeline (internal/gate).
var observers = []string{
	mod + "internal/pgstore", mod + "internal/audit", mod + "internal/usage", mod + "internal/traffic",
}

// clientDeps are the third-party modules the public client's sub-packages
// may import: echomw adapts the client to Echo.
var clientDeps = []string{"github.com/labstack/echo/v4"}

// testOnly are the packages only tests (and each other) import: the code
// that ships never reaches them. internal/testkit holds those that serve
// tests across the tree, the counter contract's conformance suite among
// them; stripe-mock stays beside the adapter it stands in for.
var testOnly = []string{
	mod + "internal/testkit", mod + "internal/billing/stripeapi/stripemocktest",
}

// kit holds the generic machinery (the write-behind loop, the cache, the
// HMAC helper, the atomic map, the local PostgreSQL): none of it knows
// Tollgate's domain. kitDeps are the modules it may import besides the
// standard library and itself: writebehind's flush ids are UUIDs, and
// pglocal locks files with flock.
const kit = mod + "internal/kit"

var kitDeps = []string{"github.com/google/uuid", "github.com/gofrs/flock"}

// drivers may be imported by adapters only.
var drivers = []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/stripe/stripe-go", "github.com/golang-migrate"}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}

// The rules TestImportArrows enforces, each named word for word in
// docs/architecture.md (TestRulesAreDocumented).
const (
	ruleLimit          = "limit imports the standard library only"
	ruleCounter        = "counter imports only limit"
	ruleWeb            = "web components take view models, not domain packages"
	ruleSqlc           = "sqlc output stays inside the adapter that owns it"
	ruleAdapters       = "only cmd/tollgate and the composition root wire adapters"
	ruleRoot           = "only cmd imports the composition root"
	ruleTestOnly       = "only tests import the test-only packages"
	ruleAdapterWeb     = "an adapter serves the domain, never the transports"
	ruleDrivers        = "drivers stay inside adapters"
	ruleCmd            = "nothing imports cmd"
	ruleClientInternal = "the public client imports nothing internal of Tollgate's"
	ruleClientStd      = "the client imports the standard library only, so net/http apps pull in nothing else"
	ruleClientDeps     = "the client's sub-packages import only the standard library and Echo"
	ruleAdmission      = "admission imports the standard library only"
	ruleWebCounters    = "the transports count through the gate, never with counter or limit"
	ruleObservers      = "the observers and the database adapter learn what the gate decided from admission, never from gate"
	ruleAlert          = "alert imports the standard library only"
	ruleUsageAudit     = "usage reports the alerts audit raises as alert's, never by importing audit"
	ruleEnvoyconf      = "envoyconf imports only policy, limit, kit/cache and yaml.v3"
	ruleKit            = "the kit imports only the standard library, other kit packages, uuid and flock"
)

var rules = []string{
	ruleLimit, ruleCounter, ruleWeb, ruleSqlc, ruleAdapters, ruleTestOnly,
	ruleAdapterWeb, ruleDrivers, ruleCmd, ruleClientInternal, ruleClientStd, ruleClientDeps,
	ruleAdmission, ruleObservers, ruleWebCounters, ruleAlert, ruleUsageAudit, ruleRoot, ruleEnvoyconf, ruleKit,
}

// envoyconfDeps are what internal/policy/envoyconf may import beside the
// standard library: a reading of a file format and the Catalog of tenants'
// parsed files, with its Store declared and never a store itself, so that
// the gRPC service, the HTTP upload and the command line share it without
// pulling in a driver.
var envoyconfDeps = []string{mod + "internal/policy", mod + "internal/limit", mod + "internal/kit/cache", "gopkg.in/yaml.v3"}

// TestRulesAreDocumented fails when docs/architecture.md does not name a
// rule of TestImportArrows word for word, so the page stays the rules the
// test holds.
func TestRulesAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !strings.Contains(string(doc), r) {
			t.Errorf("docs/architecture.md does not name the import rule %q", r)
		}
	}
}

// TestImportArrows fails when an import points the wrong way.
func TestImportArrows(t *testing.T) {
	t.Parallel()
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		adapter := isAdapter(p.ImportPath)
		isClient := rel == "client" || strings.HasPrefix(rel, "client/")
		isTestInfra := hasPrefix(rel, []string{"internal/testkit", "internal/kit/pglocal", "internal/archtest", "blackbox"}) ||
			hasPrefix(p.ImportPath, testOnly)
		for _, imp := range p.Imports {
			ours := strings.HasPrefix(imp, mod)
			switch {
			case rel == "internal/limit" && !isStd(imp):
				t.Errorf("%s imports %s: %s", rel, imp, ruleLimit)
			case rel == "internal/admission" && !isStd(imp):
				t.Errorf("%s imports %s: %s", rel, imp, ruleAdmission)
			case rel == "internal/alert" && !isStd(imp):
				t.Errorf("%s imports %s: %s", rel, imp, ruleAlert)
			case rel == "internal/policy/envoyconf" && !isStd(imp) && !slices.Contains(envoyconfDeps, imp):
				t.Errorf("%s imports %s: %s", rel, imp, ruleEnvoyconf)
			case hasPrefix(p.ImportPath, []string{kit}) && !isStd(imp) && !hasPrefix(imp, []string{kit}) && !hasPrefix(imp, kitDeps):
				t.Errorf("%s imports %s: %s (%v)", rel, imp, ruleKit, kitDeps)
			case rel == "internal/usage" && imp == mod+"internal/audit":
				t.Errorf("%s imports %s: %s", rel, imp, ruleUsageAudit)
			case rel == "internal/counter" && !isStd(imp) && imp != mod+"internal/limit":
				t.Errorf("%s imports %s: %s", rel, imp, ruleCounter)
			case rel == "web" && ours:
				t.Errorf("%s imports %s: %s", rel, imp, ruleWeb)
			case strings.HasSuffix(imp, "/sqlcgen") && p.ImportPath != strings.TrimSuffix(imp, "/sqlcgen"):
				t.Errorf("%s imports %s: %s", rel, imp, ruleSqlc)
			case imp == root && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s imports %s: %s", rel, imp, ruleRoot)
			case isAdapter(imp) && !isWiring(rel) && !isTestInfra && !adapter:
				t.Errorf("%s imports the adapter %s: %s", rel, imp, ruleAdapters)
			case hasPrefix(imp, testOnly) && !isTestInfra:
				t.Errorf("%s imports %s: %s", rel, imp, ruleTestOnly)
			case adapter && hasPrefix(imp, webLayers):
				t.Errorf("%s imports %s: %s", rel, imp, ruleAdapterWeb)
			case hasPrefix(imp, drivers) && !adapter && !isTestInfra && !isWiring(rel):
				t.Errorf("%s imports the driver %s: %s", rel, imp, ruleDrivers)
			case strings.HasPrefix(rel, "internal/") && strings.HasPrefix(imp, mod+"cmd/"):
				t.Errorf("%s imports %s: %s", rel, imp, ruleCmd)
			case isClient && (strings.HasPrefix(imp, mod+"internal/") || strings.HasPrefix(imp, mod+"cmd/")):
				t.Errorf("%s imports %s: %s", rel, imp, ruleClientInternal)
			case rel == "client" && !isStd(imp):
				t.Errorf("%s imports %s: %s", rel, imp, ruleClientStd)
			case hasPrefix(p.ImportPath, observers) && hasPrefix(imp, []string{mod + "internal/gate"}):
				t.Errorf("%s imports %s: %s", rel, imp, ruleObservers)
			case hasPrefix(p.ImportPath, webLayers) && (imp == mod+"internal/counter" || imp == mod+"internal/limit"):
				t.Errorf("%s imports %s: %s", rel, imp, ruleWebCounters)
			case isClient && !isStd(imp) && !ours && !hasPrefix(imp, clientDeps):
				t.Errorf("%s imports %s: %s (%v)", rel, imp, ruleClientDeps, clientDeps)
			}
		}
	}
}
