package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// crashLossBound is what the README promises an instance killed without
// warning loses of its monthly usage: the live checks it admitted in its
// last crashLossBound.
const crashLossBound = time.Second

// traffic sends checks to one instance at a steady rate from 32
// connections of its own, reads the tenant's usage ten times a second
// meanwhile (a flush waits for a read in progress), and records when each
// admitted answer arrived.
type traffic struct {
	t      *testing.T
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	admitted []time.Time // arrival of each 200 answer, in order
	// unanswered counts the checks sent before killedAt that got no
	// answer: the instance may have counted them.
	unanswered int
	killedAt   time.Time
	other      atomic.Int64 // answers other than 200
}

// sendChecks starts rate checks a second (of a policy that never refuses)
// to in, until stopped.
func sendChecks(t *testing.T, in *instance, key string, rate int) *traffic {
	tr := &traffic{
		t:      t,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 10 * time.Second},
		stop:   make(chan struct{}),
	}
	body, err := json.Marshal(map[string]any{"items": []map[string]any{{"policy": "roomy", "subject": "crash"}}})
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	tokens := make(chan struct{})
	tr.wg.Go(func() {
		defer tick.Stop()
		defer close(tokens)
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
				select {
				case tokens <- struct{}{}:
				case <-tr.stop:
					return
				}
			}
		}
	})
	// A dashboard or a client reading the tenant's usage meanwhile, as
	// they do.
	tr.wg.Go(func() {
		for {
			select {
			case <-tr.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			req, err := http.NewRequest("GET", in.base+"/v1/usage", nil)
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+key)
			if resp, err := tr.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
	for range 32 {
		tr.wg.Go(func() {
			for range tokens {
				sent := time.Now()
				req, err := http.NewRequest("POST", in.base+"/v1/check", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := tr.client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				tr.mu.Lock()
				switch {
				case err != nil:
					if tr.killedAt.IsZero() || sent.Before(tr.killedAt) {
						tr.unanswered++
					}
				case resp.StatusCode == http.StatusOK:
					tr.admitted = append(tr.admitted, time.Now())
				default:
					tr.other.Add(1)
				}
				tr.mu.Unlock()
			}
		})
	}
	return tr
}

// kill SIGKILLs in, waits for it to be gone and stops the traffic.
func (tr *traffic) kill(in *instance) {
	tr.mu.Lock()
	tr.killedAt = time.Now()
	tr.mu.Unlock()
	if err := in.cmd.Process.Kill(); err != nil {
		tr.t.Fatal(err)
	}
	in.cmd.Wait()
	tr.end()
}

// end stops the traffic and waits for the checks in flight.
func (tr *traffic) end() {
	close(tr.stop)
	tr.wg.Wait()
	tr.client.CloseIdleConnections()
	if n := tr.other.Load(); n > 0 {
		tr.t.Fatalf("%d checks answered other than 200", n)
	}
}

// TestSIGKILLLosesAtMostTheLastSecondOfUsage kills instances mid-traffic,
// without warning, at several phases of their flushes: the monthly usage
// read afterwards holds every check admitted more than crashLossBound before
// the kill, and none that was not sent.
func TestSIGKILLLosesAtMostTheLastSecondOfUsage(t *testing.T) {
	// Parallel: it sends a steady 600 checks a second and waits, which
	// leaves most of a core to the others.
	t.Parallel()
	dsn := pgtest.New(t)
	nt := createTenant(t, dsn, "pro")
	const rate = 600 // checks a second
	in := start(t, dsn, patientStore)
	putPolicy(t, in, nt.LiveKey, "roomy", map[string]any{"limit": 1_000_000_000, "window": "1h"})
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	before := u.usage().ChecksUsed
	var worst time.Duration
	for round := range 5 {
		tr := sendChecks(t, in, nt.LiveKey, rate)
		// Two seconds and a random part of a third: the kill lands at any
		// phase of the instance's flushes.
		time.Sleep(2*time.Second + rand.N(time.Second))
		tr.kill(in)

		in = start(t, dsn, patientStore)
		u = u.on(in)
		used := u.usage().ChecksUsed - before
		before += used
		admitted := int64(len(tr.admitted))
		lost := admitted - used
		// The lost checks are the last ones admitted: the window they span
		// is from the first of them to the kill.
		var window time.Duration
		if lost > 0 {
			window = tr.killedAt.Sub(tr.admitted[used])
		}
		worst = max(worst, window)
		inBound := int64(len(tr.admitted)) - int64(firstAfter(tr.admitted, tr.killedAt.Add(-crashLossBound)))
		t.Logf("round %d: %d admitted (%.0f a second), %d unanswered at the kill, %d metered: %d lost, the last %v of traffic (the bound allows %d)",
			round+1, admitted, float64(admitted)/tr.killedAt.Sub(tr.admitted[0]).Seconds(), tr.unanswered, used, lost, window.Round(time.Millisecond), inBound)
		if used > admitted+int64(tr.unanswered) {
			t.Errorf("round %d: %d checks metered, more than the %d admitted and %d unanswered", round+1, used, admitted, tr.unanswered)
		}
		if lost > inBound {
			t.Errorf("round %d: %d admitted checks lost, the last %v of traffic; the bound is %v (%d checks)", round+1, lost, window.Round(time.Millisecond), crashLossBound, inBound)
		}
	}
	t.Logf("worst loss: the last %v of traffic", worst.Round(time.Millisecond))
}

// firstAfter returns the index of the first time in ts (sorted) at or after
// at.
func firstAfter(ts []time.Time, at time.Time) int {
	i, _ := slices.BinarySearchFunc(ts, at, func(t, at time.Time) int { return t.Compare(at) })
	return i
}

// TestSIGTERMMetersEveryAdmittedCheck stops an instance mid-traffic: the
// checks it answered before it stopped are all metered, exactly.
func TestSIGTERMMetersEveryAdmittedCheck(t *testing.T) {
	dsn := pgtest.New(t)
	nt := createTenant(t, dsn, "pro")
	in := start(t, dsn, patientStore)
	putPolicy(t, in, nt.LiveKey, "roomy", map[string]any{"limit": 1_000_000_000, "window": "1h"})
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	before := u.usage().ChecksUsed
	tr := sendChecks(t, in, nt.LiveKey, 300)
	time.Sleep(2*time.Second + rand.N(time.Second))
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); in.cmd.Process.Kill() }()
	if err := in.cmd.Wait(); err != nil || ctx.Err() != nil {
		t.Fatalf("instance did not stop cleanly on SIGTERM: %v", err)
	}
	tr.end()

	u = u.on(start(t, dsn, patientStore))
	if used, admitted := u.usage().ChecksUsed-before, int64(len(tr.admitted)); used != admitted {
		t.Errorf("%d checks metered, %d admitted", used, admitted)
	}
}
