// Package pglocal runs a local PostgreSQL cluster from the machine's own
// binaries: the persistent database of `make run` when DATABASE_URL is unset,
// and the throwaway servers of pgtest. It exists so that neither needs a
// PostgreSQL installed as a service, nor Docker.
//
// The server is a child process of the caller, listening on 127.0.0.1 only,
// with trust authentication. As root it runs as the unprivileged postgres
// user, since initdb and postgres refuse root.
//
// pglocal imports nothing of ours and no database driver; it locks files
// with gofrs/flock.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// superuser is the role initdb creates and URL connects as, the same whoever
// runs the cluster.
const superuser = "postgres"

const (
	// startTimeout bounds a start that ctx leaves unbounded: pg_ctl's default.
	startTimeout = 60 * time.Second
	// stopTimeout bounds a fast shutdown before the server is killed.
	stopTimeout = 60 * time.Second
	// maxSocketPath is the longest unix socket path Linux accepts
	// (sizeof(sun_path) - 1); postgres refuses to start past it.
	maxSocketPath = 107
)

// Find returns the directory holding the PostgreSQL server binaries initdb
// and postgres: the one of the initdb on PATH, else the newest
// /usr/lib/postgresql/*/bin (Debian's layout). With none, the error says
// which package to install.
func Find() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if d, err := filepath.Abs(filepath.Dir(p)); err == nil && hasServer(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, d := range dirs {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", errors.New("find postgresql: no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin; install the server (Debian/Ubuntu: apt-get install postgresql)")
}

// hasServer reports whether dir holds executable initdb and postgres files.
func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions orders Debian's version directory names ("9.6" < "15").
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// Options tunes Start. The zero value suits a persistent development cluster.
type Options struct {
	// Logf, when set, receives one call per line of progress and of the
	// server's own log. It may be called from another goroutine until Stop
	// returns.
	Logf func(format string, args ...any)
	// Port is the loopback TCP port to listen on; 0 picks a free one.
	Port int
	// Ephemeral trades durability for speed, for data that may be lost such
	// as a test server's: initdb skips its final sync and the server runs
	// with fsync, synchronous_commit and full_page_writes off. A clean Stop
	// still keeps every committed row; an OS crash may corrupt the cluster.
	Ephemeral bool
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Cluster is a running postgres started by Start. Its methods are safe for
// concurrent use.
type Cluster struct {
	port   int
	cmd    *exec.Cmd
	out    *lineWriter
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's result, set before exited closes

	// use is the shared lock of a cluster from Open, alone the exclusive
	// one its starter takes before stopping it; both nil from Start.
	use, alone *flock.Flock
	logf       func(format string, args ...any)

	stopOnce sync.Once
	stopErr  error
}

// URL returns the connection URL of the cluster's maintenance database,
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable. Any role on
// the loopback interface is trusted, so it carries no password.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, c.port)
}

// Start initialises dir as a new cluster when it is empty or missing
// (initdb: UTF8, C locale, trust authentication, superuser postgres) or reuses
// the cluster already there, and starts postgres on it: listening on
// 127.0.0.1 only, on opts.Port or a free port, with its unix socket inside
// dir, and max_connections=200. It returns once the server accepts
// connections: after a few seconds for a new cluster, well under one for an
// existing one.
//
// As root, the server runs as the OS user postgres, which must exist, must
// own an existing cluster, and must be able to reach dir: every parent
// directory must be searchable by it (a temporary directory qualifies, a
// directory under a 0700 /root does not). A missing dir is created, its
// parents with mode 0755.
//
// Start fails, naming the fix, when a server from an earlier run is still
// running on dir. Cancelling ctx abandons the start and stops the server; it
// has no effect once Start has returned. The server also gets a fast shutdown
// when the calling process dies (Linux only), and its data stay in dir.
func Start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("start postgresql: %w", err)
	}
	// The socket file is .s.PGSQL.<port>, at most five digits.
	if n := len(dir) + len("/.s.PGSQL.65535"); n > maxSocketPath {
		return nil, fmt.Errorf("start postgresql in %s: socket path would be %d bytes, over the limit of %d; use a shorter directory", dir, n, maxSocketPath)
	}
	as, err := runAs()
	if err != nil {
		return nil, fmt.Errorf("start postgresql in %s: %w", dir, err)
	}
	fresh, err := prepare(dir, as)
	if err != nil {
		return nil, fmt.Errorf("start postgresql in %s: %w", dir, err)
	}
	if err := checkNotRunning(dir); err != nil {
		return nil, fmt.Errorf("start postgresql in %s: %w", dir, err)
	}
	if fresh {
		if err := initdb(ctx, bin, dir, as, opts); err != nil {
			return nil, err
		}
	}
	// A free port can be taken between choosing and binding it: try again.
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, fmt.Errorf("start postgresql in %s: %w", dir, err)
			}
		}
		c, err := start(ctx, bin, dir, port, as, opts)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errPortTaken) || opts.Port != 0 || attempt == 3 {
			return nil, fmt.Errorf("start postgresql in %s: %w", dir, err)
		}
		opts.logf("port %d was taken; trying another", port)
	}
}

// prepare makes dir ready for initdb or reuse and reports whether it holds no
// cluster yet.
func prepare(dir string, as *account) (fresh bool, err error) {
	if as != nil {
		// Checked before creating anything: the deepest existing parent
		// decides, since the ones MkdirAll adds are searchable by all.
		p := filepath.Dir(dir)
		for {
			if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
				break
			}
			p = filepath.Dir(p)
		}
		if err := as.checkReach(p); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
			return false, errors.New("directory is not empty and holds no postgresql cluster (no PG_VERSION)")
		}
		if as != nil {
			if err := as.checkOwns(dir); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	if as != nil {
		if err := os.Chown(dir, as.uid, as.gid); err != nil {
			return false, fmt.Errorf("give directory to user %s: %w", as.name, err)
		}
	}
	// postgres insists on 0700 or 0750; Mkdir's mode went through the umask
	// and an existing empty dir may have any.
	return true, os.Chmod(dir, 0o700)
}

// checkNotRunning fails when postmaster.pid names a live postgres: a server
// from an earlier run, perhaps serving another process. A stale file is left
// for postgres, which replaces it.
func checkNotRunning(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 || pid == os.Getpid() || !isPostgres(pid) {
		return nil
	}
	return fmt.Errorf("a postgres from an earlier run is still running on it (pid %d); stop it (kill -INT %d) and start again", pid, pid)
}

// isPostgres reports whether process pid is alive and, where /proc tells,
// runs postgres: after a reboot a stale pid may name anything.
func isPostgres(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil || signalZero(p) != nil {
		return false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) || !procMounted()
	}
	return strings.TrimSpace(string(comm)) == "postgres"
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/comm")
	return err == nil
}

func initdb(ctx context.Context, bin, dir string, as *account, opts Options) error {
	opts.logf("initialising postgresql cluster in %s", dir)
	began := time.Now()
	args := []string{"-D", dir, "-U", superuser, "-E", "UTF8", "--locale=C", "-A", "trust"}
	if opts.Ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir = dir
	cmd.SysProcAttr = as.procAttr(false)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// initdb cleans up after its own failures but not after being
		// killed; the directory was empty before, so empty it again.
		if entries, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("initdb %s: %w%s", dir, err, tail(strings.Split(string(out), "\n")))
	}
	opts.logf("initialised postgresql cluster in %s in %s", dir, time.Since(began).Round(time.Millisecond))
	return nil
}

// errPortTaken marks a start that failed only because another process bound
// the port first.
var errPortTaken = errors.New("port taken")

func start(ctx context.Context, bin, dir string, port int, as *account, opts Options) (*Cluster, error) {
	began := time.Now()
	args := []string{"-D", dir, "-k", dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=200",
	}
	if opts.Ephemeral {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	out := &lineWriter{logf: opts.Logf}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = as.procAttr(true)
	// A backend orphaned by a killed postmaster may hold the output pipe
	// open for a moment; Wait, and so Stop, must not hang on it.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run postgres: %w", err)
	}
	c := &Cluster{port: port, cmd: cmd, out: out, exited: make(chan struct{}), logf: opts.logf}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()

	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(dir, cmd.Process.Pid) {
			opts.logf("postgresql ready on 127.0.0.1:%d, data in %s, after %s", port, dir, time.Since(began).Round(time.Millisecond))
			return c, nil
		}
		select {
		case <-tick.C:
			continue
		case <-c.exited:
			lines := out.lines()
			for _, l := range lines {
				if strings.Contains(l, "could not bind") || strings.Contains(l, "Address already in use") {
					return nil, fmt.Errorf("postgres on port %d: %w", port, errPortTaken)
				}
			}
			return nil, fmt.Errorf("postgres exited during start-up: %v%s", c.err, tail(lines))
		case <-ctx.Done():
			_ = c.Stop()
			return nil, fmt.Errorf("wait for postgres: %w", ctx.Err())
		case <-deadline.C:
			_ = c.Stop()
			return nil, fmt.Errorf("postgres not ready after %s%s", startTimeout, tail(out.lines()))
		}
	}
}

// ready reports whether postmaster.pid says the server pid accepts
// connections, as pg_ctl -w decides (PostgreSQL 10 and later).
func ready(dir string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) >= 8 &&
		strings.TrimSpace(lines[0]) == strconv.Itoa(pid) &&
		strings.TrimSpace(lines[7]) == "ready"
}

// Stop shuts the server down fast: it disconnects clients, rolls back their
// transactions, writes a checkpoint and exits. Stop waits for the exit, up to
// a minute before killing it. Only the first call acts; later ones return
// its result. It returns an error when the server had already died.
//
// On a cluster from Open, Stop of a process that joined the server only
// releases it; Stop of the process that started it first waits until every
// process that joined has released it.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if err := c.release(); err != nil {
			c.stopErr = fmt.Errorf("stop postgres: release the cluster: %w", err)
		}
		if c.cmd != nil {
			c.stopErr = errors.Join(c.stopErr, c.stop())
		}
		if c.alone != nil {
			_ = c.alone.Unlock()
		}
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	select {
	case <-c.exited:
		return fmt.Errorf("postgres had exited: %v%s", c.err, tail(c.out.lines()))
	default:
	}
	// SIGINT is postgres's fast shutdown; where signals do not exist, kill.
	if err := c.cmd.Process.Signal(os.Interrupt); err != nil {
		_ = c.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-c.exited:
	case <-timer.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("stop postgres: no exit after %s; killed it", stopTimeout)
	}
	if c.err != nil {
		return fmt.Errorf("stop postgres: %v%s", c.err, tail(c.out.lines()))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail formats the last lines of a program's output for an error message.
func tail(lines []string) string {
	var kept []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			kept = append(kept, l)
		}
	}
	if len(kept) > 10 {
		kept = kept[len(kept)-10:]
	}
	if len(kept) == 0 {
		return ""
	}
	return "\n\t" + strings.Join(kept, "\n\t")
}

// lineWriter hands each complete line written to it to logf and keeps the
// last few for error messages.
type lineWriter struct {
	logf func(format string, args ...any)

	mu      sync.Mutex
	partial []byte
	last    []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := slices.Index(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if w.logf != nil {
			w.logf("postgres: %s", line)
		}
		w.last = append(w.last, line)
		if len(w.last) > 20 {
			w.last = w.last[1:]
		}
	}
	return len(p), nil
}

func (w *lineWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := slices.Clone(w.last)
	if len(w.partial) > 0 {
		lines = append(lines, string(w.partial))
	}
	return lines
}

// ErrUnreachable is returned (wrapped) by Start, when running as root, if the
// unprivileged user that runs postgres cannot reach the data directory
// because a parent directory is closed to it.
var ErrUnreachable = errors.New("data directory unreachable by the postgres user")
