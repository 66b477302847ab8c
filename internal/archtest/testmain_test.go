package archtest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// holders are the test kits whose TestMain helpers hold the machine's test
// lock (internal/testkit/solo) for a test binary's run.
var holders = map[string]bool{
	mod + "internal/testkit/solo":                     true,
	mod + "internal/testkit/pgtest":                   true,
	mod + "internal/testkit/redistest":                true,
	mod + "internal/testkit/bintest":                  true,
	mod + "internal/billing/stripeapi/stripemocktest": true,
}

// TestEveryTestBinaryHoldsTheLock: make test is one `go test ./...`, and
// what keeps the tests that must run alone apart from the rest is the lock
// of internal/testkit/solo, which only a binary that holds it respects.
// Every package with tests has a TestMain that calls a holder's helper
// (solo.Main, pgtest.Main, bintest.Run, …). solo's own tests use lock
// files of their own.
func TestEveryTestBinaryHoldsTheLock(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles", mod+"...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	checked := 0
	for {
		var p struct {
			ImportPath, Dir           string
			TestGoFiles, XTestGoFiles []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		files := append(p.TestGoFiles, p.XTestGoFiles...)
		if len(files) == 0 || p.ImportPath == mod+"internal/testkit/solo" {
			continue
		}
		checked++
		if !holdsLock(t, p.ImportPath, p.Dir, files) {
			t.Errorf("%s: its tests do not hold the test lock: add func TestMain(m *testing.M) { solo.Main(m) } "+
				"(or pgtest.Main, redistest.Main, bintest.Main when they need a server)", p.ImportPath)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d packages with tests: go list read the wrong tree", checked)
	}
}

// holdsLock reports whether one of files defines a TestMain that calls a
// holder's function (or, in a holder, one of its own).
func holdsLock(t *testing.T, path, dir string, files []string) bool {
	t.Helper()
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The names this file gives the holders it imports.
		names := map[string]bool{}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if !holders[ip] {
				continue
			}
			n := filepath.Base(ip)
			if imp.Name != nil {
				n = imp.Name.Name
			}
			names[n] = true
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "TestMain" || fn.Body == nil {
				continue
			}
			found := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fun := call.Fun.(type) {
				case *ast.SelectorExpr:
					if x, ok := fun.X.(*ast.Ident); ok && names[x.Name] {
						found = true
					}
				case *ast.Ident:
					if holders[path] && fun.Name == "Main" {
						found = true
					}
				}
				return !found
			})
			return found
		}
	}
	return false
}
