package faultnet_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/faultnet"
)

// TestDelayIsLatency holds a delayed link to a link's latency: an answer
// written in several chunks arrives about twice the delay after the
// question, as one in a single chunk does, not a delay a chunk later.
func TestDelayIsLatency(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const chunks = 4
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		q := make([]byte, 1)
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		for range chunks {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	p := faultnet.New(t, ln.Addr().String())
	const d = 200 * time.Millisecond
	p.Delay(d)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("?")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, chunks)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The server's own pauses add 30 ms. Delays taken a chunk at a time
	// would add at least one more delay (the chunks behind the first
	// waiting, then read together).
	if took < 2*d || took > 2*d+30*time.Millisecond+d/2 {
		t.Fatalf("an answer in %d chunks through a link delayed %s each way took %s, want about %s", chunks, d, took, 2*d+30*time.Millisecond)
	}
}
