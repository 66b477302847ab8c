// Package atomicmap holds int64 cells by key that the hot path reads and
// changes without a lock: the cell is found in a sync.Map and changed by
// compare-and-swap. A cell is retired before it leaves the map, and no
// change lands in a retired cell, so nothing is counted in a cell nobody
// will read again: Update makes a new one, Add reports the failure.
package atomicmap

import (
	"math"
	"sync"
	"sync/atomic"
)

// Map holds a Cell for each key it was given. The zero Map is empty and
// ready; it is safe for concurrent use.
type Map[K comparable] struct{ m sync.Map }

// Cell is one key's value.
type Cell struct{ v atomic.Int64 }

// retired is a retired cell's value: no change lands in it.
const retired = math.MinInt64

// Load returns k's cell, if it has one.
func (m *Map[K]) Load(k K) (*Cell, bool) {
	v, ok := m.m.Load(k)
	if !ok {
		return nil, false
	}
	return v.(*Cell), true
}

// Ensure returns k's cell, made at zero if it has none.
func (m *Map[K]) Ensure(k K) *Cell {
	if c, ok := m.Load(k); ok {
		return c
	}
	v, _ := m.m.LoadOrStore(k, new(Cell))
	return v.(*Cell)
}

// Update changes k's cell (made at zero if it has none) from v to next,
// where f(v) returns next and true; when f returns false the cell is left
// as it is. It returns the cell and f's answer. A cell retired as Update
// works is helped out of the map and Update starts again on a new one.
func (m *Map[K]) Update(k K, f func(v int64) (next int64, ok bool)) (*Cell, bool) {
	for {
		c := m.Ensure(k)
		for {
			v := c.v.Load()
			if v == retired {
				m.m.CompareAndDelete(k, c)
				break
			}
			next, ok := f(v)
			if !ok {
				return c, false
			}
			if c.v.CompareAndSwap(v, next) {
				return c, true
			}
		}
	}
}

// Add adds n to c and returns the new value; ok is false, and nothing is
// added, when c is retired.
func (c *Cell) Add(n int64) (sum int64, ok bool) {
	for {
		v := c.v.Load()
		if v == retired {
			return 0, false
		}
		if c.v.CompareAndSwap(v, v+n) {
			return v + n, true
		}
	}
}

// Value is c's value (math.MinInt64 once retired).
func (c *Cell) Value() int64 { return c.v.Load() }

// Take sets every cell to zero and passes what it held, when not zero, to
// visit; the cells already at zero (untouched since the last Take) are
// retired and leave the map.
func (m *Map[K]) Take(visit func(k K, v int64)) {
	m.m.Range(func(k, v any) bool {
		c := v.(*Cell)
		if n := c.v.Swap(0); n != 0 {
			visit(k.(K), n)
		} else if c.v.CompareAndSwap(0, retired) {
			m.m.CompareAndDelete(k, c)
		}
		return true
	})
}

// Sweep retires the cells at zero and removes them from the map.
func (m *Map[K]) Sweep() {
	m.m.Range(func(k, v any) bool {
		if c := v.(*Cell); c.v.CompareAndSwap(0, retired) {
			m.m.CompareAndDelete(k, c)
		}
		return true
	})
}

// RetireAll retires every cell, passes what it held, when not zero, to
// visit, and empties the map.
func (m *Map[K]) RetireAll(visit func(k K, v int64)) {
	m.m.Range(func(k, v any) bool {
		c := v.(*Cell)
		if n := c.v.Swap(retired); n != 0 && n != retired {
			visit(k.(K), n)
		}
		m.m.CompareAndDelete(k, c)
		return true
	})
}

// Len is the number of cells in the map.
func (m *Map[K]) Len() int {
	n := 0
	m.m.Range(func(any, any) bool { n++; return true })
	return n
}
