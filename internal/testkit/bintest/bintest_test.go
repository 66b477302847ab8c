package bintest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRunRemovesTheFolderWhenTheBuildFails: a build that fails leaves no
// folder behind (the TypeScript suite's TestMain exited before removing
// its own).
func TestRunRemovesTheFolderWhenTheBuildFails(t *testing.T) {
	var binary string
	ran := false
	code := run("github.com/tollgate/tollgate/internal/testkit/bintest/nosuchpackage", func() int { ran = true; return 0 }, &binary)
	if code != 1 || ran {
		t.Errorf("run with a failing build: code %d, tests ran %t; want 1, false", code, ran)
	}
	if binary == "" {
		t.Fatal("run set no binary path")
	}
	if _, err := os.Stat(filepath.Dir(binary)); !os.IsNotExist(err) {
		os.RemoveAll(filepath.Dir(binary))
		t.Errorf("build folder %s still there after a failed build (stat: %v)", filepath.Dir(binary), err)
	}
}
