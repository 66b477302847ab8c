package pglocal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// lockRetry is how often a lock another process holds is tried again.
const lockRetry = 50 * time.Millisecond

// Open returns a cluster on dir shared between processes: the one already
// running there, joined, or else one Open starts as Start does. This is how
// `tollgate serve` and every operator command beside it use the same
// embedded database.
//
// Two lock files beside dir (dir.start.lock, dir.use.lock) order the
// processes. The start lock makes finding or starting a server one step, so
// that two processes never start two servers on dir. Every process using the
// server holds the use lock shared; the process that started the server, on
// Stop, waits to hold it alone before stopping the server, so that the
// server outlives every process that joined it. A process that joins a
// server being stopped waits for the stop and starts a new one.
//
// A server is joined when postmaster.pid names a live postgres that is ready
// and answers on its port; one still starting or stopping is waited out.
func Open(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open postgresql: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("open postgresql in %s: %w", dir, err)
	}
	starting := flock.New(dir + ".start.lock")
	if err := lockWait(ctx, starting.TryLock, "start", opts); err != nil {
		return nil, fmt.Errorf("open postgresql in %s: %w", dir, err)
	}
	defer func() { _ = starting.Unlock() }()
	use := flock.New(dir + ".use.lock")
	if err := lockWait(ctx, use.TryRLock, "use", opts); err != nil {
		return nil, fmt.Errorf("open postgresql in %s: %w", dir, err)
	}
	port, err := running(ctx, dir)
	if err != nil {
		_ = use.Unlock()
		return nil, fmt.Errorf("open postgresql in %s: %w", dir, err)
	}
	if port != 0 {
		opts.logf("joined the postgresql already running on 127.0.0.1:%d, data in %s", port, dir)
		return &Cluster{port: port, use: use, logf: opts.logf}, nil
	}
	c, err := Start(ctx, dir, opts)
	if err != nil {
		_ = use.Unlock()
		return nil, err
	}
	c.use, c.logf = use, opts.logf
	return c, nil
}

// lockWait takes a lock with try, retrying until ctx ends, and says once
// that it waits for another process.
func lockWait(ctx context.Context, try func() (bool, error), what string, opts Options) error {
	said := false
	for {
		ok, err := try()
		if err != nil {
			return fmt.Errorf("%s lock: %w", what, err)
		}
		if ok {
			return nil
		}
		if !said {
			opts.logf("waiting for another process holding the %s lock of the cluster", what)
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the %s lock: %w", what, ctx.Err())
		case <-time.After(lockRetry):
		}
	}
}

// running returns the port of the postgres serving dir, or 0 when none runs.
// A server that is alive but not ready (starting, stopping) is waited for
// until it is ready or gone, for as long as a start may take.
func running(ctx context.Context, dir string) (int, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		pf, err := readPidFile(dir)
		if err != nil {
			return 0, err
		}
		if pf.pid == 0 || pf.pid == os.Getpid() || !isPostgres(pf.pid) {
			return 0, nil
		}
		if pf.status == "ready" && answers(ctx, pf.port) {
			return pf.port, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("postgres (pid %d) runs on it but has not answered on port %d for %s; stop it (kill -INT %d) and start again", pf.pid, pf.port, startTimeout, pf.pid)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for postgres (pid %d): %w", pf.pid, ctx.Err())
		case <-time.After(lockRetry):
		}
	}
}

// pidFile is what postmaster.pid tells of a server (PostgreSQL 10 and
// later): line 1 its pid, 4 its port, 8 its status.
type pidFile struct {
	pid, port int
	status    string
}

// readPidFile reads dir's postmaster.pid; a missing or partly written one
// reads as the zero pidFile.
func readPidFile(dir string) (pidFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return pidFile{}, nil
	}
	if err != nil {
		return pidFile{}, err
	}
	lines := strings.Split(string(b), "\n")
	var pf pidFile
	pf.pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	if len(lines) >= 4 {
		pf.port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	if len(lines) >= 8 {
		pf.status = strings.TrimSpace(lines[7])
	}
	return pf, nil
}

// answers reports whether a PostgreSQL server answers on 127.0.0.1:port: it
// sends the protocol's SSLRequest, which any server answers with one byte,
// S or N, before authentication.
func answers(ctx context.Context, port int) bool {
	if port <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 80877103)
	if _, err := conn.Write(req); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == 'S' || b[0] == 'N'
}

// release gives up the use lock of a shared cluster. The process that
// started the server first waits until no other process uses it.
func (c *Cluster) release() error {
	if c.use == nil {
		return nil
	}
	path := c.use.Path()
	if err := c.use.Unlock(); err != nil {
		return err
	}
	if c.cmd == nil {
		return nil
	}
	alone := flock.New(path)
	ok, err := alone.TryLock()
	if err == nil && !ok {
		c.logf("waiting for the other processes using postgres on port %d to finish before stopping it", c.port)
		err = alone.Lock()
	}
	if err != nil {
		return err
	}
	c.alone = alone
	return nil
}
