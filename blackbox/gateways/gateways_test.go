package gateways

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var binary string

func TestMain(m *testing.M) { bintest.Main(m, &binary) }

const pepper = "gateways-pepper-0123456789abcdef0123456789"

// The policy every recipe checks, as the doc names it: 10 an hour per
// client, a token bucket, so that no window boundary falls inside a test
// and lets more through.
const (
	policyName = "pages"
	policyBody = `{"limit":10,"window":"1h","algorithm":"token_bucket"}`
	limit      = 10
)

// recipe reads the fenced block marked "<!-- test: name -->" in
// docs/gateways.md, with the doc's placeholders replaced by vars.
func recipe(t *testing.T, name string, vars map[string]string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateways.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- test: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```")
	m := re.FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/gateways.md has no block marked <!-- test: %s -->", name)
	}
	block := string(m[1])
	for _, k := range []string{"TOLLGATE_1", "UPSTREAM", "API_KEY"} {
		if !strings.Contains(block, k) {
			t.Fatalf("recipe %s: no %s to replace", name, k)
		}
	}
	for k, v := range vars {
		block = strings.ReplaceAll(block, k, v)
	}
	return block
}

// stack is what the proxies stand in front of: two Tollgate instances on
// one database, a tenant with the policy, and the upstream.
type stack struct {
	tollgates []*bintest.Server
	env       []string
	key       string
	up        *upstream
}

func newStack(t *testing.T) *stack {
	t.Helper()
	dsn := pgtest.New(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dsn, "TOLLGATE_PEPPER=" + pepper, "TOLLGATE_LOG_FORMAT=text",
		// The proxies connect from 127.0.0.1; the clients from other
		// loopback addresses, which Tollgate must not believe.
		"TOLLGATE_TRUSTED_PROXIES=127.0.0.1/32",
		// A loaded 2-core box must not turn answers into fail-open ones.
		"TOLLGATE_COUNTER_TIMEOUT=2s",
	}
	s := &stack{up: newUpstream(t)}
	for range 2 {
		s.tollgates = append(s.tollgates, bintest.Start(t, binary, env))
	}
	s.env = env
	var nt struct {
		LiveKey string `json:"live_key"`
	}
	s.cli(t, &nt, "tenants", "create", "--name", "gateways", "--plan", "pro")
	s.key = nt.LiveKey
	s.put(t, s.key)
	return s
}

// cli runs a tollgate command on the stack's database and decodes what it
// printed into v (nil: nothing to decode).
func (s *stack) cli(t *testing.T, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = s.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tollgate %s: %v", strings.Join(args, " "), err)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("tollgate %s printed %q: %v", strings.Join(args, " "), out, err)
		}
	}
}

// put makes the policy for key's tenant and waits until the second
// instance has it.
func (s *stack) put(t *testing.T, key string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.tollgates[0].URL+"/v1/policies/"+policyName, strings.NewReader(policyBody))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT policy: %d", resp.StatusCode)
	}
	eventually.True(t, 5*time.Second, "policy visible on the second instance", func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.tollgates[1].URL+"/v1/policies/"+policyName, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// heldBack makes a tenant on a plan of one check a month, the policy, and
// spends the check: its key's checks are refused by the allotment from
// then on, on every instance.
func (s *stack) heldBack(t *testing.T) string {
	t.Helper()
	s.cli(t, nil, "plans", "set", "starter", "--monthly-checks", "1")
	var nt struct {
		LiveKey string `json:"live_key"`
	}
	s.cli(t, &nt, "tenants", "create", "--name", "held back", "--plan", "starter")
	s.put(t, nt.LiveKey)
	for _, tg := range s.tollgates {
		eventually.True(t, 5*time.Second, "the allotment spent, seen by "+tg.URL, func() bool {
			req, _ := http.NewRequest(http.MethodGet, tg.URL+"/v1/forward-auth/"+policyName, nil)
			req.Header.Set("Authorization", "Bearer "+nt.LiveKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 503 && resp.Header.Get("X-RateLimit-Layer") == "allotment"
		})
	}
	return nt.LiveKey
}

// vars are the words of the doc's recipes a test replaces.
func (s *stack) vars(key string, listen string) map[string]string {
	return map[string]string{
		"TOLLGATE_1": s.tollgates[0].Addr, "TOLLGATE_2": s.tollgates[1].Addr,
		"UPSTREAM": s.up.addr, "API_KEY": key,
		"LISTEN": listen, "SITE": "http://" + listen,
	}
}

// upstream is the service behind the proxies: it counts the requests that
// reach it by the X-Test-Client header the test's clients send.
type upstream struct {
	addr    string
	mu      sync.Mutex
	reached map[string]int
	bodies  map[string]string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{reached: map[string]int{}, bodies: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reached[r.Header.Get("X-Test-Client")]++
		if len(b) > 0 {
			u.bodies[r.Header.Get("X-Test-Client")] = string(b)
		}
		u.mu.Unlock()
		io.WriteString(w, "upstream\n")
	}))
	t.Cleanup(srv.Close)
	u.addr = strings.TrimPrefix(srv.URL, "http://")
	return u
}

func (u *upstream) count(client string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reached[client]
}

// proxy is a running nginx or Caddy.
type proxy struct {
	name string
	addr string
	cmd  *exec.Cmd
	logs *logbuf.Buffer
}

// startNginx runs nginx with the recipe site (an http-level block) as a
// single process of the test's own user, every file in a folder of its own.
func startNginx(t *testing.T, name, site, listen string) *proxy {
	t.Helper()
	dir := t.TempDir()
	main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log notice;
events { worker_connections 1024; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/site.conf;
}
`, dir)
	write(t, filepath.Join(dir, "nginx.conf"), main)
	write(t, filepath.Join(dir, "site.conf"), site)
	return run(t, name, listen, dir, nil, command("nginx"), "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
}

// startCaddy runs Caddy with the recipe site; its admin endpoint and
// automatic HTTPS are off, and its data folders are the test's.
func startCaddy(t *testing.T, name, site, listen string) *proxy {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "Caddyfile"), "{\n\tadmin off\n\tauto_https off\n}\n\n"+site)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	return run(t, name, listen, dir, env, command("caddy"), "run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
}

// command is the path of a proxy's program: on the PATH, or in /usr/sbin,
// where Debian puts nginx and which a user's PATH may lack.
func command(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return filepath.Join("/usr/sbin", name)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// run starts a proxy and waits until it accepts connections at listen.
func run(t *testing.T, name, listen, dir string, env []string, argv ...string) *proxy {
	t.Helper()
	p := &proxy{name: name, addr: listen, logs: &logbuf.Buffer{}}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir, p.cmd.Env = dir, env
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			errlog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("%s's log (tail):\n%s%s", name, bintest.Tail(string(errlog), 3000), bintest.Tail(p.logs.String(), 3000))
		}
	})
	taken := false
	eventually.NoError(t, 20*time.Second, name+" listening", func() error {
		select {
		case err := <-exited:
			exited <- err
			errlog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			if strings.Contains(strings.ToLower(string(errlog)+p.logs.String()), "address already in use") {
				// Another process bound the port after FreePort let it go.
				taken = true
				return nil
			}
			t.Fatalf("%s exited: %v\n%s%s", name, err, errlog, p.logs.String())
		default:
		}
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err
	})
	if taken {
		return nil
	}
	return p
}

// startOn starts a proxy with start on a free port, the site for that port
// from site; when another process took the port between FreePort and the
// proxy's own bind (tests beside this one start servers too), on another.
func startOn(t *testing.T, start func(t *testing.T, name, site, listen string) *proxy, name string, site func(listen string) string) *proxy {
	t.Helper()
	for range 5 {
		listen := bintest.FreePort(t)
		if p := start(t, name, site(listen), listen); p != nil {
			return p
		}
		t.Logf("%s: port %s taken meanwhile, trying another", name, listen)
	}
	t.Fatalf("%s: five ports taken before it could bind one", name)
	return nil
}

// client is one end user, at a loopback address of its own.
type client struct {
	name string
	http *http.Client
}

func newClient(name, from string) *client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &client{name: name, http: &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16},
	}}
}

// answer is what a client was answered.
type answer struct {
	status int
	header http.Header
	body   string
}

func (c *client) get(t *testing.T, p *proxy, method, body string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+p.addr+"/page", rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-Client", c.name)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Errorf("%s through %s: %v", c.name, p.name, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// burst sends n requests of c through p, conc at a time, with headers
// made for each, and returns the answers.
func (c *client) burst(t *testing.T, p *proxy, n, conc int, headers func(i int) []string) []answer {
	t.Helper()
	out := make([]answer, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var h []string
			if headers != nil {
				h = headers(i)
			}
			out[i] = c.get(t, p, http.MethodGet, "", h...)
		})
	}
	wg.Wait()
	return out
}

// exactly holds a burst's answers to the policy: limit allowed, with the
// RateLimit fields; the rest refused 429 with Retry-After and the fields;
// and exactly limit reached the upstream.
func (s *stack) exactly(t *testing.T, p *proxy, c *client, answers []answer) {
	t.Helper()
	allowed, refused := 0, 0
	for _, a := range answers {
		switch a.status {
		case 200:
			allowed++
			if !strings.HasPrefix(a.header.Get("RateLimit-Policy"), `"pages";q=10`) || !strings.HasPrefix(a.header.Get("RateLimit"), `"pages";r=`) {
				t.Errorf("%s, %s: allowed answer without the RateLimit fields: %v", p.name, c.name, a.header)
			}
		case 429:
			refused++
			retry, err := strconv.Atoi(a.header.Get("Retry-After"))
			if err != nil || retry < 1 || !strings.HasPrefix(a.header.Get("RateLimit"), `"pages";r=0;t=`+strconv.Itoa(retry)) {
				t.Errorf("%s, %s: refusal's Retry-After %q, RateLimit %q", p.name, c.name, a.header.Get("Retry-After"), a.header.Get("RateLimit"))
			}
		default:
			t.Errorf("%s, %s: answered %d %q", p.name, c.name, a.status, a.body)
		}
	}
	if allowed != limit || refused != len(answers)-limit {
		t.Errorf("%s, %s: %d requests: %d allowed, %d refused; want %d allowed", p.name, c.name, len(answers), allowed, refused, limit)
	}
	if n := s.up.count(c.name); n != limit {
		t.Errorf("%s, %s: %d requests reached the upstream, want %d", p.name, c.name, n, limit)
	}
}

// TestGateways runs the doc's nginx and Caddy recipes, fail open and fail
// closed, in front of the same two Tollgate instances: each client's limit
// exact across the instances, with the RateLimit fields on allowed answers
// and Retry-After on refusals; another client's budget its own; a client's
// spoofed X-Forwarded-For giving it no fresh budget; a request's body
// reaching the upstream; a key Tollgate refuses answered 500, whatever the
// fail mode; a tenant Tollgate holds back (its allotment spent, 503) let on
// by the fail-open recipes and refused by the fail-closed ones; then, with
// Tollgate stopped, the fail-open recipes passing
// requests on and the fail-closed ones answering 503.
func TestGateways(t *testing.T) {
	s := newStack(t)
	type kind struct {
		name  string
		start func(t *testing.T, name, site, listen string) *proxy
	}
	kinds := []kind{{"nginx", startNginx}, {"caddy", startCaddy}}
	var proxies []*proxy
	for _, k := range kinds {
		for _, mode := range []string{"open", "closed"} {
			name := k.name + "-" + mode
			proxies = append(proxies, startOn(t, k.start, name, func(listen string) string { return recipe(t, name, s.vars(s.key, listen)) }))
		}
	}

	for i, p := range proxies {
		t.Run(p.name, func(t *testing.T) {
			// Each recipe's clients at loopback addresses of their own:
			// every recipe checks the same policy by client address.
			at := func(j int) string { return fmt.Sprintf("127.0.%d.%d", 10+i, 2+j) }
			a, b := newClient(p.name+"/a", at(0)), newClient(p.name+"/b", at(1))
			s.exactly(t, p, a, a.burst(t, p, 3*limit, 6, nil))
			s.exactly(t, p, b, b.burst(t, p, limit+2, 2, nil))
			// A client that names another address in X-Forwarded-For, a new
			// one each time, is still itself.
			spoof := newClient(p.name+"/spoof", at(2))
			s.exactly(t, p, spoof, spoof.burst(t, p, limit+5, 3, func(i int) []string {
				return []string{"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1)}
			}))
			// A request with a body: the upstream gets it, Tollgate does not
			// (it never reads one).
			poster := newClient(p.name+"/post", at(3))
			if r := poster.get(t, p, http.MethodPost, `{"order":42}`); r.status != 200 {
				t.Errorf("POST with a body: %d %q", r.status, r.body)
			}
			s.up.mu.Lock()
			got := s.up.bodies[poster.name]
			s.up.mu.Unlock()
			if got != `{"order":42}` {
				t.Errorf("POST's body reached the upstream as %q", got)
			}
		})
	}

	t.Run("wrong-key", func(t *testing.T) {
		// A key Tollgate does not know is the configuration's fault: 500,
		// and nothing reaches the upstream, even when failing open.
		for _, k := range kinds {
			p := startOn(t, k.start, k.name+"-open-wrong-key", func(listen string) string {
				return recipe(t, k.name+"-open", s.vars("tg_live_"+strings.Repeat("x", 40), listen))
			})
			c := newClient(p.name, "127.0.1.2")
			if r := c.get(t, p, http.MethodGet, ""); r.status != 500 || s.up.count(c.name) != 0 {
				t.Errorf("%s: %d %q, %d reached the upstream", p.name, r.status, r.body, s.up.count(c.name))
			}
		}
	})

	t.Run("tenant-held-back", func(t *testing.T) {
		// A tenant whose monthly allotment is used up is refused as a
		// whole: Tollgate answers 503, and the proxy's fail mode decides.
		key := s.heldBack(t)
		for _, k := range kinds {
			for _, mode := range []string{"open", "closed"} {
				p := startOn(t, k.start, k.name+"-"+mode+"-held-back", func(listen string) string {
					return recipe(t, k.name+"-"+mode, s.vars(key, listen))
				})
				c := newClient(p.name, "127.0.1.3")
				r := c.get(t, p, http.MethodGet, "")
				switch {
				case mode == "open" && (r.status != 200 || s.up.count(c.name) != 1):
					t.Errorf("%s: %d %q, %d reached the upstream; want 200 (fail open)", p.name, r.status, r.body, s.up.count(c.name))
				case mode == "closed" && (r.status != 503 || r.header.Get("Retry-After") == "" || s.up.count(c.name) != 0):
					t.Errorf("%s: %d %v %q, %d reached the upstream; want 503 with Retry-After (fail closed)", p.name, r.status, r.header, r.body, s.up.count(c.name))
				}
			}
		}
	})

	t.Run("tollgate-stopped", func(t *testing.T) {
		for _, tg := range s.tollgates {
			if err := tg.Stop(); err != nil {
				t.Fatal(err)
			}
		}
		for i, p := range proxies {
			c := newClient(p.name+"/after", fmt.Sprintf("127.0.%d.%d", 10+i, 20))
			for range 3 {
				r := c.get(t, p, http.MethodGet, "")
				switch {
				case strings.HasSuffix(p.name, "-open") && r.status != 200:
					t.Errorf("%s with Tollgate stopped: %d %q, want 200 (fail open)", p.name, r.status, r.body)
				case strings.HasSuffix(p.name, "-closed") && (r.status != 503 || r.header.Get("Retry-After") != "1"):
					t.Errorf("%s with Tollgate stopped: %d %v %q, want 503 with Retry-After (fail closed)", p.name, r.status, r.header, r.body)
				}
			}
			want := map[bool]int{true: 3, false: 0}[strings.HasSuffix(p.name, "-open")]
			if n := s.up.count(c.name); n != want {
				t.Errorf("%s with Tollgate stopped: %d reached the upstream, want %d", p.name, n, want)
			}
		}
	})
}
