package atomicmap

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Updates racing with Takes and Sweeps that retire idle cells: every
// update is in exactly one Take's sum, none lands in a retired cell.
func TestRaceUpdatesTakesSweeps(t *testing.T) {
	var m Map[int]
	const workers, each, keys = 8, 20000, 3
	var taken atomic.Int64
	stop := make(chan struct{})
	var takers sync.WaitGroup
	takers.Add(1)
	go func() {
		defer takers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m.Take(func(_ int, v int64) { taken.Add(v) })
			if i%3 == 0 {
				m.Sweep()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.Update((w+i)%keys, func(v int64) (int64, bool) { return v + 1, true })
			}
		}()
	}
	wg.Wait()
	close(stop)
	takers.Wait()
	m.Take(func(_ int, v int64) { taken.Add(v) })
	if got, want := taken.Load(), int64(workers*each); got != want {
		t.Errorf("took %d, want %d: updates were lost or counted twice", got, want)
	}
	m.Take(func(int, int64) {}) // the cells at zero leave
	if n := m.Len(); n != 0 {
		t.Errorf("%d cells left after two Takes of nothing", n)
	}
}

// Adds racing with RetireAll: each add is either in RetireAll's sum or
// reported as failed, never both, never neither.
func TestRaceAddRetireAll(t *testing.T) {
	for range 200 {
		var m Map[string]
		c := m.Ensure("k")
		var ok, retiredSum atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					if _, added := c.Add(1); added {
						ok.Add(1)
					}
				}
			}()
		}
		m.RetireAll(func(_ string, v int64) { retiredSum.Add(v) })
		wg.Wait()
		if after := c.Value(); after != retired {
			t.Fatalf("retired cell holds %d", after)
		}
		if ok.Load() != retiredSum.Load() {
			t.Fatalf("%d adds succeeded, %d retired with the cell", ok.Load(), retiredSum.Load())
		}
		if m.Len() != 0 {
			t.Fatal("cell still in the map after RetireAll")
		}
	}
}

// Update leaves the cell as it is when f says no.
func TestUpdateRefused(t *testing.T) {
	var m Map[string]
	m.Update("k", func(v int64) (int64, bool) { return 5, true })
	c, ok := m.Update("k", func(v int64) (int64, bool) { return v + 10, v+10 <= 10 })
	if ok || c.Value() != 5 {
		t.Errorf("refused update: ok %v, value %d; want false, 5", ok, c.Value())
	}
}
