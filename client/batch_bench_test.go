package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBatchingCallers is the client's side of scripts/bench-batch.sh in
// process: 64 callers check the policy of a canned answer through
// WithBatching (1 ms, DefaultBatchSize) against a server that answers each
// batch with as many of that answer as it has checks, so that what it
// measures is mostly the client: cpu-ns/check is the whole process's CPU
// (both sides, the garbage collector's included) a check, allocs/check its
// heap allocations.
func BenchmarkBatchingCallers(b *testing.B) {
	result := []byte(answerAllowed[:len(answerAllowed)-1])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := max(bytes.Count(body, []byte(`{"mode":`)), 1)
		out := make([]byte, 0, 16+n*(len(result)+1))
		if r.URL.Path == "/v1/check" {
			out = append(out, result...)
		} else {
			out = append(out, `{"results":[`...)
			for i := range n {
				if i > 0 {
					out = append(out, ',')
				}
				out = append(out, result...)
			}
			out = append(out, "]}\n"...)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	}))
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	c, err := New(srv.URL, "tg_live_bench", WithHTTPClient(&http.Client{Transport: tr}), WithBatching(time.Millisecond, DefaultBatchSize))
	if err != nil {
		b.Fatal(err)
	}
	const callers = 64
	ctx := context.Background()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + callers - 1) / callers
	for i := range callers {
		wg.Go(func() {
			for j := range per {
				if _, err := c.Check(ctx, Item{Policy: "sign-in-ip", Subject: "user-" + strconv.Itoa(i*per+j)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	n := float64(per * callers)
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/check")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/check")
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
