// Package faultnet is a TCP proxy whose link tests can cut, stall and restore:
// a real network fault between Tollgate and PostgreSQL or Redis, with no
// stand-in for either.
//
// Only tests import faultnet.
package faultnet

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from its own loopback address to an upstream
// address. It is safe for concurrent use.
type Proxy struct {
	upstream string
	addr     string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	stalled bool
	delay   time.Duration
}

// New starts a proxy to upstream (host:port) on a free loopback port; it stops
// when the test ends.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultnet: listen: %v", err)
	}
	p := &Proxy{upstream: upstream, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection and refuses new ones until Restore: a server
// that went away.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Stall keeps connections open but stops passing bytes either way until
// Restore: a server that stopped answering.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Delay passes every chunk of bytes on d after it arrived, each way, until
// Restore or Delay(0): a server that answers, late (a round trip takes 2d
// more, however many chunks its answer takes), as one on a starved CPU does.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Restore undoes Cut, Stall and Delay. Connections stalled meanwhile are closed, so
// clients reconnect afresh.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	p.delay = 0
	if p.stalled {
		p.stalled = false
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]struct{}{}
	}
	listening := p.ln != nil
	p.mu.Unlock()
	if listening {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *Proxy) handle(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	go p.pipe(up, c)
	p.pipe(c, up)
}

// pipe copies src to dst until either closes, dropping bytes while stalled
// (those read, and those on their way).
// A delay is latency, as on a long link: each chunk is passed on delay after
// it was read, the chunks behind it already on their way, so an answer in
// several chunks is as late as one in a single chunk.
func (p *Proxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer src.Close()
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if stalled {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(chunks)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stalled, delay := p.stalled, p.delay
			p.mu.Unlock()
			if !stalled {
				c := chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(delay)}
				select {
				case chunks <- c:
				case <-done:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
