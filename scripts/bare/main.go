// Command bare is the yardstick of scripts/bench-check.sh: a net/http
// handler that answers every request 200 with a fixed small JSON body, the
// least an HTTP service on this machine can do per request. Tollgate's
// throughput is reported as a ratio to it, measured in the same run.
//
// With -wait, each request instead waits for a round trip, as a check waits
// for its store: requests arriving while one is out gather into the next,
// and a round trip is answered -wait after it leaves, without spending any CPU
// meanwhile. It measures what waiting alone costs the HTTP layer (goroutines
// parked and woken, reads that find nothing yet), apart from any store's work.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18180", "listen address")
	wait := flag.Duration("wait", 0, "answer each request with the round trip it joins, this long after the round trip leaves (0: at once)")
	flag.Parse()
	body := []byte(`{"allowed":true,"degraded":false,"items":[{"policy":"bench","allowed":true,"limit":1000000000,"remaining":999999999,"reset_at":"2026-12-01T01:00:00Z","retry_after_ms":0,"shadow":false}]}` + "\n")
	b := &coalescer{kick: make(chan struct{}, 1)}
	if *wait > 0 {
		go b.loop(*wait)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *wait > 0 {
			io.Copy(io.Discard, r.Body)
			b.join()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}

// coalescer sends one round trip at a time, as the PostgreSQL counter store
// sends one statement.
type coalescer struct {
	mu      sync.Mutex
	pending []chan struct{}
	kick    chan struct{}
}

// join waits for the round trip the caller joins to be answered.
func (b *coalescer) join() {
	done := make(chan struct{}, 1)
	b.mu.Lock()
	b.pending = append(b.pending, done)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	<-done
}

func (b *coalescer) loop(wait time.Duration) {
	for range b.kick {
		b.mu.Lock()
		joined := b.pending
		b.pending = nil
		b.mu.Unlock()
		if len(joined) == 0 {
			continue
		}
		time.Sleep(wait)
		for _, done := range joined {
			done <- struct{}{}
		}
	}
}
