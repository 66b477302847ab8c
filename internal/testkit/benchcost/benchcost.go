// Package benchcost reports what one unit of a benchmark's work costs when
// an op is many units (a batch of checks is one op of many checks): the
// wall time, the process's CPU time (user and system, on every thread, the
// garbage collector's included: on a machine shared with the servers the
// benchmark talks to, steadier than the wall time) and the heap
// allocations, each per unit.
//
// Only tests import it.
package benchcost

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Meter is what the process had spent when Start was called.
type Meter struct {
	cpu     time.Duration
	mallocs uint64
}

// Start reads the process's CPU time and allocations so far; call it after
// the benchmark's setup, just before its loop.
func Start() Meter {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Meter{cpu: cpuTime(), mallocs: ms.Mallocs}
}

// Report adds to b's results the cost of one unit, b.N ops of perOp units
// each since m was started: ns/unit (wall time, b.Elapsed), cpu-ns/unit
// and allocs/unit.
func (m Meter) Report(b *testing.B, perOp int, unit string) {
	cpu := cpuTime() - m.cpu
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	units := float64(b.N) * float64(perOp)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/units, "ns/"+unit)
	b.ReportMetric(float64(cpu.Nanoseconds())/units, "cpu-ns/"+unit)
	b.ReportMetric(float64(ms.Mallocs-m.mallocs)/units, "allocs/"+unit)
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
