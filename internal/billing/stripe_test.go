package billing_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripeapi"
	"github.com/tollgate/tollgate/internal/billing/stripeapi/stripemocktest"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/usage"
)

// call is one request made to stripe-mock.
type call struct {
	method, path, idempotencyKey string
	form                         url.Values
	status                       int
}

// recorder is an http.RoundTripper that records every call: stripe-mock
// keeps nothing, so what was sent is checked here.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	resp, err := http.DefaultTransport.RoundTrip(req)
	c := call{method: req.Method, path: req.URL.Path, idempotencyKey: req.Header.Get("Idempotency-Key"), form: form}
	if resp != nil {
		c.status = resp.StatusCode
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) made(method, path string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.method == method && (path == "" || c.path == path) {
			out = append(out, c)
		}
	}
	return out
}

func stripeClient(t *testing.T) (*stripeapi.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	c := stripeapi.New(stripeapi.Config{
		Key: "sk_test_123", APIBase: stripemocktest.URL(t),
		HTTPClient: &http.Client{Transport: rec, Timeout: 10 * time.Second},
	})
	return c, rec
}

func TestCheckoutAgainstStripeMock(t *testing.T) {
	t.Parallel()
	sc, rec := stripeClient(t)
	w := newWorld(t, sc)
	ctx := context.Background()
	tn := w.tenant(tenant.PlanStarter)

	u, err := w.svc.Checkout(ctx, billing.CheckoutRequest{TenantID: tn.ID, Plan: tenant.PlanPro})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := url.Parse(u); err != nil || u == "" {
		t.Errorf("checkout URL %q", u)
	}
	calls := rec.made("POST", "/v1/checkout/sessions")
	if len(calls) != 1 {
		t.Fatalf("%d checkout sessions created, want 1", len(calls))
	}
	f := calls[0].form
	for k, want := range map[string]string{
		"mode":                         "subscription",
		"client_reference_id":          tn.ID,
		"line_items[0][price]":         "price_pro",
		"metadata[tollgate_tenant_id]": tn.ID,
		"subscription_data[metadata][tollgate_tenant_id]": tn.ID,
		"success_url": "https://tollgate.example/?checkout=success",
		"cancel_url":  "https://tollgate.example/?checkout=canceled",
	} {
		if got := f.Get(k); got != want {
			t.Errorf("checkout session %s = %q, want %q", k, got, want)
		}
	}
	if f.Has("customer") {
		t.Errorf("a tenant without a customer sent customer %q", f.Get("customer"))
	}

	for _, tc := range []struct {
		name, plan, reason string
	}{
		{"unknown plan", "platinum", `no plan is named "platinum"`},
		{"not purchasable", tenant.PlanGrowth, "cannot be bought"},
		{"no price", tenant.PlanStarter, "has no price yet"},
		{"no plan", "", "is required"},
	} {
		_, err := w.svc.Checkout(ctx, billing.CheckoutRequest{TenantID: tn.ID, Plan: tc.plan})
		var fe *tenant.FieldError
		if !errors.As(err, &fe) || fe.Field != "plan" || !bytes.Contains([]byte(fe.Reason), []byte(tc.reason)) {
			t.Errorf("%s: %v, want a field error on plan saying %q", tc.name, err, tc.reason)
		}
	}
	if _, err := w.svc.Checkout(ctx, billing.CheckoutRequest{TenantID: tn.ID, Plan: "pro", SuccessURL: "javascript:alert(1)"}); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("bad success_url: %v", err)
	}

	// A subscribed tenant changes plans in the portal, not by a second
	// subscription.
	w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_S", "sub_S"))
	w.deliver(subscription("evt_sub", billing.EventSubscriptionCreated, sec(1), "cus_S", "sub_S", tenant.StatusActive, "price_pro"))
	_, err = w.svc.Checkout(ctx, billing.CheckoutRequest{TenantID: tn.ID, Plan: tenant.PlanEnterprise})
	var fe *tenant.FieldError
	if !errors.As(err, &fe) || fe.Field != "plan" {
		t.Errorf("second subscription: %v, want a field error", err)
	}

	u, err = w.svc.Portal(ctx, tn.ID, "")
	if err != nil || u == "" {
		t.Fatalf("portal: %q, %v", u, err)
	}
	pc := rec.made("POST", "/v1/billing_portal/sessions")
	if len(pc) != 1 || pc[0].form.Get("customer") != "cus_S" || pc[0].form.Get("return_url") != "https://tollgate.example/" {
		t.Errorf("portal sessions %+v", pc)
	}

	// A canceled tenant may check out again, as the same customer.
	w.deliver(subscription("evt_del", billing.EventSubscriptionDeleted, sec(2), "cus_S", "sub_S", tenant.StatusCanceled, "price_pro"))
	if _, err := w.svc.Checkout(ctx, billing.CheckoutRequest{TenantID: tn.ID, Plan: tenant.PlanEnterprise}); err != nil {
		t.Fatal(err)
	}
	calls = rec.made("POST", "/v1/checkout/sessions")
	if last := calls[len(calls)-1].form; last.Get("customer") != "cus_S" || last.Get("line_items[0][price]") != "price_ent" {
		t.Errorf("checkout after cancel: %v", last)
	}
}

func TestPortalAndCheckoutNeedStripe(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	if _, err := w.svc.Checkout(context.Background(), billing.CheckoutRequest{TenantID: tn.ID, Plan: "pro"}); !errors.Is(err, billing.ErrNotConfigured) {
		t.Errorf("checkout without Stripe: %v", err)
	}
	if _, err := w.svc.Portal(context.Background(), tn.ID, ""); !errors.Is(err, billing.ErrNotConfigured) {
		t.Errorf("portal without Stripe: %v", err)
	}
	sc, _ := stripeClient(t)
	w2 := newWorld(t, sc)
	tn2 := w2.tenant(tenant.PlanStarter)
	if _, err := w2.svc.Portal(context.Background(), tn2.ID, ""); !errors.Is(err, billing.ErrNoCustomer) {
		t.Errorf("portal of a tenant without a customer: %v", err)
	}
}

// TestUsageReportedOncePerHour reports three tenants' hours with two
// reporters at once, as two instances would: each hour with checks is sent
// to stripe-mock once, under its idempotency key, with its quantity; a
// tenant held to starter is not billed; a second pass sends nothing.
func TestUsageReportedOncePerHour(t *testing.T) {
	t.Parallel()
	sc, rec := stripeClient(t)
	w := newWorld(t, sc)
	ctx := context.Background()
	now := time.Now().UTC()
	// The metered item arrived four hours and a bit ago: the three whole
	// hours after it are due (the current one is not over).
	linked := now.Truncate(time.Hour).Add(-4 * time.Hour).Add(10 * time.Minute)
	first := linked.Truncate(time.Hour).Add(time.Hour)

	type meteredTenant struct {
		tenant.Tenant
		status string
	}
	var tenants []meteredTenant
	for i, status := range []string{tenant.StatusActive, tenant.StatusPastDue, tenant.StatusUnpaid} {
		tn := w.tenant(tenant.PlanStarter)
		cus, sub := "cus_u"+strconv.Itoa(i), "sub_u"+strconv.Itoa(i)
		w.deliver(checkout("evt_ck"+strconv.Itoa(i), linked, tn.ID, cus, sub))
		ev := subscription("evt_sub"+strconv.Itoa(i), billing.EventSubscriptionCreated, linked, cus, sub, status, "price_pro")
		ev.Subscription.Items = append(ev.Subscription.Items, billing.Item{ID: "si_metered" + strconv.Itoa(i), PriceID: "price_use", Metered: true})
		w.deliver(ev)
		tenants = append(tenants, meteredTenant{tn, status})
	}
	// Checks: hour 0 has 7 live checks allowed and 3 refused by a policy (10
	// count), plus refusals by a ceiling and test-key checks (which do not);
	// hour 1 has none; hour 2 has 5; the current hour has 100 (not due).
	var rows []usage.Row
	for _, tn := range tenants {
		rows = append(rows,
			usage.Row{TenantID: tn.ID, Minute: first.Add(time.Minute), Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 7},
			usage.Row{TenantID: tn.ID, Minute: first.Add(59 * time.Minute), Live: true, Checked: true, Outcome: admission.LayerPolicy, Count: 3},
			usage.Row{TenantID: tn.ID, Minute: first.Add(2 * time.Minute), Live: true, Checked: true, Outcome: admission.LayerQuota, Count: 50},
			usage.Row{TenantID: tn.ID, Minute: first.Add(3 * time.Minute), Live: false, Checked: true, Outcome: admission.OutcomeAllowed, Count: 40},
			usage.Row{TenantID: tn.ID, Minute: first.Add(4 * time.Minute), Live: true, Checked: false, Outcome: admission.OutcomeAllowed, Count: 30},
			usage.Row{TenantID: tn.ID, Minute: first.Add(2*time.Hour + 30*time.Minute), Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 5},
			usage.Row{TenantID: tn.ID, Minute: now.Truncate(time.Hour), Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 100},
		)
	}
	usageStore := pgstore.NewUsage(w.pool)
	if err := usageStore.AddUsage(ctx, uuid.NewString(), rows); err != nil {
		t.Fatal(err)
	}

	newReporter := func(store *pgstore.Billing) *billing.Reporter {
		return billing.NewReporter(billing.ReporterConfig{Cursors: store, Usage: usageStore, Meter: sc, Grace: time.Second})
	}
	a, b := newReporter(w.store), newReporter(pgstore.NewBilling(openPool(t, w.dsn)))
	var wg sync.WaitGroup
	settled := make([]int, 2)
	for i, r := range []*billing.Reporter{a, b} {
		wg.Go(func() {
			n, err := r.ReportDue(ctx)
			if err != nil {
				t.Errorf("reporter %d: %v", i, err)
			}
			settled[i] = n
		})
	}
	wg.Wait()
	if got := settled[0] + settled[1]; got != 9 {
		t.Errorf("reporters settled %d hours, want 9 (3 tenants x 3 hours)", got)
	}

	type sent struct {
		path, key, quantity, timestamp, action string
	}
	var got []sent
	for _, c := range rec.made("POST", "") {
		if c.status != 200 {
			t.Errorf("stripe-mock answered %d to %s", c.status, c.path)
		}
		got = append(got, sent{c.path, c.idempotencyKey, c.form.Get("quantity"), c.form.Get("timestamp"), c.form.Get("action")})
	}
	var want []sent
	for i, tn := range tenants[:2] { // the unpaid tenant is held to starter: not billed
		path := "/v1/subscription_items/si_metered" + strconv.Itoa(i) + "/usage_records"
		for _, h := range []struct {
			hour time.Time
			q    string
		}{{first, "10"}, {first.Add(2 * time.Hour), "5"}} {
			want = append(want, sent{path, billing.UsageKey(tn.ID, h.hour), h.q,
				strconv.FormatInt(h.hour.Add(time.Hour-time.Second).Unix(), 10), "set"})
		}
	}
	sortSent := func(s []sent) {
		sort.Slice(s, func(i, j int) bool { return s[i].key < s[j].key })
	}
	sortSent(got)
	sortSent(want)
	if len(got) != len(want) {
		t.Fatalf("usage records sent:\n%+v\nwant:\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("usage record %d:\ngot  %+v\nwant %+v", i, got[i], want[i])
		}
	}

	// What was recorded: every due hour once, the unpaid tenant's skipped.
	for _, tn := range tenants {
		reps, err := w.store.UsageReports(ctx, tn.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 3 {
			t.Fatalf("tenant %s: %d hours recorded, want 3: %+v", tn.status, len(reps), reps)
		}
		for _, r := range reps {
			want := billing.UsageReported
			switch {
			case tn.status == tenant.StatusUnpaid:
				want = billing.UsageSkipped
			case r.Hour.Equal(first.Add(time.Hour)):
				want = billing.UsageZero
			}
			if r.Outcome != want || r.IdempotencyKey != billing.UsageKey(tn.ID, r.Hour) {
				t.Errorf("tenant %s hour %s: %+v, want %s", tn.status, r.Hour, r, want)
			}
		}
	}

	// Nothing more is due: another pass sends nothing.
	before := len(rec.made("POST", ""))
	if n, err := a.ReportDue(ctx); err != nil || n != 0 {
		t.Errorf("second pass: %d hours, %v", n, err)
	}
	if after := len(rec.made("POST", "")); after != before {
		t.Errorf("second pass sent %d usage records", after-before)
	}
}

// TestUsageRejectedIsRecorded: an hour Stripe refuses for good is recorded
// as rejected and not tried again; one that fails for now is tried again.
func TestUsageRejectedIsRecorded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ctx := context.Background()
	linked := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_ck", linked, tn.ID, "cus_r", "sub_r"))
	ev := subscription("evt_sub", billing.EventSubscriptionCreated, linked, "cus_r", "sub_r", tenant.StatusActive, "price_pro")
	ev.Subscription.Items = append(ev.Subscription.Items, billing.Item{ID: "si_m", PriceID: "price_use", Metered: true})
	w.deliver(ev)
	usageStore := pgstore.NewUsage(w.pool)
	first := linked.Add(time.Hour)
	err := usageStore.AddUsage(ctx, uuid.NewString(), []usage.Row{
		{TenantID: tn.ID, Minute: first, Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 1},
		{TenantID: tn.ID, Minute: first.Add(time.Hour), Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMeter{errs: []error{
		errors.Join(billing.ErrRejected, billing.ErrProvider), // first hour: for good
		billing.ErrProvider, // second hour: for now
	}}
	r := billing.NewReporter(billing.ReporterConfig{Cursors: w.store, Usage: usageStore, Meter: m, Grace: time.Second})
	n, err := r.ReportDue(ctx)
	if n != 1 || !errors.Is(err, billing.ErrProvider) {
		t.Fatalf("first pass: %d hours, %v; want 1 and a provider error", n, err)
	}
	n, err = r.ReportDue(ctx)
	if n != 1 || err != nil {
		t.Fatalf("second pass: %d hours, %v; want 1 and no error", n, err)
	}
	reps, err := w.store.UsageReports(ctx, tn.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[1].Outcome != billing.UsageRejected || reps[1].Note == "" || reps[0].Outcome != billing.UsageReported || reps[0].Quantity != 2 {
		t.Errorf("reports %+v", reps)
	}
	if len(m.sent) != 3 || m.sent[1].IdempotencyKey != m.sent[2].IdempotencyKey {
		t.Errorf("sent %+v: want the failed hour again under the same key", m.sent)
	}
}

type fakeMeter struct {
	mu   sync.Mutex
	errs []error
	sent []billing.UsageReport
}

func (m *fakeMeter) ReportUsage(_ context.Context, r billing.UsageReport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, r)
	if len(m.errs) > 0 {
		err := m.errs[0]
		m.errs = m.errs[1:]
		return err
	}
	return nil
}
