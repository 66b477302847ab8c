package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startThrowaway starts redis-server from the machine's binary on a free
// loopback port and returns its URL and a function that stops it. The server
// keeps nothing on disk and, on Linux, dies with the test binary even when a
// test panics.
func startThrowaway() (string, func(), error) {
	bin, err := findRedis()
	if err != nil {
		return "", nil, err
	}
	// A free port can be taken between choosing and binding it: try again.
	for attempt := 1; ; attempt++ {
		url, stop, err := startRedis(bin, 0)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			return url, stop, err
		}
	}
}

func findRedis() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("throwaway server (REDIS_URL is unset): no redis-server on PATH or in /usr/bin, /usr/sbin; install it (Debian/Ubuntu: apt-get install redis-server)")
}

var errPortTaken = errors.New("port taken")

// startRedis starts redis-server on port, or on a free one when port is 0.
func startRedis(bin string, port int) (string, func(), error) {
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, fmt.Errorf("throwaway server: find a free port: %w", err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	args := []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no"}
	if deathSignal() {
		// setpriv execs redis-server in its own process, so the parent-death
		// signal it sets applies to redis-server.
		args = append([]string{"setpriv", "--pdeathsig", "KILL", "--"}, args...)
	}
	out := &tailBuffer{}
	cmd := exec.Command(args[0], args[1:]...)
	// Nothing should be written, but never into the source tree.
	cmd.Dir = os.TempDir()
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("throwaway server: run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() error {
		select {
		case <-exited:
			return fmt.Errorf("redis-server had exited: %v", waitErr)
		default:
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			_ = cmd.Process.Kill()
		}
		select {
		case <-exited:
			return nil
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("redis-server did not stop within 10s; killed it")
		}
	}

	deadline := time.After(15 * time.Second)
	for {
		if ping(addr) {
			url := "redis://" + addr + "/0"
			return url, func() {
				if err := stop(); err != nil {
					fmt.Fprintf(os.Stderr, "redistest: stop throwaway server: %v\n", err)
				}
			}, nil
		}
		select {
		case <-exited:
			if strings.Contains(out.String(), "Address already in use") {
				return "", nil, errPortTaken
			}
			return "", nil, fmt.Errorf("throwaway server: redis-server exited during start-up: %v\n%s", waitErr, out.String())
		case <-deadline:
			_ = stop()
			return "", nil, fmt.Errorf("throwaway server: redis-server not answering PING on %s after 15s\n%s", addr, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// deathSignal reports whether redis-server can be started under util-linux's
// setpriv with a parent-death signal.
var deathSignal = sync.OnceValue(func() bool {
	if runtime.GOOS != "linux" {
		return false
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		return false
	}
	help, _ := exec.Command("setpriv", "--help").CombinedOutput()
	return bytes.Contains(help, []byte("--pdeathsig"))
})

// ping reports whether a Redis at addr answers PING.
func ping(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 4096 {
		b.buf = b.buf[len(b.buf)-4096:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
