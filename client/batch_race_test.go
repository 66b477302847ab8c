package client

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// TestBatchingRaceCallersGetTheirOwnAnswers: 64 callers check through
// WithBatching at once, some giving up on their call while its batch is in
// flight; every answer a caller gets is its own (the server answers each
// check with the number in its subject as remaining), whichever batch and
// sender carried it and however often its waiter was used before. Run
// with the race detector by make test.
func TestBatchingRaceCallersGetTheirOwnAnswers(t *testing.T) {
	// Alone: under the race detector its 64 callers load both cores, and
	// the stores' conformance suites beside it hold the timing of a late link.
	solo.Alone(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var one checkIn
		var batch struct {
			Checks []checkIn `json:"checks"`
		}
		var err error
		if r.URL.Path == "/v1/check" {
			err = json.NewDecoder(r.Body).Decode(&one)
			batch.Checks = []checkIn{one}
		} else {
			err = json.NewDecoder(r.Body).Decode(&batch)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Batches overlap: some answers take a while.
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
		results := make([]string, len(batch.Checks))
		for i, c := range batch.Checks {
			n, _ := strconv.Atoi(strings.TrimPrefix(c.Items[0].Subject, "s-"))
			results[i] = fmt.Sprintf(`{"allowed":true,"degraded":false,"items":[{"policy":%q,"allowed":true,"limit":1000000,"remaining":%d,"window_seconds":60,"reset_at":"2026-12-06T04:00:00Z","retry_after_ms":0,"shadow":false}]}`, c.Items[0].Policy, n)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/check" {
			fmt.Fprint(w, results[0])
			return
		}
		fmt.Fprintf(w, `{"results":[%s]}`, strings.Join(results, ","))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "tg_live_race", WithBatching(time.Millisecond, 8))
	if err != nil {
		t.Fatal(err)
	}
	const callers, calls = 64, 80
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for j := range calls {
				n := i*calls + j
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				giveUp := j%10 == 3
				if giveUp {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(1500))*time.Microsecond)
				}
				d, err := c.Check(ctx, Item{Policy: "p", Subject: "s-" + strconv.Itoa(n)})
				cancel()
				if err != nil {
					if !giveUp {
						t.Errorf("call %d: %v", n, err)
					}
					continue
				}
				if len(d.Items) != 1 || d.Items[0].Remaining != int64(n) {
					t.Errorf("call %d got %+v, another call's answer", n, d)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		// A waiter answered twice (its done already signalled) blocks
		// its sender, and the calls of that batch never return.
		t.Fatal("callers still waiting after a minute")
	}
}
