// Command loadgen drives Tollgate's /v1/check, for scripts/bench-batch.sh
// and scripts/bench-scale.sh: CALLERS goroutines each checking random
// counters, one request at a time, for a duration. It prints one line:
//
//	checks/s p50_ms p99_ms checks requests degraded errors cpu_us
//
// requests being the HTTP requests made (so checks/requests is the checks
// per request), p50 and p99 the latency of a check (with -per, of a
// request), and cpu_us the load generator's own CPU per check (user and
// system, the client's share of the box).
//
// A counter is a tenant's (an API key of -keys, or -key), one of its
// -policies policies (named -policy, then -policy with 1, 2, … after it)
// and a subject ("user-" and a number): SUBJECTS counters in all, spread
// evenly over the tenants and, within a tenant, over its policies, so that
// the number of counters stays SUBJECTS whatever the tenants and policies.
//
// By default the checks go through the Go client, one Check at a time, or
// batched by the client (-batch, -batch-size). -per N sends them by hand,
// N to a request, each request one tenant's: POST /v1/check of one item
// when N is 1, POST /v1/check/batch of N one-item checks otherwise. -fill
// checks every counter once, in order, N to a request, and stops: what
// fills a store before its size is read.
//
// -cpuprofile writes its CPU profile, to see where a client's check goes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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

// space is the counters checked: perTenant counters for each key, r of
// them being policy r % policies and subject r / policies.
type space struct {
	keys      []string
	policies  []string
	perTenant int
}

func newSpace(keys []string, policy string, policies, subjects int) space {
	s := space{keys: keys, policies: []string{policy}}
	for i := 1; i < policies; i++ {
		s.policies = append(s.policies, policy+strconv.Itoa(i))
	}
	// At least one counter a tenant: more tenants than subjects are all
	// checked.
	s.perTenant = max(1, (subjects+len(keys)-1)/len(keys))
	return s
}

// chunks is how many requests of at most per checks fill every counter,
// each request one tenant's.
func (s space) chunks(per int) int {
	return (s.perTenant + per - 1) / per * len(s.keys)
}

// chunk appends to rs the counters of the c-th of those requests and
// returns its tenant (an index in keys).
func (s space) chunk(rs []int, c, per int) (int, []int) {
	each := (s.perTenant + per - 1) / per
	lo := c % each * per
	for r := lo; r < min(s.perTenant, lo+per); r++ {
		rs = append(rs, r)
	}
	return c / each, rs
}

// item appends the check item of the tenant's counter r to b as JSON.
func (s space) item(b []byte, r int) []byte {
	b = append(b, `{"policy":"`...)
	b = append(b, s.policies[r%len(s.policies)]...)
	b = append(b, `","subject":"user-`...)
	b = strconv.AppendInt(b, int64(r/len(s.policies)), 10)
	return append(b, `"}`...)
}

// body appends to b the request of the tenant's counters rs: /v1/check's
// body for one, /v1/check/batch's for more.
func (s space) body(b []byte, rs []int) []byte {
	if len(rs) == 1 {
		b = append(b, `{"items":[`...)
		return append(s.item(b, rs[0]), "]}"...)
	}
	b = append(b, `{"checks":[`...)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"items":[`...)
		b = append(s.item(b, r), "]}"...)
	}
	return append(b, "]}"...)
}

// tally is what the callers saw.
type tally struct {
	checks, degraded, errs, refused atomic.Int64
	lat                             [][]time.Duration
}

func main() {
	base := flag.String("url", "http://127.0.0.1:18281", "Tollgate's base URL")
	key := flag.String("key", os.Getenv("TOLLGATE_KEY"), "API key")
	keysFile := flag.String("keys", "", "a file of API keys, one a line, one a tenant (instead of -key)")
	tenants := flag.Int("tenants", 0, "the first this many keys of -keys (0: all)")
	policy := flag.String("policy", "bench", "policy to check (the first, with -policies)")
	policies := flag.Int("policies", 1, "policies a tenant: -policy, then -policy followed by 1, 2, …")
	callers := flag.Int("callers", 64, "concurrent callers")
	subjects := flag.Int("subjects", 100_000, "counters to pick from, over all tenants and policies")
	duration := flag.Duration("duration", 8*time.Second, "how long")
	batch := flag.Duration("batch", 0, "the client's batching's maxDelay (0: no batching)")
	batchSize := flag.Int("batch-size", client.DefaultBatchSize, "the client's batching's maxChecks")
	per := flag.Int("per", 0, "checks a request, sent by hand (0: through the Go client)")
	fill := flag.Bool("fill", false, "check every counter once, -per to a request, and stop")
	cpuprofile := flag.String("cpuprofile", "", "write the load generator's CPU profile here")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	keys := []string{*key}
	if *keysFile != "" {
		var err error
		if keys, err = readKeys(*keysFile, *tenants); err != nil {
			fail(err)
		}
	}
	switch {
	case *policies < 1 || *subjects < 1 || *callers < 1:
		fail(fmt.Errorf("-policies, -subjects and -callers must be at least 1"))
	case *per < 0 || *per > client.MaxBatchSize:
		fail(fmt.Errorf("-per %d: want 0 to %d", *per, client.MaxBatchSize))
	case *fill && *per == 0:
		fail(fmt.Errorf("-fill sends by hand: give -per"))
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}

	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 256
	ct := &counting{rt: t}
	hc := &http.Client{Transport: ct, Timeout: 10 * time.Second}
	sp := newSpace(keys, *policy, *policies, *subjects)
	tl := &tally{lat: make([][]time.Duration, *callers)}
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	switch {
	case *fill:
		// The chunks taken in order by whichever caller is free.
		chunks := sp.chunks(*per)
		var next atomic.Int64
		for i := range *callers {
			wg.Go(func() {
				var b []byte
				rs := make([]int, 0, *per)
				for {
					c := int(next.Add(1) - 1)
					if c >= chunks {
						return
					}
					k, rs := sp.chunk(rs[:0], c, *per)
					b = sp.body(b[:0], rs)
					tl.send(hc, *base, keys[k], b, len(rs), i)
				}
			})
		}
	case *per > 0:
		for i := range *callers {
			wg.Go(func() {
				var b []byte
				rs := make([]int, *per)
				for time.Now().Before(end) {
					k := rand.IntN(len(keys))
					for j := range rs {
						rs[j] = rand.IntN(sp.perTenant)
					}
					b = sp.body(b[:0], rs)
					tl.send(hc, *base, keys[k], b, len(rs), i)
				}
			})
		}
	default:
		opts := []client.Option{client.WithTimeout(2 * time.Second), client.WithHTTPClient(&http.Client{Transport: ct})}
		if *batch > 0 {
			opts = append(opts, client.WithBatching(*batch, *batchSize))
		}
		cs := make([]*client.Client, len(keys))
		for i, k := range keys {
			c, err := client.New(*base, k, opts...)
			if err != nil {
				fail(err)
			}
			cs[i] = c
		}
		ctx := context.Background()
		for i := range *callers {
			wg.Go(func() {
				for time.Now().Before(end) {
					r := rand.IntN(sp.perTenant)
					began := time.Now()
					d, err := cs[rand.IntN(len(cs))].Check(ctx, client.Item{Policy: sp.policies[r%len(sp.policies)], Subject: "user-" + strconv.Itoa(r/len(sp.policies))})
					tl.lat[i] = append(tl.lat[i], time.Since(began))
					tl.checks.Add(1)
					if err != nil {
						tl.errs.Add(1)
					} else if d.Degraded {
						tl.degraded.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	took := time.Since(start)
	cpu := cpuTime() - cpu0
	all := slices.Concat(tl.lat...)
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e6
	}
	n := tl.checks.Load()
	perCheck := 0.0
	if n > 0 {
		perCheck = float64(cpu.Microseconds()) / float64(n)
	}
	if r := tl.refused.Load(); r > 0 {
		fmt.Fprintf(os.Stderr, "loadgen: %d checks refused (counted as errors)\n", r)
	}
	fmt.Printf("%.0f %.3f %.3f %d %d %d %d %.1f\n", float64(n)/took.Seconds(), q(0.5), q(0.99), n, ct.n.Load(), tl.degraded.Load(), tl.errs.Load()+tl.refused.Load(), perCheck)
}

// send posts body, n checks of the tenant of key, and counts what came
// back: a failed request is n errors; a degraded or refused check one.
func (tl *tally) send(hc *http.Client, base, key string, body []byte, n, caller int) {
	path := "/v1/check"
	if n > 1 {
		path = "/v1/check/batch"
	}
	req, err := http.NewRequest("POST", base+path, bytes.NewReader(body))
	if err != nil {
		tl.errs.Add(int64(n))
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		tl.errs.Add(int64(n))
		tl.checks.Add(int64(n))
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	tl.lat[caller] = append(tl.lat[caller], time.Since(began))
	tl.checks.Add(int64(n))
	if err != nil || resp.StatusCode != http.StatusOK {
		if tl.errs.Add(int64(n)) == int64(n) {
			fmt.Fprintf(os.Stderr, "loadgen: POST %s: %d %s\n", path, resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 300)]))
		}
		return
	}
	// A check's answer begins with its verdict and whether it is degraded,
	// its items' own come after; a ceiling's refusal in a batch is a
	// problem with its status.
	tl.degraded.Add(int64(bytes.Count(b, []byte(`"degraded":true,"items"`))))
	tl.refused.Add(int64(bytes.Count(b, []byte(`{"allowed":false`)) + bytes.Count(b, []byte(`"status":`))))
}

// readKeys reads the first n (0: all) API keys of the file, one a line.
func readKeys(name string, n int) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() && (n == 0 || len(keys) < n) {
		if k := strings.TrimSpace(sc.Text()); k != "" {
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 || len(keys) < n {
		return nil, fmt.Errorf("%s: %d keys, want %d", name, len(keys), max(n, 1))
	}
	return keys, nil
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
