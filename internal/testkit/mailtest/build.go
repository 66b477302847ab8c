package mailtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// Version is the mailpit release the kit builds and runs.
const Version = "v1.33.1"

// binary returns the path of mailpit Version, building it on first use
// into the user's cache (~/.cache/tollgate/mailpit-<Version>/mailpit) with
// `go install` run outside Tollgate's module, so that go.mod never gains
// mailpit's dependencies. A file lock makes parallel test binaries build it
// once: the others wait and find it built.
func binary() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory: %w", err)
	}
	dir := filepath.Join(cache, "tollgate", "mailpit-"+Version)
	bin := filepath.Join(dir, "mailpit")
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	lock := flock.New(dir + ".lock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if ok, err := lock.TryLockContext(ctx, 200*time.Millisecond); err != nil || !ok {
		return "", fmt.Errorf("lock %s: %v", lock.Path(), cmpErr(err, ctx.Err()))
	}
	defer lock.Unlock()
	// Another binary may have built it while this one waited.
	if isExecutable(bin) {
		return bin, nil
	}
	return bin, build(ctx, dir, bin)
}

// build runs go install into a scratch directory beside dir and moves the
// binary into place only once it is whole.
func build(ctx context.Context, dir, bin string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "mailpit-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/axllent/mailpit@"+Version)
	// Outside any module, and with no go.work, go install builds mailpit
	// with its own go.mod's dependencies.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install github.com/axllent/mailpit@%s: %v\n%s", Version, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "mailpit"), bin); err != nil {
		return fmt.Errorf("install mailpit: %w", err)
	}
	return nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// cmpErr is the first non-nil error of errs, or "not locked".
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return errors.New("not locked")
}
