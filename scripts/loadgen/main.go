// Command loadgen drives Tollgate's /v1/check through the Go client, for
// scripts/bench-batch.sh: CALLERS goroutines each checking random subjects
// among SUBJECTS of one policy, one check at a time, for a duration, with
// or without the client's batching. It prints one line:
//
//	checks/s p50_ms p99_ms checks requests degraded errors cpu_us
//
// requests being the HTTP requests the client made (so checks/requests is
// the checks per request) and cpu_us the load generator's own CPU per
// check (user and system, the client's share of the box). -cpuprofile
// writes its CPU profile, to see where a client's check goes.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/client"
)

type counting struct {
	n  atomic.Int64
	rt http.RoundTripper
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func main() {
	base := flag.String("url", "http://127.0.0.1:18281", "Tollgate's base URL")
	key := flag.String("key", os.Getenv("TOLLGATE_KEY"), "API key")
	policy := flag.String("policy", "bench", "policy to check")
	callers := flag.Int("callers", 64, "concurrent callers")
	subjects := flag.Int("subjects", 100_000, "subjects to pick from")
	duration := flag.Duration("duration", 8*time.Second, "how long")
	batch := flag.Duration("batch", 0, "batching's maxDelay (0: no batching)")
	batchSize := flag.Int("batch-size", client.DefaultBatchSize, "batching's maxChecks")
	cpuprofile := flag.String("cpuprofile", "", "write the load generator's CPU profile here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}

	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 256
	ct := &counting{rt: t}
	opts := []client.Option{client.WithTimeout(2 * time.Second), client.WithHTTPClient(&http.Client{Transport: ct})}
	if *batch > 0 {
		opts = append(opts, client.WithBatching(*batch, *batchSize))
	}
	c, err := client.New(*base, *key, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	var degraded, errs atomic.Int64
	lat := make([][]time.Duration, *callers)
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for i := range *callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				began := time.Now()
				d, err := c.Check(ctx, client.Item{Policy: *policy, Subject: "user-" + strconv.Itoa(rand.IntN(*subjects))})
				lat[i] = append(lat[i], time.Since(began))
				if err != nil {
					errs.Add(1)
				} else if d.Degraded {
					degraded.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpu := cpuTime() - cpu0
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e6
	}
	perCheck := 0.0
	if len(all) > 0 {
		perCheck = float64(cpu.Microseconds()) / float64(len(all))
	}
	fmt.Printf("%.0f %.3f %.3f %d %d %d %d %.1f\n", float64(len(all))/took.Seconds(), q(0.5), q(0.99), len(all), ct.n.Load(), degraded.Load(), errs.Load(), perCheck)
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
