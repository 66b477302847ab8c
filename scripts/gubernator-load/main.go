// Command gubernator-load drives a Gubernator node the way scripts/loadgen
// drives Tollgate, for scripts/bench-batch.sh (GUBERNATOR=1): CALLERS
// goroutines, each sending GetRateLimits requests of PER decisions on
// random subjects among SUBJECTS (one fixed limit far above the load),
// one request at a time, for a duration, over Gubernator's HTTP gateway
// or its gRPC API. It prints one line, as loadgen does:
//
//	decisions/s p50_ms p99_ms decisions requests over_limit errors
//
// the latencies being per request (every decision of a request waits for
// the same answer).
//
// It is a module of its own so that Gubernator's dependencies stay out of
// Tollgate's go.mod.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// limit and window of every decision: far above what the load reaches.
const (
	limit    = 1_000_000_000
	windowMs = 3_600_000
)

// decider makes one GetRateLimits request of keys and says how many came
// back over the limit.
type decider func(ctx context.Context, keys []string) (over int, err error)

func main() {
	httpURL := flag.String("http", "", "Gubernator's HTTP base URL (e.g. http://127.0.0.1:18350)")
	grpcAddr := flag.String("grpc", "", "Gubernator's gRPC address (e.g. 127.0.0.1:18351)")
	callers := flag.Int("callers", 64, "concurrent callers")
	subjects := flag.Int("subjects", 100_000, "subjects to pick from")
	per := flag.Int("per", 1, "decisions per request")
	duration := flag.Duration("duration", 8*time.Second, "how long")
	flag.Parse()

	var decide decider
	switch {
	case *httpURL != "" && *grpcAddr == "":
		decide = overHTTP(*httpURL, *callers)
	case *grpcAddr != "" && *httpURL == "":
		c, err := guber.DialV1Server(*grpcAddr, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		decide = overGRPC(c)
	default:
		fmt.Fprintln(os.Stderr, "gubernator-load: give one of -http and -grpc")
		os.Exit(2)
	}

	ctx := context.Background()
	var over, errs atomic.Int64
	lat := make([][]time.Duration, *callers)
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *callers {
		wg.Go(func() {
			keys := make([]string, *per)
			for time.Now().Before(end) {
				for k := range keys {
					keys[k] = "user-" + strconv.Itoa(rand.IntN(*subjects))
				}
				began := time.Now()
				n, err := decide(ctx, keys)
				lat[i] = append(lat[i], time.Since(began))
				over.Add(int64(n))
				if err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e6
	}
	decisions := len(all) * *per
	fmt.Printf("%.0f %.3f %.3f %d %d %d %d\n", float64(decisions)/took.Seconds(), q(0.5), q(0.99), decisions, len(all), over.Load(), errs.Load())
}

func overGRPC(c guber.V1Client) decider {
	return func(ctx context.Context, keys []string) (int, error) {
		req := &guber.GetRateLimitsReq{Requests: make([]*guber.RateLimitReq, len(keys))}
		for i, k := range keys {
			req.Requests[i] = &guber.RateLimitReq{Name: "bench", UniqueKey: k, Hits: 1, Limit: limit, Duration: windowMs}
		}
		resp, err := c.GetRateLimits(ctx, req)
		if err != nil {
			return 0, err
		}
		return countOver(resp.Responses)
	}
}

// httpReq is GetRateLimitsReq as the HTTP gateway reads it.
type httpReq struct {
	Requests []httpItem `json:"requests"`
}

type httpItem struct {
	Name      string `json:"name"`
	UniqueKey string `json:"unique_key"`
	Hits      int64  `json:"hits"`
	Limit     int64  `json:"limit"`
	Duration  int64  `json:"duration"`
}

func overHTTP(base string, callers int) decider {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = callers, callers
	hc := &http.Client{Transport: t, Timeout: 2 * time.Second}
	url := base + "/v1/GetRateLimits"
	return func(ctx context.Context, keys []string) (int, error) {
		body := httpReq{Requests: make([]httpItem, len(keys))}
		for i, k := range keys {
			body.Requests[i] = httpItem{Name: "bench", UniqueKey: k, Hits: 1, Limit: limit, Duration: windowMs}
		}
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		var out struct {
			Responses []struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			} `json:"responses"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return 0, err
		}
		if len(out.Responses) != len(keys) {
			return 0, fmt.Errorf("%d answers to %d decisions", len(out.Responses), len(keys))
		}
		over := 0
		for _, r := range out.Responses {
			if r.Error != "" {
				return over, fmt.Errorf("gubernator: %s", r.Error)
			}
			if r.Status == "OVER_LIMIT" {
				over++
			}
		}
		return over, nil
	}
}

func countOver(rs []*guber.RateLimitResp) (int, error) {
	over := 0
	for _, r := range rs {
		if r.Error != "" {
			return over, fmt.Errorf("gubernator: %s", r.Error)
		}
		if r.Status == guber.Status_OVER_LIMIT {
			over++
		}
	}
	return over, nil
}
