package postgres

// The direct calls' shares as pure logic: who gets a connection next,
// without a database.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestDirectShareTurns holds directShare to its rules: a group holds at
// most all but one connection; a freed connection goes to the groups
// waiting in turn, each group's calls in order; a call that gives up
// leaves the queue, and one given a connection as it gave up hands it on.
func TestDirectShareTurns(t *testing.T) {
	t.Parallel()
	d := newDirectShare(3)
	ctx := context.Background()
	for range 2 {
		if err := d.acquire(ctx, "noisy"); err != nil {
			t.Fatal(err)
		}
	}
	// Its share held, the noisy group's third call waits with a connection
	// free; another group's takes it at once.
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	wait := func(group, label string) {
		wg.Go(func() {
			if err := d.acquire(ctx, group); err != nil {
				t.Errorf("%s: %v", label, err)
				return
			}
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
		})
		// In the queue before the next.
		for deadline := time.Now().Add(5 * time.Second); ; {
			d.mu.Lock()
			queued := slices.Contains(d.turns, group)
			d.mu.Unlock()
			if queued || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("noisy", "noisy-3")
	if err := d.acquire(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	// Every connection held: noisy's calls queue, then quiet's and
	// another's arrive.
	wait("noisy", "noisy-4")
	wait("quiet", "quiet-2")
	wait("third", "third-1")
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
	free := func(group string, want []string) {
		t.Helper()
		d.release(group)
		for deadline := time.Now().Add(5 * time.Second); len(got()) < len(want) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if !slices.Equal(got(), want) {
			t.Fatalf("after a %s release: %v, want %v", group, got(), want)
		}
	}
	// The quiet group's release: the noisy group's turn is first, but it
	// holds its share, so the quiet's next call goes.
	free("quiet", []string{"quiet-2"})
	// A noisy release: the noisy group is below its share again and first
	// in turn.
	free("noisy", []string{"quiet-2", "noisy-3"})
	free("noisy", []string{"quiet-2", "noisy-3", "third-1"})
	free("quiet", []string{"quiet-2", "noisy-3", "third-1", "noisy-4"})
	wg.Wait()

	// A call that gives up leaves the queue; the next is served.
	gone, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := d.acquire(gone, "late"); err == nil {
		t.Fatal("a call with every connection held got one")
	}
	d.mu.Lock()
	if len(d.waiting["late"]) != 0 || slices.Contains(d.turns, "late") {
		t.Errorf("a call that gave up is still queued: %v, turns %v", d.waiting["late"], d.turns)
	}
	d.mu.Unlock()
	// Held: noisy 2, third 1; free them all and the store has its three.
	d.release("noisy")
	d.release("noisy")
	d.release("third")
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.free != 3 || len(d.held) != 0 || len(d.waiting) != 0 || len(d.turns) != 0 {
		t.Errorf("all released: free %d, held %v, waiting %v, turns %v", d.free, d.held, d.waiting, d.turns)
	}
}

// TestDirectShareOfOne gives a store of one direct connection to any group
// that asks, in turn.
func TestDirectShareOfOne(t *testing.T) {
	t.Parallel()
	d := newDirectShare(1)
	if err := d.acquire(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		if err := d.acquire(context.Background(), "a"); err != nil {
			t.Error(err)
		}
		close(done)
	}()
	d.release("a")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the group's second call never got the connection")
	}
}
