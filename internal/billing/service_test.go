package billing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// Only tests of this package start stripe-mock; it dies with the binary.
func TestMain(m *testing.M) { pgtest.Main(m) }

// world is a database of the test's own with the pro and enterprise plans
// priced, and the billing service on it.
type world struct {
	t       *testing.T
	dsn     string
	pool    *pgxpool.Pool
	tenants *pgstore.Tenants
	store   *pgstore.Billing
	svc     *billing.Service
}

func newWorld(t *testing.T, payments billing.Payments) *world {
	t.Helper()
	dsn := pgtest.New(t)
	w := &world{t: t, dsn: dsn}
	w.pool = pgtest.PoolAt(t, dsn)
	w.tenants = pgstore.NewTenants(w.pool)
	w.store = pgstore.NewBilling(w.pool)
	w.svc = billing.NewService(billing.Config{Store: w.store, Tenants: w.tenants, Payments: payments, PublicURL: "https://tollgate.example"})
	ctx := context.Background()
	for plan, price := range map[string]string{tenant.PlanPro: "price_pro", tenant.PlanEnterprise: "price_ent"} {
		if _, err := w.tenants.SetPlanPrice(ctx, plan, price); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) tenant(plan string) tenant.Tenant {
	w.t.Helper()
	tn, err := w.tenants.CreateTenant(context.Background(), "billing test", plan)
	if err != nil {
		w.t.Fatal(err)
	}
	return tn
}

func (w *world) get(id string) tenant.Tenant {
	w.t.Helper()
	tn, err := w.tenants.Tenant(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return tn
}

// deliver hands ev to the service and fails the test on an error.
func (w *world) deliver(ev billing.Event) billing.Result {
	w.t.Helper()
	r, err := w.svc.HandleEvent(context.Background(), ev)
	if err != nil {
		w.t.Fatalf("HandleEvent(%s %s): %v", ev.ID, ev.Type, err)
	}
	return r
}

func (w *world) event(id string) billing.EventRecord {
	w.t.Helper()
	es, err := w.svc.Events(context.Background(), billing.EventFilter{Limit: 500})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, e := range es {
		if e.ID != id {
			continue
		}
		// Listed, and read whole (with its payload) by its id.
		full, err := w.svc.Event(context.Background(), id)
		if err != nil {
			w.t.Fatal(err)
		}
		if e.Payload != nil || full.Outcome != e.Outcome || full.Deliveries != e.Deliveries {
			w.t.Fatalf("event %s listed as %+v, read as %+v; want the same record, listed without its payload", id, e, full)
		}
		return full
	}
	w.t.Fatalf("event %s not recorded", id)
	return billing.EventRecord{}
}

func (w *world) audits(tenantID string) []audit.Entry {
	w.t.Helper()
	es, err := audit.NewLog(pgstore.NewAudit(w.pool)).List(context.Background(), audit.Filter{TenantID: tenantID, Kind: billing.AuditKind})
	if err != nil {
		w.t.Fatal(err)
	}
	return es
}

func wantTenant(t *testing.T, got tenant.Tenant, plan, status, customer, sub string) {
	t.Helper()
	if got.Plan != plan || got.BillingStatus != status || got.StripeCustomerID != customer || got.StripeSubscriptionID != sub {
		t.Errorf("tenant: plan %s status %s customer %q subscription %q; want %s %s %q %q",
			got.Plan, got.BillingStatus, got.StripeCustomerID, got.StripeSubscriptionID, plan, status, customer, sub)
	}
}

var base = time.Now().UTC().Truncate(time.Second).Add(-time.Hour)

func sec(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }

func checkout(id string, created time.Time, tenantID, customer, sub string) billing.Event {
	return billing.Event{ID: id, Type: billing.EventCheckoutCompleted, Created: created, CustomerID: customer,
		Checkout: &billing.Checkout{SessionID: "cs_" + id, Mode: "subscription", ClientReferenceID: tenantID, SubscriptionID: sub},
		Payload:  []byte(`{"id":"` + id + `"}`)}
}

func subscription(id, typ string, created time.Time, customer, sub, status, price string) billing.Event {
	return billing.Event{ID: id, Type: typ, Created: created, CustomerID: customer,
		Subscription: &billing.Subscription{ID: sub, Status: status, Items: []billing.Item{{ID: "si_" + sub, PriceID: price}}},
		Payload:      []byte(`{"id":"` + id + `"}`)}
}

func TestCheckoutCompletedLinksTenant(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	r := w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_A", "sub_A"))
	if r.Outcome != billing.OutcomeApplied || r.TenantID != tn.ID {
		t.Fatalf("checkout: %+v", r)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanStarter, tenant.StatusActive, "cus_A", "sub_A")
	if n := len(w.audits(tn.ID)); n != 0 {
		t.Errorf("%d audit entries for a link alone, want 0", n)
	}

	r = w.deliver(subscription("evt_sub", billing.EventSubscriptionCreated, sec(1), "cus_A", "sub_A", tenant.StatusActive, "price_pro"))
	if r.Outcome != billing.OutcomeApplied {
		t.Fatalf("subscription: %+v", r)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_A", "sub_A")
	if got := w.get(tn.ID).BillingUpdatedAt; got == nil || !got.Equal(sec(1)) {
		t.Errorf("billing_updated_at %v, want %v", got, sec(1))
	}
	es := w.audits(tn.ID)
	if len(es) != 1 {
		t.Fatalf("%d audit entries, want 1", len(es))
	}
	e := es[0]
	before, _ := e.Detail["before"].(map[string]any)
	after, _ := e.Detail["after"].(map[string]any)
	if e.Actor != "stripe" || e.Detail["event_id"] != "evt_sub" || before["plan"] != "starter" || after["plan"] != "pro" ||
		after["effective_plan"] != "pro" || after["billing_status"] != "active" {
		t.Errorf("audit entry %+v", e)
	}
	rec := w.event("evt_sub")
	if rec.Outcome != billing.OutcomeApplied || rec.TenantID != tn.ID || rec.CustomerID != "cus_A" || string(rec.Payload) != `{"id":"evt_sub"}` || rec.Deliveries != 1 {
		t.Errorf("recorded %+v", rec)
	}
}

// TestSubscriptionBeforeCheckout: the subscription's events often come before
// the checkout's; they find the tenant by the metadata Checkout put on the
// subscription, or else wait for the checkout to link the customer.
func TestSubscriptionBeforeCheckout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)

	t.Run("by metadata", func(t *testing.T) {
		tn := w.tenant(tenant.PlanStarter)
		ev := subscription("evt_meta", billing.EventSubscriptionCreated, sec(1), "cus_M", "sub_M", tenant.StatusActive, "price_pro")
		ev.Subscription.TenantID = tn.ID
		if r := w.deliver(ev); r.Outcome != billing.OutcomeApplied {
			t.Fatalf("subscription: %+v", r)
		}
		wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_M", "sub_M")
		if r := w.deliver(checkout("evt_meta_ck", sec(1), tn.ID, "cus_M", "sub_M")); r.Outcome != billing.OutcomeApplied {
			t.Fatalf("checkout: %+v", r)
		}
		wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_M", "sub_M")
	})

	t.Run("held until linked", func(t *testing.T) {
		tn := w.tenant(tenant.PlanStarter)
		r := w.deliver(subscription("evt_held", billing.EventSubscriptionCreated, sec(1), "cus_H", "sub_H", tenant.StatusActive, "price_pro"))
		if r.Outcome != billing.OutcomeUnknownCustomer || r.TenantID != "" || !strings.Contains(r.Note, "cus_H") {
			t.Fatalf("subscription of an unknown customer: %+v", r)
		}
		wantTenant(t, w.get(tn.ID), tenant.PlanStarter, tenant.StatusActive, "", "")
		if rec := w.event("evt_held"); rec.Outcome != billing.OutcomeUnknownCustomer {
			t.Fatalf("recorded %+v", rec)
		}
		if r := w.deliver(checkout("evt_held_ck", sec(2), tn.ID, "cus_H", "sub_H")); r.Outcome != billing.OutcomeApplied {
			t.Fatalf("checkout: %+v", r)
		}
		wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_H", "sub_H")
		rec := w.event("evt_held")
		if rec.Outcome != billing.OutcomeApplied || rec.TenantID != tn.ID || !strings.Contains(rec.Note, "evt_held_ck") {
			t.Errorf("held event after linking: %+v", rec)
		}
		if n := len(w.audits(tn.ID)); n != 1 {
			t.Errorf("%d audit entries, want 1", n)
		}
	})

	t.Run("metadata never takes over another customer's tenant", func(t *testing.T) {
		tn := w.tenant(tenant.PlanStarter)
		w.deliver(checkout("evt_own_ck", sec(1), tn.ID, "cus_O", "sub_O"))
		ev := subscription("evt_other", billing.EventSubscriptionCreated, sec(2), "cus_X", "sub_X", tenant.StatusActive, "price_ent")
		ev.Subscription.TenantID = tn.ID
		if r := w.deliver(ev); r.Outcome != billing.OutcomeUnknownCustomer {
			t.Fatalf("subscription of another customer: %+v", r)
		}
		wantTenant(t, w.get(tn.ID), tenant.PlanStarter, tenant.StatusActive, "cus_O", "sub_O")
	})
}

func TestReplayChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_R", "sub_R"))
	ev := subscription("evt_up", billing.EventSubscriptionUpdated, sec(2), "cus_R", "sub_R", tenant.StatusActive, "price_pro")
	if r := w.deliver(ev); r.Outcome != billing.OutcomeApplied {
		t.Fatalf("first delivery: %+v", r)
	}
	// An operator changes the plan by hand meanwhile: a replay must not
	// undo it.
	if _, err := w.pool.Exec(context.Background(), "UPDATE tenants SET plan = 'enterprise' WHERE id = $1", tn.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := w.deliver(ev)
		if r.Outcome != billing.OutcomeReplay || r.TenantID != tn.ID || !strings.Contains(r.Note, "applied") {
			t.Fatalf("replay: %+v", r)
		}
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanEnterprise, tenant.StatusActive, "cus_R", "sub_R")
	if rec := w.event("evt_up"); rec.Deliveries != 3 || rec.Outcome != billing.OutcomeApplied {
		t.Errorf("recorded %+v, want 3 deliveries, applied", rec)
	}
	if n := len(w.audits(tn.ID)); n != 1 {
		t.Errorf("%d audit entries, want 1", n)
	}
}

// TestConcurrentDeliveriesApplyOnce delivers one event many times at once
// through two services on two pools, as two instances would receive it.
func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	other := billing.NewService(billing.Config{Store: pgstore.NewBilling(pgtest.PoolAt(t, w.dsn)), Tenants: w.tenants})
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_C", "sub_C"))
	ev := subscription("evt_race", billing.EventSubscriptionUpdated, sec(2), "cus_C", "sub_C", tenant.StatusActive, "price_pro")
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[billing.Outcome]int{}
	start := make(chan struct{})
	for i := range n {
		svc := w.svc
		if i%2 == 1 {
			svc = other
		}
		wg.Go(func() {
			<-start
			r, err := svc.HandleEvent(context.Background(), ev)
			if err != nil {
				t.Errorf("delivery: %v", err)
				return
			}
			mu.Lock()
			outcomes[r.Outcome]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if outcomes[billing.OutcomeApplied] != 1 || outcomes[billing.OutcomeReplay] != n-1 {
		t.Errorf("outcomes %v, want 1 applied and %d replays", outcomes, n-1)
	}
	if rec := w.event("evt_race"); rec.Deliveries != n {
		t.Errorf("%d deliveries recorded, want %d", rec.Deliveries, n)
	}
	if got := len(w.audits(tn.ID)); got != 1 {
		t.Errorf("%d audit entries, want 1", got)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_C", "sub_C")
}

func TestOutOfOrderEndsInNewestState(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_O", "sub_O"))
	// Created, then updated, then deleted; delivered deleted first.
	for _, d := range []struct {
		ev      billing.Event
		outcome billing.Outcome
	}{
		{subscription("evt_del", billing.EventSubscriptionDeleted, sec(4), "cus_O", "sub_O", tenant.StatusCanceled, "price_pro"), billing.OutcomeApplied},
		{subscription("evt_up", billing.EventSubscriptionUpdated, sec(3), "cus_O", "sub_O", tenant.StatusActive, "price_ent"), billing.OutcomeStale},
		{subscription("evt_new", billing.EventSubscriptionCreated, sec(2), "cus_O", "sub_O", tenant.StatusActive, "price_pro"), billing.OutcomeStale},
	} {
		if r := w.deliver(d.ev); r.Outcome != d.outcome {
			t.Errorf("%s: %+v, want %s", d.ev.ID, r, d.outcome)
		}
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusCanceled, "cus_O", "sub_O")
	if rec := w.event("evt_up"); rec.Outcome != billing.OutcomeStale || rec.TenantID != tn.ID {
		t.Errorf("recorded %+v", rec)
	}
}

func TestPastDueKeepsTier(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_ck", sec(1), tn.ID, "cus_P", "sub_P"))
	w.deliver(subscription("evt_1", billing.EventSubscriptionCreated, sec(1), "cus_P", "sub_P", tenant.StatusActive, "price_pro"))
	r := w.deliver(billing.Event{ID: "evt_fail", Type: billing.EventInvoicePaymentFailed, Created: sec(5), CustomerID: "cus_P",
		Invoice: &billing.Invoice{ID: "in_1", SubscriptionID: "sub_P"}})
	if r.Outcome != billing.OutcomeApplied {
		t.Fatalf("payment failed: %+v", r)
	}
	got := w.get(tn.ID)
	wantTenant(t, got, tenant.PlanPro, tenant.StatusPastDue, "cus_P", "sub_P")
	if eff := tenant.EffectivePlanName(got.Plan, got.BillingStatus); eff != tenant.PlanPro {
		t.Errorf("effective plan %s, want pro", eff)
	}
	w.deliver(billing.Event{ID: "evt_paid", Type: billing.EventInvoicePaid, Created: sec(6), CustomerID: "cus_P",
		Invoice: &billing.Invoice{ID: "in_1", SubscriptionID: "sub_P"}})
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_P", "sub_P")
}

func TestUnknownCustomerAndIgnoredTypesAreRecorded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	r := w.deliver(billing.Event{ID: "evt_inv", Type: billing.EventInvoicePaid, Created: sec(1), CustomerID: "cus_nobody",
		Invoice: &billing.Invoice{ID: "in_1", SubscriptionID: "sub_1"}, Payload: []byte(`{"id":"evt_inv","type":"invoice.paid"}`)})
	if r.Outcome != billing.OutcomeUnknownCustomer {
		t.Errorf("invoice of an unknown customer: %+v", r)
	}
	r = w.deliver(billing.Event{ID: "evt_other", Type: "charge.succeeded", Created: sec(1), CustomerID: "cus_nobody"})
	if r.Outcome != billing.OutcomeIgnored {
		t.Errorf("charge.succeeded: %+v", r)
	}
	es, err := w.svc.Events(context.Background(), billing.EventFilter{Outcome: billing.OutcomeUnknownCustomer})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].ID != "evt_inv" || es[0].CustomerID != "cus_nobody" || !strings.Contains(string(w.event("evt_inv").Payload), "invoice.paid") {
		t.Errorf("unknown-customer events %+v", es)
	}
}

// TestFailureIsRecordedAndRetried: an event whose processing fails (here, a
// constraint refusing the plan) is recorded as failed for an operator, is
// processed again on the next delivery, and applies once the fault is gone.
func TestFailureIsRecordedAndRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	a := w.tenant(tenant.PlanStarter)
	ctx := context.Background()
	w.deliver(checkout("evt_a", sec(1), a.ID, "cus_F", "sub_F1"))
	if _, err := w.pool.Exec(ctx, "ALTER TABLE tenants ADD CONSTRAINT no_enterprise CHECK (plan <> 'enterprise') NOT VALID"); err != nil {
		t.Fatal(err)
	}
	fail := subscription("evt_fail", billing.EventSubscriptionUpdated, sec(4), "cus_F", "sub_F1", tenant.StatusActive, "price_ent")
	r, err := w.svc.HandleEvent(ctx, fail)
	if err == nil || r.Outcome != billing.OutcomeFailed {
		t.Fatalf("failing event: %+v, %v; want an error", r, err)
	}
	rec := w.event("evt_fail")
	if rec.Outcome != billing.OutcomeFailed || rec.Error == "" || rec.Deliveries != 1 || rec.TenantID != "" {
		t.Errorf("recorded %+v", rec)
	}
	if _, err := w.svc.HandleEvent(ctx, fail); err == nil {
		t.Fatal("second failing delivery: no error")
	}
	if rec := w.event("evt_fail"); rec.Deliveries != 2 || rec.Outcome != billing.OutcomeFailed {
		t.Errorf("after a second failure: %+v", rec)
	}
	wantTenant(t, w.get(a.ID), tenant.PlanStarter, tenant.StatusActive, "cus_F", "sub_F1")
	if _, err := w.pool.Exec(ctx, "ALTER TABLE tenants DROP CONSTRAINT no_enterprise"); err != nil {
		t.Fatal(err)
	}
	if r := w.deliver(fail); r.Outcome != billing.OutcomeApplied {
		t.Fatalf("delivery once fixed: %+v", r)
	}
	wantTenant(t, w.get(a.ID), tenant.PlanEnterprise, tenant.StatusActive, "cus_F", "sub_F1")
	if rec := w.event("evt_fail"); rec.Outcome != billing.OutcomeApplied || rec.Error != "" || rec.Deliveries != 3 {
		t.Errorf("after success: %+v", rec)
	}
	if r := w.deliver(fail); r.Outcome != billing.OutcomeReplay {
		t.Errorf("replay after success: %+v", r)
	}
}

// TestCheckoutOfAKnownCustomer: the customer decides the tenant, whatever
// tenant the session says it was made for.
func TestCheckoutOfAKnownCustomer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	a, b := w.tenant(tenant.PlanStarter), w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_a", sec(1), a.ID, "cus_F", "sub_F1"))
	if r := w.deliver(checkout("evt_b", sec(2), b.ID, "cus_F", "sub_F2")); r.TenantID != a.ID {
		t.Fatalf("checkout of a known customer: %+v, want tenant %s", r, a.ID)
	}
	wantTenant(t, w.get(b.ID), tenant.PlanStarter, tenant.StatusActive, "", "")
}

// TestCustomerConflictFails: the store refuses to link a customer another
// tenant holds, and the event fails rather than moving the customer.
func TestCustomerConflictFails(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	a, b := w.tenant(tenant.PlanStarter), w.tenant(tenant.PlanStarter)
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, "UPDATE tenants SET stripe_customer_id = 'cus_K' WHERE id = $1", b.ID); err != nil {
		t.Fatal(err)
	}
	// The service never asks for this (it finds b by the customer first),
	// so ask the store directly.
	_, err := w.store.ProcessEvent(ctx, billing.Event{ID: "evt_k", Type: billing.EventCheckoutCompleted, Created: sec(1)},
		func(ctx context.Context, tx billing.Tx) (billing.Result, error) {
			acc, err := tx.Account(ctx, a.ID)
			if err != nil {
				return billing.Result{}, err
			}
			acc.CustomerID = "cus_K"
			return billing.Result{}, tx.SaveAccount(ctx, acc, sec(1))
		})
	if !errors.Is(err, billing.ErrConflict) {
		t.Errorf("linking a customer another tenant has: %v, want ErrConflict", err)
	}
}

func TestEventsFilterAndLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tn := w.tenant(tenant.PlanStarter)
	for i := range 5 {
		w.deliver(checkout(fmt.Sprintf("evt_%d", i), sec(i), tn.ID, "cus_E", "sub_E"))
	}
	es, err := w.svc.Events(context.Background(), billing.EventFilter{TenantID: tn.ID, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].ID != "evt_4" {
		t.Errorf("events %v", es)
	}
	es, err = w.svc.Events(context.Background(), billing.EventFilter{TenantID: tn.ID, Offset: 3})
	if err != nil || len(es) != 2 || es[0].ID != "evt_1" || es[1].ID != "evt_0" {
		t.Errorf("events past the first 3: %v, %v", es, err)
	}
	es, err = w.svc.Events(context.Background(), billing.EventFilter{TenantID: "not-a-uuid"})
	if err != nil || len(es) != 0 {
		t.Errorf("events of a bad tenant id: %v, %v", es, err)
	}
	if _, err := w.svc.Event(context.Background(), "evt_nope"); !errors.Is(err, billing.ErrNotFound) {
		t.Errorf("an event never received: %v, want ErrNotFound", err)
	}
}

// TestOperatorLinksCustomer: events of a customer no tenant had are resolved
// by an operator linking the customer, which applies them.
func TestOperatorLinksCustomer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ctx := context.Background()
	tn, other := w.tenant(tenant.PlanStarter), w.tenant(tenant.PlanStarter)
	w.deliver(subscription("evt_1", billing.EventSubscriptionCreated, sec(1), "cus_Z", "sub_Z", tenant.StatusActive, "price_pro"))
	w.deliver(subscription("evt_2", billing.EventSubscriptionUpdated, sec(2), "cus_Z", "sub_Z", tenant.StatusPastDue, "price_ent"))

	if err := w.svc.LinkCustomer(ctx, tn.ID, "cus_Z", "admin@example.com"); err != nil {
		t.Fatal(err)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanEnterprise, tenant.StatusPastDue, "cus_Z", "sub_Z")
	for _, id := range []string{"evt_1", "evt_2"} {
		if rec := w.event(id); rec.Outcome != billing.OutcomeApplied || rec.TenantID != tn.ID || !strings.Contains(rec.Note, "operator admin@example.com") {
			t.Errorf("%s after linking: %+v", id, rec)
		}
	}
	es, err := audit.NewLog(pgstore.NewAudit(w.pool)).List(ctx, audit.Filter{TenantID: tn.ID, Kind: billing.AuditKindCustomerLinked})
	if err != nil || len(es) != 1 || es[0].Actor != "admin@example.com" {
		t.Errorf("link audit entries %+v, %v", es, err)
	}
	if n := len(w.audits(tn.ID)); n != 2 {
		t.Errorf("%d billing_changed entries, want 2", n)
	}
	// Linking again is a no-op; to another tenant a conflict.
	if err := w.svc.LinkCustomer(ctx, tn.ID, "cus_Z", "admin@example.com"); err != nil {
		t.Errorf("linking again: %v", err)
	}
	if err := w.svc.LinkCustomer(ctx, other.ID, "cus_Z", "admin@example.com"); !errors.Is(err, billing.ErrConflict) {
		t.Errorf("linking to another tenant: %v, want ErrConflict", err)
	}
	if err := w.svc.LinkCustomer(ctx, "00000000-0000-0000-0000-000000000000", "cus_Y", "admin@example.com"); !errors.Is(err, billing.ErrNotFound) {
		t.Errorf("linking to no tenant: %v, want ErrNotFound", err)
	}
}

// TestCheckoutNeverReplacesATenantsCustomer: a completed checkout that
// names a tenant which already has another Stripe customer (a second
// Checkout Session made for it, or a forged client_reference_id) keeps the
// tenant's customer and subscription, and is recorded with an outcome an
// operator sees, and logged.
func TestCheckoutNeverReplacesATenantsCustomer(t *testing.T) {
	t.Parallel()
	logs := &bytes.Buffer{}
	w := newWorld(t, nil)
	w.svc = billing.NewService(billing.Config{Store: w.store, Tenants: w.tenants, PublicURL: "https://tollgate.example",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	tn := w.tenant(tenant.PlanStarter)
	w.deliver(checkout("evt_first", sec(1), tn.ID, "cus_first", "sub_first"))
	w.deliver(subscription("evt_sub", billing.EventSubscriptionCreated, sec(2), "cus_first", "sub_first", tenant.StatusActive, "price_pro"))

	r := w.deliver(checkout("evt_second", sec(3), tn.ID, "cus_second", "sub_second"))
	if r.Outcome == billing.OutcomeApplied || r.TenantID != tn.ID {
		t.Errorf("checkout of another customer for the tenant: %+v, want a conflict recorded for tenant %s", r, tn.ID)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_first", "sub_first")
	rec := w.event("evt_second")
	if rec.Outcome != r.Outcome || rec.CustomerID != "cus_second" || !strings.Contains(rec.Note, "cus_first") || !strings.Contains(rec.Note, "cus_second") {
		t.Errorf("recorded %+v, want the outcome and a note naming both customers", rec)
	}
	if !strings.Contains(logs.String(), "evt_second") || !strings.Contains(logs.String(), "cus_second") {
		t.Errorf("the conflict is not logged: %s", logs)
	}
	// The other customer's later events do not reach the tenant either.
	if r := w.deliver(subscription("evt_sub2", billing.EventSubscriptionUpdated, sec(4), "cus_second", "sub_second", tenant.StatusCanceled, "price_pro")); r.TenantID == tn.ID {
		t.Errorf("the other customer's subscription event: %+v, want it kept from the tenant", r)
	}
	wantTenant(t, w.get(tn.ID), tenant.PlanPro, tenant.StatusActive, "cus_first", "sub_first")
}
