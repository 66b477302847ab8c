package billing_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestPrunerDeletesOldEventsButHeldOnes: events received over 90 days ago
// go (applied, ignored, failed, and held ones an operator has since
// resolved); recent ones, and old ones still held for an unknown customer,
// stay.
func TestPrunerDeletesOldEventsButHeldOnes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ctx := context.Background()
	tn := w.tenant(tenant.PlanStarter)
	invoice := func(id, customer string) billing.Event {
		return billing.Event{ID: id, Type: billing.EventInvoicePaid, Created: sec(1), CustomerID: customer,
			Invoice: &billing.Invoice{ID: "in_" + id, SubscriptionID: "sub_" + customer}}
	}
	w.deliver(checkout("evt_old_applied", sec(1), tn.ID, "cus_known", "sub_known"))
	w.deliver(billing.Event{ID: "evt_old_ignored", Type: "charge.succeeded", Created: sec(1)})
	w.deliver(invoice("evt_old_held", "cus_held"))
	w.deliver(invoice("evt_old_resolved", "cus_later"))
	w.deliver(billing.Event{ID: "evt_recent_ignored", Type: "charge.succeeded", Created: sec(2)})
	w.deliver(invoice("evt_recent_held", "cus_held2"))
	w.deliver(billing.Event{ID: "evt_89_days", Type: "charge.succeeded", Created: sec(3)})
	if err := w.store.RecordFailure(ctx, billing.Event{ID: "evt_old_failed", Type: billing.EventInvoicePaid, Created: sec(1)}, "boom"); err != nil {
		t.Fatal(err)
	}
	// Linking the customer resolves its held event: it is applied.
	if err := w.svc.LinkCustomer(ctx, w.tenant(tenant.PlanStarter).ID, "cus_later", "admin@example.com"); err != nil {
		t.Fatal(err)
	}
	if rec := w.event("evt_old_resolved"); rec.Outcome == billing.OutcomeUnknownCustomer {
		t.Fatalf("evt_old_resolved after linking: %+v", rec)
	}
	age := func(days int, ids ...string) {
		t.Helper()
		_, err := w.pool.Exec(ctx, `UPDATE stripe_events SET received_at = now() - make_interval(days => $1)
			WHERE id = ANY ($2)`, days, ids)
		if err != nil {
			t.Fatal(err)
		}
	}
	age(91, "evt_old_applied", "evt_old_ignored", "evt_old_held", "evt_old_resolved", "evt_old_failed")
	age(89, "evt_89_days")

	p := billing.NewPruner(billing.PrunerConfig{Events: w.store})
	n, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("Prune deleted %d events, want 4", n)
	}
	es, err := w.svc.Events(ctx, billing.EventFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.ID)
	}
	slices.Sort(got)
	want := []string{"evt_89_days", "evt_old_held", "evt_recent_held", "evt_recent_ignored"}
	if !slices.Equal(got, want) {
		t.Errorf("events after Prune = %v, want %v", got, want)
	}
	// A shorter retention, from an injected clock, takes the rest but the
	// held events.
	p = billing.NewPruner(billing.PrunerConfig{Events: w.store, Retention: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if n, err := p.Prune(ctx); err != nil || n != 2 {
		t.Errorf("Prune with 1h retention, 2h on = %d, %v; want 2, nil", n, err)
	}
	if rec := w.event("evt_recent_held"); rec.Outcome != billing.OutcomeUnknownCustomer {
		t.Errorf("evt_recent_held after Prune: %+v", rec)
	}
}
