package browsertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// recordViolations, run in every document before its own scripts, keeps
// what the Content-Security-Policy refused, for the test to read.
const recordViolations = `window.__violations = [];
document.addEventListener("securitypolicyviolation", function (e) {
	window.__violations.push(e.effectiveDirective + " refused " + (e.blockedURI || "inline") + (e.sample ? ": " + e.sample : ""));
});`

// pageRecord is what a tab did while the test watched: every request it
// sent, and every refusal, exception and console error on the way.
type pageRecord struct {
	mu       sync.Mutex
	requests []string
	problems []string
}

func (r *pageRecord) add(list *[]string, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, s)
}

func (r *pageRecord) snapshot() (requests, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...), append([]string(nil), r.problems...)
}

// TestAPIReferenceInChromium: the home page links to /docs, where Redoc,
// served by Tollgate itself, draws every operation of the OpenAPI document,
// while no request leaves Tollgate and its Content-Security-Policy refuses
// nothing the page needs.
func TestAPIReferenceInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := serve(t, dsn)
	b := newBrowser(t, base)

	rec := &pageRecord{}
	if err := chromedp.Listen(b.ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			rec.add(&rec.requests, ev.Request.URL)
		case *network.EventLoadingFailed:
			if ev.BlockedReason != "" {
				rec.add(&rec.problems, "blocked ("+string(ev.BlockedReason)+"): request "+string(ev.RequestID))
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				rec.add(&rec.problems, "console "+string(ev.Entry.Level)+": "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			rec.add(&rec.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, desc))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, cmp.Or(a.Description, string(a.Value)))
				}
				rec.add(&rec.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.do("record CSP violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: recordViolations})
		return err
	}))

	// The home page's link, followed as a reader would.
	b.open("/", "api-reference")
	b.submit("follow the home page's link to the API reference", chromedp.Click(tid("api-reference"), chromedp.NodeVisible))
	// Redoc parses 1 MB of script and draws the document after the page has
	// loaded: a generous bound for a loaded machine, not a timing.
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-section-id="operation/check"]`))); err != nil {
		t.Fatalf("Redoc drew no check operation: %v", err)
	}
	if loc, _ := chromedp.Run(b.ctx, chromedp.Location()); loc != base+"/docs" {
		t.Fatalf("the home page's link led to %s, want %s/docs", loc, base)
	}

	// Every operation of the document is drawn, /v1/check among them.
	ops := operationIDs(t, base)
	for _, id := range ops {
		if n := b.count(`[data-section-id="operation/` + id + `"]`); n != 1 {
			t.Errorf("operation %s: drawn %d times, want once", id, n)
		}
	}
	if n := b.count(`[data-section-id^="operation/"]`); n != len(ops) {
		t.Errorf("%d operations drawn, want the document's %d", n, len(ops))
	}
	check, err := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS(`[data-section-id="operation/check"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(check, "/v1/check") {
		t.Errorf("the check operation's section does not name /v1/check: %.300q", check)
	}
	b.screenshotWith("10-api-reference", chromedp.CaptureScreenshot())
	b.do("scroll to the check operation", chromedp.ScrollIntoView(chromedp.CSS(`[data-section-id="operation/check"]`)))
	b.screenshotWith("11-api-reference-check", chromedp.CaptureScreenshot())
	violations, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__violations`))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("Content-Security-Policy: %s", v)
	}
	requests, problems := rec.snapshot()
	for _, p := range problems {
		// The home page has no icon, and says nothing of one.
		if strings.Contains(p, "status of 404") && strings.HasSuffix(p, base+"/favicon.ico") {
			continue
		}
		t.Errorf("%s", p)
	}
	for _, u := range requests {
		// A data: URL is the page's own bytes, not a request to anyone.
		if !strings.HasPrefix(u, base+"/") && !strings.HasPrefix(u, "data:") {
			t.Errorf("a request left Tollgate: %s", u)
		}
	}
	for _, want := range []string{"/docs", "/docs/redoc.standalone.js", "/docs/init.js", "/v1/openapi.json"} {
		seen := false
		for _, u := range requests {
			seen = seen || strings.HasPrefix(u, base+want+"?") || u == base+want
		}
		if !seen {
			t.Errorf("no request for %s among %q", want, requests)
		}
	}
	t.Logf("the home page and the API reference made %d requests, all to Tollgate", len(requests))
}

// operationIDs lists the operations of the document the server serves.
func operationIDs(t *testing.T, base string) []string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(base + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for path, item := range doc.Paths {
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
			default:
				continue // the path's parameters, servers, summary
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", strings.ToUpper(method), path, err)
			}
			if op.OperationID == "" {
				t.Fatalf("%s %s has no operationId", strings.ToUpper(method), path)
			}
			ids = append(ids, op.OperationID)
		}
	}
	return ids
}
