package blackbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"gopkg.in/yaml.v3"
)

// repoRoot is the repository, the Docker build context.
const repoRoot = ".."

// contextMatcher returns a func reporting whether Docker sends path (slash-separated, relative to
// the context's root) with the build context, reading .dockerignore with
// Docker's own pattern matcher.
func contextMatcher(t *testing.T) func(path string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return func(path string) bool {
		excluded, err := pm.MatchesOrParentMatches(filepath.FromSlash(path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return !excluded
	}
}

// TestDockerBuildContext: the build context leaves out the repository's
// history, build output, test binaries, the embedded PostgreSQL's data (a
// folder the postgres user owns, which the Docker client cannot even read),
// npm's folders and the compose secrets; and it keeps every file git tracks,
// which is all the build needs.
func TestDockerBuildContext(t *testing.T) {
	inContext := contextMatcher(t)
	for _, p := range []string{
		".git/HEAD", ".git/objects/ab/cdef",
		"bin/tollgate", "tollgate",
		"cmd/tollgate/tollgate.test", "blackbox/blackbox.test", "cover.out",
		".tollgate/pgdata/PG_VERSION", ".tollgate/demo-keys.json", ".tollgate/pgdata.start.lock",
		"node_modules/left-pad/index.js", "clients/js/node_modules/x/package.json",
		"scripts/redocly/node_modules/.bin/redocly",
		".env",
	} {
		if inContext(p) {
			t.Errorf("%s is in the Docker build context", p)
		}
	}
	out, err := exec.Command("git", "-C", repoRoot, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	tracked := strings.Fields(string(out))
	if len(tracked) < 100 {
		t.Fatalf("git ls-files listed %d files", len(tracked))
	}
	for _, p := range append(tracked, ".env.example") {
		if !inContext(p) {
			t.Errorf("%s, which git tracks, is left out of the Docker build context", p)
		}
	}
}

// TestComposeInstances: each Tollgate of docker-compose.yml has its own
// public address (the links it makes point at itself), defaulting to the
// port it publishes, and takes its secrets from the environment or .env,
// never from a value written in the file.
func TestComposeInstances(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for name, s := range compose.Services {
		if s.Build == nil {
			continue // not Tollgate
		}
		env := s.Environment
		public := env["TOLLGATE_PUBLIC_URL"]
		if len(s.Ports) != 1 || !strings.HasPrefix(public, "${") {
			t.Errorf("%s: ports %v, TOLLGATE_PUBLIC_URL %q; want one port and an address from the environment", name, s.Ports, public)
			continue
		}
		hostPort, _, _ := strings.Cut(s.Ports[0], ":")
		if !strings.HasSuffix(public, ":-http://localhost:"+hostPort+"}") {
			t.Errorf("%s publishes port %s, but its TOLLGATE_PUBLIC_URL defaults to %q", name, hostPort, public)
		}
		if other, ok := seen[public]; ok {
			t.Errorf("%s and %s share TOLLGATE_PUBLIC_URL %s", name, other, public)
		}
		seen[public] = name
		for _, secret := range []string{"TOLLGATE_PEPPER", "STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET"} {
			if v, ok := env[secret]; ok && !strings.HasPrefix(v, "${") {
				t.Errorf("%s: %s is written in docker-compose.yml", name, secret)
			}
		}
	}
	if len(seen) != 2 {
		t.Errorf("%d Tollgate instances in docker-compose.yml, want 2", len(seen))
	}
}
