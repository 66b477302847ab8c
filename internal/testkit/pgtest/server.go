package pgtest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tollgate/tollgate/internal/kit/pglocal"
)

// startThrowaway starts a PostgreSQL server from the machine's binaries in a
// temporary folder and returns its maintenance URL and a function that stops
// it and removes the folder. The server trades durability for speed and dies
// with the test binary, even one that panics (on Linux).
func startThrowaway() (string, func(), error) {
	// Not t.TempDir: its parent is 0700, out of reach of the user postgres
	// that runs the server when tests run as root. MkdirTemp's parent is
	// os.TempDir, normally /tmp.
	dir, err := os.MkdirTemp("", "tollgate-pgtest-")
	if err != nil {
		return "", nil, fmt.Errorf("throwaway server: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.Start(ctx, dir, pglocal.Options{Ephemeral: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("throwaway server (DATABASE_URL is unset): %w", err)
	}
	stop := func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: remove throwaway server: %v\n", err)
		}
	}
	return c.URL(), stop, nil
}
