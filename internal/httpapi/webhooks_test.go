package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripeapi"
	"github.com/tollgate/tollgate/internal/billing/stripeapi/stripemocktest"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/logbuf"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/pgtest"
)

const webhookSecret = "whsec_httpapi_test_0123456789"

// billingInstance is one Tollgate instance's billing routes: New's webhook
// and billing-link routes, plus the /v1/billing routes behind a stand-in for
// the auth middleware that takes the bearer token as the tenant id.
type billingInstance struct {
	e    *echo.Echo
	logs *logbuf.Buffer
}

// billingWorld is a database of the test's own, with pro priced.
type billingWorld struct {
	t   *testing.T
	dsn string
	db  *pgxpool.Pool
}

func newBillingWorld(t *testing.T) *billingWorld {
	t.Helper()
	dsn := pgtest.New(t)
	w := &billingWorld{t: t, dsn: dsn, db: billingPool(t, dsn)}
	w.exec("UPDATE plans SET stripe_price_id = 'price_pro' WHERE name = 'pro'")
	return w
}

func billingPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (w *billingWorld) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.db.Exec(context.Background(), sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

func (w *billingWorld) tenant() string {
	w.t.Helper()
	var id string
	if err := w.db.QueryRow(context.Background(), `INSERT INTO tenants (name, plan) VALUES ('billing test', 'starter') RETURNING id::text`).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *billingWorld) planAndStatus(id string) (string, string) {
	w.t.Helper()
	var plan, status string
	if err := w.db.QueryRow(context.Background(), `SELECT plan, billing_status FROM tenants WHERE id = $1`, id).Scan(&plan, &status); err != nil {
		w.t.Fatal(err)
	}
	return plan, status
}

func (w *billingWorld) count(sql string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// instance builds an instance on its own pool; stripe says whether it has a
// Stripe API key (pointing at stripe-mock), secret whether a webhook secret.
func (w *billingWorld) instance(stripe, secret bool, mods ...func(*Config)) *billingInstance {
	w.t.Helper()
	pool := billingPool(w.t, w.dsn)
	tenants := pgstore.NewTenants(pool)
	var payments billing.Payments
	if stripe {
		payments = stripeapi.New(stripeapi.Config{Key: "sk_test_123", APIBase: stripemocktest.URL(w.t)})
	}
	logs := &logbuf.Buffer{}
	// This instance's memory, as serve wires it: where billing links are
	// counted without a shared store.
	local := memory.New(memory.Config{MaxKeys: 10_000, PruneEvery: -1})
	w.t.Cleanup(func() { local.Close() })
	cfg := Config{
		LinkLimiter: gate.NewLimiter("billing link limits", nil, local, nil),
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
		Ready:       pool.Ping,
		PublicURL:   "https://tollgate.example",
		BillingKey:  []byte("billing-key-for-tests"),
		Billing: billing.NewService(billing.Config{
			Store: pgstore.NewBilling(pool), Tenants: tenants, Payments: payments, PublicURL: "https://tollgate.example",
		}),
	}
	if secret {
		cfg.StripeWebhooks = stripeapi.NewVerifier([]string{"whsec_retired_000000", webhookSecret}, "sk_test_123")
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	e := New(cfg)
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if token, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer "); ok {
				setTenantID(c, token)
			}
			return next(c)
		}
	}
	registerBilling(e.Group("/v1/billing", auth), &api{cfg: cfg})
	return &billingInstance{e: e, logs: logs}
}

func (in *billingInstance) serve(method, target, tenant, body string, header ...string) answer {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if tenant != "" {
		req.Header.Set("Authorization", "Bearer "+tenant)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	in.e.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// post sends a webhook with payload signed at when (zero: now) with secret.
func (in *billingInstance) post(payload, secret string, when time.Time) answer {
	header := ""
	if secret != "" {
		header = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: secret, Timestamp: when}).Header
	}
	return in.serve(http.MethodPost, "/webhooks/stripe", "", payload, "Stripe-Signature", header)
}

func eventJSON(id, typ string, created time.Time, object string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"livemode":false,"api_version":"2024-06-20","data":{"object":%s}}`,
		id, typ, created.Unix(), object)
}

func checkoutJSON(id string, created time.Time, tenant, customer, sub string) string {
	return eventJSON(id, "checkout.session.completed", created, fmt.Sprintf(
		`{"id":"cs_%s","object":"checkout.session","mode":"subscription","client_reference_id":%q,"customer":%q,"subscription":%q}`,
		id, tenant, customer, sub))
}

func subscriptionJSON(id, typ string, created time.Time, customer, sub, status, price string) string {
	return eventJSON(id, typ, created, fmt.Sprintf(
		`{"id":%q,"object":"subscription","customer":%q,"status":%q,"items":{"object":"list","data":[{"id":"si_1","price":{"id":%q}}]}}`,
		sub, customer, status, price))
}

func outcome(t *testing.T, a answer) string {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("webhook answered %d: %s", a.status, a.body)
	}
	var w struct {
		Received bool   `json:"received"`
		Outcome  string `json:"outcome"`
	}
	if err := json.Unmarshal(a.body, &w); err != nil || !w.Received {
		t.Fatalf("webhook answer %s: %v", a.body, err)
	}
	return w.Outcome
}

func wantProblem(t *testing.T, a answer, status int, typeSuffix string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("content type %q", ct)
	}
	m := a.json(t)
	if typ, _ := m["type"].(string); !strings.HasSuffix(typ, typeSuffix) {
		t.Errorf("problem type %q, want …%s", typ, typeSuffix)
	}
}

func TestWebhookWithoutSecretAnswers503(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, false)
	payload := checkoutJSON("evt_1", time.Now(), w.tenant(), "cus_1", "sub_1")
	a := in.post(payload, webhookSecret, time.Time{})
	wantProblem(t, a, http.StatusServiceUnavailable, "billing-not-configured")
	if !strings.Contains(in.logs.String(), "STRIPE_WEBHOOK_SECRET is not set") {
		t.Errorf("log does not say why:\n%s", in.logs)
	}
	if n := w.count("SELECT count(*) FROM stripe_events"); n != 0 {
		t.Errorf("%d events recorded", n)
	}
}

func TestWebhookRefusesBadSignaturesAndChangesNothing(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	tenant := w.tenant()
	payload := checkoutJSON("evt_1", time.Now(), tenant, "cus_1", "sub_1")
	for _, tc := range []struct {
		name   string
		answer answer
	}{
		{"forged", in.post(payload, "whsec_forger_000000", time.Time{})},
		{"stale", in.post(payload, webhookSecret, time.Now().Add(-6*time.Minute))},
		// Signed "in the future": a clock skewed past the tolerance, or a
		// signature made to be replayed later.
		{"from the future", in.post(payload, webhookSecret, time.Now().Add(400*time.Second))},
		{"missing", in.post(payload, "", time.Time{})},
		{"body changed after signing", in.serve(http.MethodPost, "/webhooks/stripe", "", strings.Replace(payload, "cus_1", "cus_2", 1),
			"Stripe-Signature", webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: webhookSecret}).Header)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.answer, http.StatusBadRequest, "invalid-webhook")
		})
	}
	big := eventJSON("evt_big", "invoice.paid", time.Now(), `{"pad":"`+strings.Repeat("x", MaxWebhookBody)+`"}`)
	if a := in.post(big, webhookSecret, time.Time{}); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", a.status, a.body)
	}
	if n := w.count("SELECT count(*) FROM stripe_events"); n != 0 {
		t.Errorf("%d events recorded from refused webhooks", n)
	}
	if n := w.count("SELECT count(*) FROM tenants WHERE stripe_customer_id IS NOT NULL"); n != 0 {
		t.Errorf("refused webhooks linked %d tenants", n)
	}
	if strings.Contains(in.logs.String(), "client_reference_id") {
		t.Error("a webhook body reached the log")
	}

	// Signed with the retiring secret: still good during a rotation.
	if got := outcome(t, in.post(payload, "whsec_retired_000000", time.Time{})); got != "applied" {
		t.Errorf("outcome %s, want applied", got)
	}
	if got := outcome(t, in.post(payload, webhookSecret, time.Time{})); got != "replay" {
		t.Errorf("second delivery: outcome %s, want replay", got)
	}
}

// TestWebhookSameEventOnTwoInstances posts one event to two instances at the
// same moment, several times each: it is applied once.
func TestWebhookSameEventOnTwoInstances(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	a, b := w.instance(false, true), w.instance(false, true)
	tenant := w.tenant()
	now := time.Now()
	outcome(t, a.post(checkoutJSON("evt_ck", now, tenant, "cus_2", "sub_2"), webhookSecret, time.Time{}))
	payload := subscriptionJSON("evt_up", "customer.subscription.updated", now, "cus_2", "sub_2", "active", "price_pro")
	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for i := range 10 {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Go(func() {
			got := in.post(payload, webhookSecret, time.Time{})
			if got.status != http.StatusOK {
				t.Errorf("delivery: %d %s", got.status, got.body)
				return
			}
			mu.Lock()
			outcomes[outcome(t, got)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if outcomes["applied"] != 1 || outcomes["replay"] != 9 {
		t.Errorf("outcomes %v, want 1 applied and 9 replays", outcomes)
	}
	if plan, status := w.planAndStatus(tenant); plan != "pro" || status != "active" {
		t.Errorf("tenant %s %s, want pro active", plan, status)
	}
	if n := w.count("SELECT count(*) FROM audit WHERE tenant_id = $1 AND kind = 'billing_changed'", tenant); n != 1 {
		t.Errorf("%d audit entries, want 1", n)
	}
	if n := w.count("SELECT deliveries FROM stripe_events WHERE id = 'evt_up'"); n != 10 {
		t.Errorf("%d deliveries recorded, want 10", n)
	}
}

func TestWebhookOutOfOrderAndUnknown(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	tenant := w.tenant()
	t0 := time.Now().Add(-time.Minute)
	outcome(t, in.post(checkoutJSON("evt_ck", t0, tenant, "cus_3", "sub_3"), webhookSecret, time.Time{}))
	for _, d := range []struct {
		payload, want string
	}{
		{subscriptionJSON("evt_del", "customer.subscription.deleted", t0.Add(3*time.Second), "cus_3", "sub_3", "canceled", "price_pro"), "applied"},
		{subscriptionJSON("evt_up", "customer.subscription.updated", t0.Add(2*time.Second), "cus_3", "sub_3", "active", "price_pro"), "stale"},
		{subscriptionJSON("evt_x", "customer.subscription.updated", t0, "cus_nobody", "sub_x", "active", "price_pro"), "unknown_customer"},
		{eventJSON("evt_charge", "charge.succeeded", t0, `{"id":"ch_1","object":"charge","customer":"cus_3"}`), "ignored"},
	} {
		if got := outcome(t, in.post(d.payload, webhookSecret, time.Time{})); got != d.want {
			t.Errorf("outcome %s, want %s", got, d.want)
		}
	}
	if plan, status := w.planAndStatus(tenant); plan != "pro" || status != "canceled" {
		t.Errorf("tenant %s %s, want pro canceled", plan, status)
	}
}

func TestWebhookProcessingErrorIs500(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	tenant := w.tenant()
	outcome(t, in.post(checkoutJSON("evt_ck", time.Now(), tenant, "cus_4", "sub_4"), webhookSecret, time.Time{}))
	w.exec("ALTER TABLE tenants ADD CONSTRAINT no_pro CHECK (plan <> 'pro') NOT VALID")
	payload := subscriptionJSON("evt_up", "customer.subscription.updated", time.Now(), "cus_4", "sub_4", "active", "price_pro")
	a := in.post(payload, webhookSecret, time.Time{})
	wantProblem(t, a, http.StatusInternalServerError, "internal-error")
	if !strings.Contains(in.logs.String(), "evt_up") {
		t.Errorf("the failure is not logged:\n%s", in.logs)
	}
	w.exec("ALTER TABLE tenants DROP CONSTRAINT no_pro")
	if got := outcome(t, in.post(payload, webhookSecret, time.Time{})); got != "applied" {
		t.Errorf("retry: %s, want applied", got)
	}
}

// TestWebhookOfTheOtherModeChangesNothing: the instance's STRIPE_API_KEY is
// a test key, so a live-mode event, properly signed, is refused with 400
// (Stripe shows the failing deliveries and retries them once the keys are
// fixed) and neither recorded nor applied.
func TestWebhookOfTheOtherModeChangesNothing(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	tenant := w.tenant()
	live := strings.Replace(checkoutJSON("evt_live", time.Now(), tenant, "cus_1", "sub_1"), `"livemode":false`, `"livemode":true`, 1)
	wantProblem(t, in.post(live, webhookSecret, time.Time{}), http.StatusBadRequest, "invalid-webhook")
	if !strings.Contains(in.logs.String(), "STRIPE_API_KEY") {
		t.Errorf("the log does not say why:\n%s", in.logs)
	}
	if n := w.count("SELECT count(*) FROM stripe_events"); n != 0 {
		t.Errorf("%d events recorded", n)
	}
	if n := w.count("SELECT count(*) FROM tenants WHERE id = $1 AND stripe_customer_id IS NOT NULL", tenant); n != 0 {
		t.Errorf("the tenant was linked to a customer by a live event on a test server")
	}
	// The same event in test mode is applied.
	test := checkoutJSON("evt_test", time.Now(), tenant, "cus_1", "sub_1")
	if got := outcome(t, in.post(test, webhookSecret, time.Time{})); got != "applied" {
		t.Errorf("test-mode event: outcome %q", got)
	}
}
