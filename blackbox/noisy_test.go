package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// noisy is the noisy-neighbour scene on one instance: tenant A sends the
// worst checks the API allows (as many items as a check holds, the longest
// subjects, a policy with as many wildcard overrides as it may hold, each
// with as many "*" as a pattern may hold and shaped to fail late), from many
// connections at once, while tenant B checks its "2 per hour" policy one
// check at a time.
type noisy struct {
	tb        testing.TB
	in        *instance
	a, b      newTenant
	wildcards int
	bodyFile  string // A's check: 32 items
	batchFile string // A's batch: 1,000 checks of one item each
	// counts are the attacker's answers by status, one line a loud phase.
	counts []string
}

func newNoisy(tb testing.TB) *noisy {
	tb.Helper()
	dsn := pgtest.New(tb)
	n := &noisy{tb: tb, in: start(tb, dsn), a: createTenant(tb, dsn, "enterprise"), b: createTenant(tb, dsn, "pro")}
	putPolicy(tb, n.in, n.a.LiveKey, "wild", map[string]any{"limit": 1_000_000_000, "window": "1h"})
	run := strings.Repeat("a", 60)
	for ; n.wildcards < 3000; n.wildcards++ {
		// Four "*", 256 bytes at most; the last run fails at its end on a
		// subject of a's, so every pattern is tried to its end.
		pattern := fmt.Sprintf("*%s*%s*%s%05d*", run, run, run[:55], n.wildcards)
		c := do(tb, "PUT", n.in.base+"/v1/policies/wild/overrides/"+url.PathEscape(pattern), n.a.LiveKey, map[string]any{"limit": 5})
		if c.status == 400 {
			break
		}
		if c.status != 200 {
			tb.Fatalf("override %d: %d %s", n.wildcards, c.status, c.body)
		}
	}
	items := make([]map[string]any, 32)
	for i := range items {
		items[i] = map[string]any{"policy": "wild", "subject": strings.Repeat("a", 500) + fmt.Sprintf("z%011d", i)}
	}
	heavy, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		tb.Fatal(err)
	}
	if len(heavy) > 64<<10 {
		tb.Fatalf("A's check is %d bytes, more than a check may be", len(heavy))
	}
	n.bodyFile = filepath.Join(tb.TempDir(), "heavy.json")
	if err := os.WriteFile(n.bodyFile, heavy, 0o600); err != nil {
		tb.Fatal(err)
	}
	checks := make([]map[string]any, 1000)
	for i := range checks {
		checks[i] = map[string]any{"items": []map[string]any{{"policy": "wild", "subject": strings.Repeat("a", 500) + fmt.Sprintf("z%011d", i)}}}
	}
	batch, err := json.Marshal(map[string]any{"checks": checks})
	if err != nil {
		tb.Fatal(err)
	}
	n.batchFile = filepath.Join(tb.TempDir(), "batch.json")
	if err := os.WriteFile(n.batchFile, batch, 0o600); err != nil {
		tb.Fatal(err)
	}
	putPolicy(tb, n.in, n.b.LiveKey, "two", map[string]any{"limit": 2, "window": "1h", "fail_mode": "open"})
	return n
}

// phase sends B's checks, 10 subjects of 30 checks each, one at a time, and
// returns their p99 (the third slowest). Every answer must be exact: 200,
// never degraded, 2 admitted a subject.
func (n *noisy) phase(name string) time.Duration {
	tb := n.tb
	tb.Helper()
	var took []time.Duration
	// By subject and window (the answer's reset_at): the policy's hour is
	// a clock hour, and a phase that runs over one admits two a subject
	// in each.
	admitted, answered, subjects := map[string]int{}, map[string]int{}, map[string]bool{}
	for i := range 300 {
		subject := fmt.Sprintf("%s-%d", name, i%10)
		began := time.Now()
		c := check(tb, n.in, n.b.LiveKey, map[string]any{"policy": "two", "subject": subject})
		took = append(took, time.Since(began))
		if c.status != 200 {
			tb.Fatalf("%s: B's check %d: %d %s", name, i, c.status, c.body)
		}
		var ans checkAnswer
		c.json(tb, &ans)
		if ans.Degraded {
			tb.Errorf("%s: B's check %d was degraded", name, i)
		}
		window := subject
		if len(ans.Items) == 1 {
			window += " in the window ending " + ans.Items[0].ResetAt
		}
		answered[window]++
		if ans.Allowed {
			admitted[window]++
			subjects[subject] = true
		}
	}
	for w, n := range answered {
		if k := admitted[w]; k > 2 || n >= 2 && k != 2 {
			tb.Errorf("%s: subject %s: admitted %d times of %d at 2 an hour", name, w, k, n)
		}
	}
	if len(subjects) != 10 {
		tb.Errorf("%s: %d subjects admitted, want 10", name, len(subjects))
	}
	slices.Sort(took)
	return took[len(took)*99/100-1]
}

// attack starts A's load in a process of its own (so that it shares only
// the machine with B's client, not B's Go scheduler) and returns the
// function that stops it: A's heavy check, or with batch its batch of
// 1,000 checks.
func (n *noisy) attack(batch bool) (stop func()) {
	tb := n.tb
	tb.Helper()
	path, body := "/v1/check", n.bodyFile
	if batch {
		path, body = "/v1/check/batch", n.batchFile
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), attackerEnv+"=1", "ATTACK_URL="+n.in.base+path, "ATTACK_KEY="+n.a.LiveKey, "ATTACK_BODY="+body)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	eventually.True(tb, 10*time.Second, "A's first answers", func() bool { return strings.Contains(out.String(), "answering") })
	return func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("attacker: %v\n%s", err, out.String())
		}
		n.counts = append(n.counts, strings.Join(strings.Fields(strings.TrimPrefix(out.String(), "answering")), " "))
	}
}

// round is a quiet phase of B's checks, then a loud one beside A's attack
// (its checks, or with batch its batches); it returns B's p99 in each.
func (n *noisy) round(name string, batch bool) (quiet, loud time.Duration) {
	quiet = n.phase(name + "-quiet")
	stop := n.attack(batch)
	loud = n.phase(name + "-loud")
	stop()
	return quiet, loud
}

// TestNoisyNeighbour: beside tenant A's attack (noisy), tenant B's answers
// stay exact (never degraded, never more than 2 a subject) on the
// production store deadline. How much slower B's answers get is a timing,
// which this box's load moves from run to run: BenchmarkNoisyNeighbour
// measures it, and the test only prints it.
func TestNoisyNeighbour(t *testing.T) {
	solo.Alone(t) // it loads both cores, and must not be squeezed by other tests
	n := newNoisy(t)
	n.phase("warm-up")
	for r, batch := range []bool{false, false, true} {
		quiet, loud := n.round(fmt.Sprintf("round%d", r), batch)
		t.Logf("round %d: B's p99 %v quiet, %v beside A's %s", r, quiet, loud, map[bool]string{false: "checks", true: "batches"}[batch])
	}
	t.Logf("A stored %d wildcard overrides and sent checks of 32 items, then batches of 1,000 checks; its answers: %s", n.wildcards, strings.Join(n.counts, "; "))
}

// BenchmarkNoisyNeighbour measures what tenant A's attack (noisy) costs
// tenant B: each iteration is a round of B's checks alone and beside A, and
// it reports the medians over the rounds of B's p99 alone (quiet-p99-ms),
// beside A (loud-p99-ms), and their ratio (loud/quiet). B's answers must
// stay exact meanwhile, as in TestNoisyNeighbour.
//
//	go test -run '^$' -bench NoisyNeighbour -benchtime 5x ./blackbox/
func BenchmarkNoisyNeighbour(b *testing.B) {
	n := newNoisy(b)
	n.phase("warm-up")
	var quiets, louds []time.Duration
	r := 0
	for b.Loop() {
		quiet, loud := n.round(fmt.Sprintf("round%d", r), false)
		quiets, louds = append(quiets, quiet), append(louds, loud)
		r++
	}
	slices.Sort(quiets)
	slices.Sort(louds)
	quiet, loud := quiets[len(quiets)/2], louds[len(louds)/2]
	b.ReportMetric(float64(quiet)/float64(time.Millisecond), "quiet-p99-ms")
	b.ReportMetric(float64(loud)/float64(time.Millisecond), "loud-p99-ms")
	b.ReportMetric(float64(loud)/float64(quiet), "loud/quiet")
	b.ReportMetric(0, "ns/op")
	b.Logf("A's answers: %s", strings.Join(n.counts, "; "))
}

// attackerEnv makes the test binary a load generator (TestMain): it posts
// ATTACK_BODY to ATTACK_URL with ATTACK_KEY from 32 connections until its
// standard input closes, then prints how many answers of each status it
// got.
const attackerEnv = "TOLLGATE_BLACKBOX_ATTACKER"

func attacker() int {
	body, err := os.ReadFile(os.Getenv("ATTACK_BODY"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	statuses := map[int]int{}
	var once sync.Once
	var workers sync.WaitGroup
	for range 32 {
		workers.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", os.Getenv("ATTACK_URL"), bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+os.Getenv("ATTACK_KEY"))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				once.Do(func() { fmt.Println("answering") })
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	workers.Wait()
	var parts []string
	for code, n := range statuses {
		parts = append(parts, fmt.Sprintf("%d×%d", n, code))
	}
	slices.Sort(parts)
	fmt.Println(strings.Join(parts, " "))
	return 0
}
