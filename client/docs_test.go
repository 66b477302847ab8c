package client_test

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDocsIntegrationCompiles: the Go client program in docs/api.md is
// Example, which the compiler checks: main's body is Example's, and the
// page imports what the body uses, all of which Example's file imports.
func TestDocsIntegrationCompiles(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/api.md has no ```go block with package main")
	}
	program := string(m[1])
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	got, want := body(t, program, "func main() {\n"), body(t, string(example), "func Example() {\n")
	if got != want {
		t.Fatalf("docs/api.md's main differs from Example:\n--- docs/api.md\n%s\n--- Example\n%s", got, want)
	}
	readmeImports, exampleImports := importsOf(t, program), importsOf(t, string(example))
	for p := range readmeImports {
		if !strings.Contains(got, path.Base(p)+".") {
			t.Errorf("docs/api.md imports %s and does not use it", p)
		}
		if !exampleImports[p] {
			t.Errorf("docs/api.md imports %s, which Example's file does not", p)
		}
	}
	for p := range exampleImports {
		if strings.Contains(got, path.Base(p)+".") && !readmeImports[p] {
			t.Errorf("docs/api.md uses %s and does not import it", p)
		}
	}
}

// importsOf returns the paths of src's import block.
func importsOf(t *testing.T, src string) map[string]bool {
	t.Helper()
	m := regexp.MustCompile(`(?s)import \((.*?)\)`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("no import block")
	}
	paths := map[string]bool{}
	for _, line := range strings.Split(m[1], "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		p, err := strconv.Unquote(line)
		if err != nil {
			t.Fatalf("import %s: %v", line, err)
		}
		paths[p] = true
	}
	return paths
}

// body returns the text of src from the line after start up to the
// function's closing brace.
func body(t *testing.T, src, start string) string {
	t.Helper()
	i := strings.Index(src, start)
	if i < 0 {
		t.Fatalf("no %q", start)
	}
	rest := src[i+len(start):]
	j := strings.Index(rest, "\n}\n")
	if j < 0 {
		t.Fatalf("no end of %q", start)
	}
	return rest[:j]
}
