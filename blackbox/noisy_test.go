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

	"github.com/tollgate/tollgate/internal/eventually"
	"github.com/tollgate/tollgate/internal/logbuf"
	"github.com/tollgate/tollgate/internal/pgtest"
)

// TestNoisyNeighbour: tenant A sends the worst checks the API allows (as
// many items as a check holds, the longest subjects, a policy with as many
// wildcard overrides as it may hold, each with as many "*" as a pattern may
// hold and shaped to fail late), from many connections at once, while
// tenant B checks its "2 per hour" policy. B's answers stay exact (never
// degraded, never more than 2 a subject) on the production store deadline,
// and B's p99 stays within 3× its quiet p99.
func TestNoisyNeighbour(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	a := createTenant(t, dsn, "enterprise")
	b := createTenant(t, dsn, "pro")

	putPolicy(t, in, a.LiveKey, "wild", map[string]any{"limit": 1_000_000_000, "window": "1h"})
	run := strings.Repeat("a", 60)
	wildcards := 0
	for ; wildcards < 3000; wildcards++ {
		// Four "*", 256 bytes at most; the last run fails at its end on a
		// subject of a's, so every pattern is tried to its end.
		pattern := fmt.Sprintf("*%s*%s*%s%05d*", run, run, run[:55], wildcards)
		c := do(t, "PUT", in.base+"/v1/policies/wild/overrides/"+url.PathEscape(pattern), a.LiveKey, map[string]any{"limit": 5})
		if c.status == 400 {
			break
		}
		if c.status != 200 {
			t.Fatalf("override %d: %d %s", wildcards, c.status, c.body)
		}
	}
	items := make([]map[string]any, 32)
	for i := range items {
		items[i] = map[string]any{"policy": "wild", "subject": strings.Repeat("a", 500) + fmt.Sprintf("z%011d", i)}
	}
	heavy, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		t.Fatal(err)
	}
	if len(heavy) > 64<<10 {
		t.Fatalf("A's check is %d bytes, more than a check may be", len(heavy))
	}

	putPolicy(t, in, b.LiveKey, "two", map[string]any{"limit": 2, "window": "1h", "fail_mode": "open"})
	// phase sends B's checks: 10 subjects, 30 checks each, one at a time;
	// its p99 is the third slowest.
	phase := func(name string) time.Duration {
		t.Helper()
		var took []time.Duration
		admitted := map[string]int{}
		for i := range 300 {
			subject := fmt.Sprintf("%s-%d", name, i%10)
			began := time.Now()
			c := check(t, in, b.LiveKey, map[string]any{"policy": "two", "subject": subject})
			took = append(took, time.Since(began))
			if c.status != 200 {
				t.Fatalf("%s: B's check %d: %d %s", name, i, c.status, c.body)
			}
			var ans checkAnswer
			c.json(t, &ans)
			if ans.Degraded {
				t.Errorf("%s: B's check %d was degraded", name, i)
			}
			if ans.Allowed {
				admitted[subject]++
			}
		}
		for s, n := range admitted {
			if n != 2 {
				t.Errorf("%s: subject %s admitted %d times at 2 an hour", name, s, n)
			}
		}
		if len(admitted) != 10 {
			t.Errorf("%s: %d subjects admitted, want 10", name, len(admitted))
		}
		slices.Sort(took)
		return took[len(took)*99/100-1]
	}
	bodyFile := filepath.Join(t.TempDir(), "heavy.json")
	if err := os.WriteFile(bodyFile, heavy, 0o600); err != nil {
		t.Fatal(err)
	}
	var counts []string
	// attack starts A's load in a process of its own (so that it shares
	// only the machine with B's client, not B's Go scheduler) and returns
	// the function that stops it.
	attack := func() (stop func()) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), attackerEnv+"=1", "ATTACK_URL="+in.base+"/v1/check", "ATTACK_KEY="+a.LiveKey, "ATTACK_BODY="+bodyFile)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &logbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "A's first answers", func() bool { return strings.Contains(out.String(), "answering") })
		return func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("attacker: %v\n%s", err, out.String())
			}
			counts = append(counts, strings.TrimSpace(out.String()))
		}
	}

	// Quiet and loud phases alternate five times; each figure is the median
	// of its five, so that one hiccup of the machine decides nothing.
	phase("warm-up")
	var quiets, louds []time.Duration
	for round := range 5 {
		quiets = append(quiets, phase(fmt.Sprintf("quiet%d", round)))
		stop := attack()
		louds = append(louds, phase(fmt.Sprintf("loud%d", round)))
		stop()
	}
	t.Logf("B's p99 quiet %v, beside A %v", quiets, louds)
	slices.Sort(quiets)
	slices.Sort(louds)
	quiet, loud := quiets[2], louds[2]

	t.Logf("A stored %d wildcard overrides and sent checks of 32 items: %s", wildcards, strings.Join(counts, "; "))
	t.Logf("B's p99: %s quiet, %s beside A (%.1f×)", quiet, loud, float64(loud)/float64(quiet))
	if loud > 3*quiet {
		t.Errorf("B's p99 beside A is %s, more than 3× its quiet %s", loud, quiet)
	}
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
