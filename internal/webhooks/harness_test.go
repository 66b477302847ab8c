package webhooks_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/webhooks"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is the webhooks on a database of the test's own.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	store  *pgstore.Webhooks
	sealer *webhooks.Sealer
	svc    *webhooks.Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.Pool(t)
	sealer, err := webhooks.NewSealer(digest.Key([]byte("webhooks-test-pepper"), "tollgate webhook secrets"))
	if err != nil {
		t.Fatal(err)
	}
	store := pgstore.NewWebhooks(pool)
	return &env{t: t, pool: pool, store: store, sealer: sealer,
		svc: &webhooks.Service{Store: store, Sealer: sealer, AllowPrivate: true}}
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) tenant() string {
	e.t.Helper()
	return pgtest.Tenant(e.t, e.pool, tenant.PlanStarter)
}

// endpoint registers url for tenantID, listening to every event type,
// and returns it with its secret.
func (e *env) endpoint(tenantID, url string) webhooks.Created {
	e.t.Helper()
	c, err := e.svc.Create(context.Background(), tenantID, url, webhooks.EventTypes)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// emit writes n events to the outbox as the triggers do.
func (e *env) emit(tenantID string, n int) {
	e.t.Helper()
	e.exec(`INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
		SELECT $1::uuid, 'key.revoked', jsonb_build_object('key_id', 'k_' || i), 'test:' || gen_random_uuid()
		FROM generate_series(1, $2::int) AS i`, tenantID, n)
}

// run starts a worker until the test ends, with the env's sealer unless
// cfg has one; it waits for the worker to stop at cleanup.
func (e *env) run(cfg webhooks.WorkerConfig) *webhooks.Worker {
	e.t.Helper()
	cfg.Store = e.store
	if cfg.Sealer == nil {
		cfg.Sealer = e.sealer
	}
	if cfg.Client == nil {
		cfg.Client = webhooks.NewClient(true, 10*time.Second)
	}
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	w := webhooks.NewWorker(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return w
}

// statuses counts the deliveries by status.
func (e *env) statuses() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT status, count(*) FROM webhook_deliveries GROUP BY status`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			e.t.Fatal(err)
		}
		m[s] = n
	}
	return m
}

// received is one request a receiver got.
type received struct {
	ID, Timestamp, Signature string
	Body                     []byte
}

// receiver is a real HTTP server that records what it receives and
// answers as answer says for the n-th request (from 1).
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	got      []received
	inflight int
	maxIn    int
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body})
		n := len(rc.got)
		rc.inflight++
		rc.maxIn = max(rc.maxIn, rc.inflight)
		rc.mu.Unlock()
		defer func() { rc.mu.Lock(); rc.inflight--; rc.mu.Unlock() }()
		answer(w, r, n)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func ok(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusNoContent) }

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// distinct counts the distinct webhook-ids received.
func (rc *receiver) distinct() int {
	seen := map[string]bool{}
	for _, r := range rc.requests() {
		seen[r.ID] = true
	}
	return len(seen)
}

// verifyMsg is one delivery as the Standard Webhooks library checks it.
type verifyMsg struct {
	Secret    string `json:"secret"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Signature string `json:"signature"`
	Body      string `json:"body"`
}

// standardWebhooks checks msgs with the npm package standardwebhooks (its
// TypeScript library, which Tollgate did not write) and returns its
// verdict for each: "ok" or "rejected: …". The package is installed with
// npm ci from testdata/verify's lock file into the user's cache, once per
// lock digest; without node and npm the test fails.
func standardWebhooks(t *testing.T, msgs []verifyMsg) []string {
	t.Helper()
	modules := installVerifier(t)
	var in strings.Builder
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command("node", "verify.js")
	cmd.Dir = filepath.Join("testdata", "verify")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node verify.js: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("node verify.js: %v", err)
	}
	var verdicts []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		verdicts = append(verdicts, sc.Text())
	}
	if len(verdicts) != len(msgs) {
		t.Fatalf("verify.js answered %d lines for %d messages: %s", len(verdicts), len(msgs), out)
	}
	return verdicts
}

var installOnce sync.Mutex

func installVerifier(t *testing.T) string {
	t.Helper()
	installOnce.Lock()
	defer installOnce.Unlock()
	lock, err := os.ReadFile(filepath.Join("testdata", "verify", "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tollgate", "standardwebhooks-"+hex.EncodeToString(sum[:6]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "standardwebhooks")); err == nil {
		return modules
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "verify", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci of the Standard Webhooks verifier (needs node and npm): %v: %s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	return modules
}
