// Command rlsload drives Envoy's rate limit service (ShouldRateLimit over
// gRPC) as Envoy's rate limit filter calls it, for scripts/bench-gateways.sh:
// CALLERS goroutines over a few connections, each sending one request at a
// time with one descriptor, for a duration. The descriptor is
// [("policy", POLICY), ("remote_address", ADDR)] (Tollgate's native shape),
// or [("remote_address", ADDR)] when -policy is empty (envoyproxy/ratelimit
// with a rule on the key remote_address); ADDR is a random one of SUBJECTS
// addresses. It prints one line:
//
//	decisions/s p50_ms p99_ms decisions ok over_limit errors cpu_us
//
// cpu_us being the load generator's own CPU per decision (its share of the
// box). The first error is written to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "the rate limit service's gRPC address")
	domain := flag.String("domain", "bench", "the requests' domain")
	policy := flag.String("policy", "per-client", `the descriptor's ("policy", NAME) entry; empty: remote_address alone`)
	key := flag.String("key", os.Getenv("TOLLGATE_KEY"), "API key sent as authorization: Bearer KEY (empty: none)")
	callers := flag.Int("callers", 64, "concurrent callers, one request in flight each")
	conns := flag.Int("conns", 4, "connections the callers share")
	subjects := flag.Int("subjects", 100_000, "client addresses to pick from")
	duration := flag.Duration("duration", 8*time.Second, "how long")
	rate := flag.Float64("rate", 0, "calls a second, spread evenly over the callers (0: each caller sends its next call as soon as its last is answered)")
	flag.Parse()
	if *callers < 1 || *conns < 1 || *subjects < 1 || *subjects > 1<<24 {
		fmt.Fprintln(os.Stderr, "rlsload: -callers and -conns at least 1, -subjects 1 to 2^24")
		os.Exit(2)
	}

	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(2)
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// Built before the clock starts, so that the load generator spends its
	// CPU on calls, not on formatting addresses.
	reqs := make([]*rlsv3.RateLimitRequest, *subjects)
	for i := range reqs {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		var entries []*ratelimitv3.RateLimitDescriptor_Entry
		if *policy != "" {
			entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "policy", Value: *policy})
		}
		entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: ip})
		reqs[i] = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries}}}
	}
	ctx := context.Background()
	if *key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*key)
	}

	var ok, over, errs atomic.Int64
	var firstErr sync.Once
	lat := make([][]time.Duration, *callers)
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	// At a fixed rate each caller has its own schedule, a call every
	// callers/rate seconds, and a call's latency counts from when it was
	// due: a caller that fell behind its schedule (a slow answer before)
	// counts the wait too, so that a stall is not hidden by the calls it
	// kept from being sent.
	every := time.Duration(0)
	if *rate > 0 {
		every = time.Duration(float64(*callers) / *rate * float64(time.Second))
	}
	for i := range *callers {
		c := clients[i%len(clients)]
		wg.Go(func() {
			due := start.Add(every * time.Duration(i) / time.Duration(*callers))
			for time.Now().Before(end) {
				began := time.Now()
				if every > 0 {
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
					began = due
					due = due.Add(every)
				}
				resp, err := c.ShouldRateLimit(ctx, reqs[rand.IntN(len(reqs))])
				lat[i] = append(lat[i], time.Since(began))
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.Do(func() { fmt.Fprintln(os.Stderr, "rlsload:", err) })
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
					over.Add(1)
				default:
					ok.Add(1)
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
	perCall := 0.0
	if len(all) > 0 {
		perCall = float64(cpu.Microseconds()) / float64(len(all))
	}
	fmt.Printf("%.0f %.3f %.3f %d %d %d %d %.1f\n", float64(len(all))/took.Seconds(), q(0.5), q(0.99), len(all), ok.Load(), over.Load(), errs.Load(), perCall)
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
