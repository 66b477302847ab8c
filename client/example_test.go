package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"time"

	"github.com/tollgate/tollgate/client"
)

// An app server that limits every request by client address with the
// Tollgate policy "api-per-ip", behind a load balancer in 10.0.0.0/8. It is
// the integration shown in docs/api.md.
func Example() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"), client.WithFailMode(client.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	limit, err := client.Middleware(tg, client.MiddlewareConfig{
		Policy:  "api-per-ip",
		Key:     client.ByIP(client.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}),
		OnError: func(r *http.Request, err error) { log.Printf("rate limit: %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe(":8081", limit(mux)))
}

// One check per request of the app's own: a refusal is a Decision, not an
// error.
func ExampleClient_Check() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := tg.Check(context.Background(), client.Item{Policy: "sign-up-ip", Subject: "203.0.113.7"})
	if err != nil {
		// Tollgate gave no decision. When it was unavailable, d is the
		// fail mode's (Degraded); when it refused the call as wrong (an
		// unknown policy or key), d allows nothing.
		log.Printf("rate limit: %v", err)
	}
	if !d.Allowed {
		fmt.Printf("too many sign-ups; retry in %s\n", d.RetryAfter())
		return
	}
	fmt.Printf("%d sign-ups left\n", d.Items[0].Remaining)
}

// "Check before trying, count on failure": at most 8 failed sign-ins per
// account per 15 minutes. A Peek before the attempt counts nothing; a
// failed attempt is counted with Check; a successful one forgets the
// failures with Reset.
func ExampleClient_Peek() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"), client.WithFailMode(client.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	failed := client.Item{Policy: "failed-sign-ins", Subject: "account:42"}
	if d, err := tg.Peek(ctx, failed); !d.Allowed {
		fmt.Printf("account locked for %s (%v)\n", d.RetryAfter(), err)
		return
	}
	if passwordMatches() {
		if err := tg.Reset(ctx, failed.Policy, failed.Subject); err != nil {
			log.Printf("rate limit: %v", err)
		}
		return
	}
	if _, err := tg.Check(ctx, failed); err != nil {
		log.Printf("rate limit: %v", err)
	}
}

func passwordMatches() bool { return false }

// At most the policy's limit of exports run at once per account: a lease
// holds a place while the work runs and gives it back at the end.
func ExampleClient_Acquire() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := tg.Acquire(ctx, "exports-in-flight", "account:42", 5*time.Minute)
	if err != nil {
		log.Printf("rate limit: %v", err)
	}
	if !l.Allowed {
		fmt.Printf("%d exports already running; retry in %s\n", l.InFlight, l.RetryAfter)
		return
	}
	defer func() {
		if err := tg.Release(context.WithoutCancel(ctx), l); err != nil {
			log.Printf("rate limit: %v", err)
		}
	}()
	// … run the export …
}

// Tollgate's own ceilings refuse the tenant, not its user: a
// *RateLimitedError names the ceiling and when to retry, a
// *PaymentRequiredError where to pay.
func ExampleRateLimitedError() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"), client.WithRetry(3, 2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	_, err = tg.Check(context.Background(), client.Item{Policy: "api-per-ip", Subject: "203.0.113.7"})
	var rl *client.RateLimitedError
	var pr *client.PaymentRequiredError
	switch {
	case errors.As(err, &rl):
		log.Printf("Tollgate's %s ceiling of %d: retry in %s", rl.Layer, rl.Limit, rl.RetryAfter)
	case errors.As(err, &pr):
		log.Printf("pay at %s", pr.BillingURL)
	case errors.Is(err, client.ErrUnavailable):
		log.Printf("Tollgate is unreachable: %v", err)
	}
}

// When Tollgate cannot be reached (here nothing listens on port 1), the
// client answers with its fail mode at once and says why.
func ExampleWithFailMode() {
	tg, err := client.New("http://127.0.0.1:1", "tg_live_example", client.WithFailMode(client.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	d, err := tg.Check(context.Background(), client.Item{Policy: "sign-in-ip", Subject: "203.0.113.7"})
	fmt.Println("allowed:", d.Allowed, "degraded:", d.Degraded, "unavailable:", errors.Is(err, client.ErrUnavailable))
	// Output: allowed: false degraded: true unavailable: true
}

// Behind a trusted proxy, the client is the first untrusted hop of
// X-Forwarded-For from the right; IPv6 clients are keyed by their /64.
func ExampleByIP() {
	key := client.ByIP(client.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:41000"
	r.Header.Set("X-Forwarded-For", "192.0.2.1, 2001:db8:1:2::77, 10.0.0.9")
	fmt.Println(key(r))
	r.RemoteAddr = "198.51.100.4:41000" // not a trusted proxy: its header is not believed
	fmt.Println(key(r))
	// Output:
	// 2001:db8:1:2::
	// 198.51.100.4
}

// Limit an API by the app's own API key header, published to its clients
// as "api" in RateLimit-Policy and RateLimit.
func ExampleMiddleware() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	limit, err := client.Middleware(tg, client.MiddlewareConfig{
		Policy: "api-per-key-v2", Name: "api", Key: client.ByHeader("X-API-Key"),
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/api/", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, _ := client.DecisionFromContext(r.Context()); d.Degraded {
			w.Header().Set("Cache-Control", "no-store")
		}
		fmt.Fprintln(w, "ok")
	})))
}

// A wrong API key or policy name stops the app when it starts, rather than
// failing every check; an unavailable Tollgate does not (the fail mode
// answers for it, check by check).
func ExampleClient_Verify() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	err = tg.Verify(context.Background(), "sign-up-ip", "failed-sign-ins")
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		log.Fatalf("rate limit configuration: %v", err)
	case err != nil:
		log.Printf("rate limit: Tollgate cannot say now: %v", err)
	}
}

// A month of tokens for each end user, around a model call: Spend holds an
// estimate while the call runs and settles what the call reports it used.
func ExampleClient_Spend() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	r, _, err := tg.Spend(context.Background(), "llm-tokens", "user-42", 4000, func(ctx context.Context) (int64, error) {
		// … call the model …
		return 2750, nil // the answer's usage.total_tokens
	})
	switch {
	case err != nil:
		log.Printf("model call: %v", err)
	case !r.Allowed:
		fmt.Printf("this month's tokens are spent; retry in %s\n", r.RetryAfter)
	}
}
