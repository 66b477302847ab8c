package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

var (
	t0     = time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	prices = Prices{"price_pro": tenant.PlanPro, "price_ent": tenant.PlanEnterprise}
)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func subEvent(id, typ string, created time.Time, subID, status string, items ...Item) Event {
	return Event{ID: id, Type: typ, Created: created, CustomerID: "cus_1",
		Subscription: &Subscription{ID: subID, Status: status, Items: items}}
}

func invoiceEvent(id, typ string, created time.Time, subID string) Event {
	return Event{ID: id, Type: typ, Created: created, CustomerID: "cus_1", Invoice: &Invoice{ID: "in_" + id, SubscriptionID: subID}}
}

var proItem = Item{ID: "si_pro", PriceID: "price_pro"}

// linked is a starter tenant linked to cus_1 and sub_1, in good standing.
var linked = Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1"}

// TestStatusToEffectivePlan is every Stripe subscription status, applied to
// a tenant buying pro, and the plan whose limits then apply.
func TestStatusToEffectivePlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    string
		effective string
	}{
		{tenant.StatusActive, tenant.PlanPro},
		{tenant.StatusTrialing, tenant.PlanPro},
		{tenant.StatusPastDue, tenant.PlanPro}, // keeps its tier while Stripe retries
		{tenant.StatusUnpaid, tenant.PlanStarter},
		{tenant.StatusCanceled, tenant.PlanStarter},
		{tenant.StatusIncomplete, tenant.PlanStarter},
		{tenant.StatusIncompleteExpired, tenant.PlanStarter},
		{tenant.StatusPaused, tenant.PlanStarter},
	} {
		t.Run(tc.status, func(t *testing.T) {
			t.Parallel()
			a, outcome, _ := Apply(linked, subEvent("evt", EventSubscriptionUpdated, at(1), "sub_1", tc.status, proItem), prices)
			if outcome != OutcomeApplied {
				t.Fatalf("outcome %s, want applied", outcome)
			}
			if a.Plan != tenant.PlanPro || a.Status != tc.status {
				t.Errorf("plan %s status %s, want pro %s", a.Plan, a.Status, tc.status)
			}
			if got := tenant.EffectivePlanName(a.Plan, a.Status); got != tc.effective {
				t.Errorf("effective plan %s, want %s", got, tc.effective)
			}
			held := tenant.HeldToStarter(tenant.Tenant{Plan: a.Plan, BillingStatus: a.Status})
			if held != (tc.effective == tenant.PlanStarter) {
				t.Errorf("HeldToStarter %t, want %t", held, tc.effective == tenant.PlanStarter)
			}
		})
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	fresh := Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive}
	pastDue := linked
	pastDue.Plan, pastDue.Status, pastDue.UpdatedAt, pastDue.PlanUpdatedAt = tenant.PlanPro, tenant.StatusPastDue, at(5), at(5)
	canceled := linked
	canceled.Plan, canceled.Status, canceled.UpdatedAt, canceled.PlanUpdatedAt = tenant.PlanPro, tenant.StatusCanceled, at(5), at(5)
	activePro := linked
	activePro.Plan, activePro.UpdatedAt, activePro.PlanUpdatedAt = tenant.PlanPro, at(5), at(5)
	for _, tc := range []struct {
		name    string
		a       Account
		ev      Event
		want    Account
		outcome Outcome
		note    string // a substring of the note
	}{
		{
			name: "checkout links customer and subscription, nothing else",
			a:    fresh,
			ev: Event{ID: "e", Type: EventCheckoutCompleted, Created: at(1), CustomerID: "cus_9",
				Checkout: &Checkout{SessionID: "cs_1", Mode: "subscription", ClientReferenceID: "t1", SubscriptionID: "sub_9"}},
			want:    Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive, CustomerID: "cus_9", SubscriptionID: "sub_9"},
			outcome: OutcomeApplied, note: "linked customer cus_9",
		},
		{
			name:    "payment-mode checkout ignored",
			a:       fresh,
			ev:      Event{ID: "e", Type: EventCheckoutCompleted, Created: at(1), CustomerID: "cus_9", Checkout: &Checkout{Mode: "payment"}},
			want:    fresh,
			outcome: OutcomeIgnored,
		},
		{
			name: "checkout older than the last change of a linked tenant is stale",
			a:    activePro,
			ev: Event{ID: "e", Type: EventCheckoutCompleted, Created: at(4), CustomerID: "cus_1",
				Checkout: &Checkout{Mode: "subscription", SubscriptionID: "sub_old"}},
			want:    activePro,
			outcome: OutcomeStale,
		},
		{
			name: "checkout of another customer keeps the tenant's, even when newer",
			a:    activePro,
			ev: Event{ID: "e", Type: EventCheckoutCompleted, Created: at(9), CustomerID: "cus_other",
				Checkout: &Checkout{Mode: "subscription", ClientReferenceID: "t1", SubscriptionID: "sub_other"}},
			want:    activePro,
			outcome: OutcomeCustomerConflict, note: "tenant has customer cus_1: kept it, and did not link customer cus_other and subscription sub_other",
		},
		{
			name:    "subscription sets plan, status, metered item, updated at",
			a:       linked,
			ev:      subEvent("e", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusTrialing, Item{ID: "si_use", PriceID: "price_use", Metered: true}, proItem),
			want:    Account{TenantID: "t1", Plan: tenant.PlanPro, Status: tenant.StatusTrialing, CustomerID: "cus_1", SubscriptionID: "sub_1", UsageItemID: "si_use", UpdatedAt: at(1), PlanUpdatedAt: at(1)},
			outcome: OutcomeApplied, note: "plan starter -> pro, status active -> trialing",
		},
		{
			name:    "subscription links the customer of an unlinked tenant",
			a:       fresh,
			ev:      subEvent("e", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem),
			want:    Account{TenantID: "t1", Plan: tenant.PlanPro, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(1), PlanUpdatedAt: at(1)},
			outcome: OutcomeApplied,
		},
		{
			name: "newer than the plan but older than the status: the plan only",
			a:    func() Account { a := linked; a.UpdatedAt, a.PlanUpdatedAt = at(5), at(1); return a }(),
			ev:   subEvent("e", EventSubscriptionUpdated, at(3), "sub_1", tenant.StatusUnpaid, proItem),
			want: func() Account {
				a := linked
				a.Plan, a.UpdatedAt, a.PlanUpdatedAt = tenant.PlanPro, at(5), at(3)
				return a
			}(),
			outcome: OutcomeApplied, note: "status left as a newer event set it",
		},
		{
			name:    "unknown price keeps the plan and says so",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionUpdated, at(6), "sub_1", tenant.StatusActive, Item{ID: "si", PriceID: "price_other"}),
			want:    func() Account { a := activePro; a.UpdatedAt, a.PlanUpdatedAt = at(6), at(6); return a }(),
			outcome: OutcomeApplied, note: "no plan has price price_other",
		},
		{
			name:    "unknown status keeps the status and says so",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionUpdated, at(6), "sub_1", "frozen", proItem),
			want:    func() Account { a := activePro; a.UpdatedAt, a.PlanUpdatedAt = at(6), at(6); return a }(),
			outcome: OutcomeApplied, note: `unknown status "frozen"`,
		},
		{
			name:    "older than the last change is stale",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionUpdated, at(4), "sub_1", tenant.StatusUnpaid, proItem),
			want:    activePro,
			outcome: OutcomeStale, note: "before the last billing change",
		},
		{
			name:    "same second as the last change is applied",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionUpdated, at(5), "sub_1", tenant.StatusPastDue, proItem),
			want:    func() Account { a := activePro; a.Status = tenant.StatusPastDue; return a }(),
			outcome: OutcomeApplied,
		},
		{
			name:    "created in the second of a later event of its subscription is stale",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionCreated, at(5), "sub_1", tenant.StatusIncomplete, proItem),
			want:    activePro,
			outcome: OutcomeStale,
		},
		{
			name:    "an ended subscription never comes back",
			a:       canceled,
			ev:      subEvent("e", EventSubscriptionUpdated, at(5), "sub_1", tenant.StatusActive, proItem),
			want:    canceled,
			outcome: OutcomeStale, note: "already ended",
		},
		{
			name: "deleted cancels and stops usage",
			a:    func() Account { a := activePro; a.UsageItemID = "si_use"; return a }(),
			ev:   subEvent("e", EventSubscriptionDeleted, at(6), "sub_1", tenant.StatusActive, proItem),
			want: func() Account {
				a := activePro
				a.Status, a.UpdatedAt, a.PlanUpdatedAt = tenant.StatusCanceled, at(6), at(6)
				return a
			}(),
			outcome: OutcomeApplied, note: "status active -> canceled",
		},
		{
			name:    "deleted of another subscription ignored",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionDeleted, at(6), "sub_old", tenant.StatusCanceled, proItem),
			want:    activePro,
			outcome: OutcomeIgnored, note: "not the tenant's",
		},
		{
			name:    "updated of another subscription ignored while the tenant's runs",
			a:       activePro,
			ev:      subEvent("e", EventSubscriptionUpdated, at(6), "sub_old", tenant.StatusUnpaid, proItem),
			want:    activePro,
			outcome: OutcomeIgnored,
		},
		{
			name: "a new subscription replaces an ended one",
			a:    canceled,
			ev:   subEvent("e", EventSubscriptionCreated, at(6), "sub_2", tenant.StatusActive, Item{ID: "si_e", PriceID: "price_ent"}),
			want: func() Account {
				a := canceled
				a.SubscriptionID, a.Plan, a.Status, a.UpdatedAt, a.PlanUpdatedAt = "sub_2", tenant.PlanEnterprise, tenant.StatusActive, at(6), at(6)
				return a
			}(),
			outcome: OutcomeApplied,
		},
		{
			name:    "invoice paid lifts past_due",
			a:       pastDue,
			ev:      invoiceEvent("e", EventInvoicePaid, at(6), "sub_1"),
			want:    func() Account { a := pastDue; a.Status, a.UpdatedAt = tenant.StatusActive, at(6); return a }(),
			outcome: OutcomeApplied, note: "status past_due -> active",
		},
		{
			name:    "invoice paid of an active tenant keeps the status and moves its clock",
			a:       activePro,
			ev:      invoiceEvent("e", EventInvoicePaid, at(6), "sub_1"),
			want:    func() Account { a := activePro; a.UpdatedAt = at(6); return a }(),
			outcome: OutcomeApplied, note: "no change",
		},
		{
			name:    "invoice names the subscription of a tenant that has none yet",
			a:       Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive, CustomerID: "cus_1"},
			ev:      invoiceEvent("e", EventInvoicePaid, at(2), "sub_1"),
			want:    Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(2)},
			outcome: OutcomeApplied,
		},
		{
			name:    "payment failed moves active to past_due",
			a:       activePro,
			ev:      invoiceEvent("e", EventInvoicePaymentFailed, at(6), "sub_1"),
			want:    func() Account { a := activePro; a.Status, a.UpdatedAt = tenant.StatusPastDue, at(6); return a }(),
			outcome: OutcomeApplied,
		},
		{
			name:    "payment failed leaves unpaid alone",
			a:       func() Account { a := activePro; a.Status = tenant.StatusUnpaid; return a }(),
			ev:      invoiceEvent("e", EventInvoicePaymentFailed, at(6), "sub_1"),
			want:    func() Account { a := activePro; a.Status, a.UpdatedAt = tenant.StatusUnpaid, at(6); return a }(),
			outcome: OutcomeApplied, note: "no change",
		},
		{
			name:    "invoice of another subscription ignored",
			a:       pastDue,
			ev:      invoiceEvent("e", EventInvoicePaid, at(6), "sub_other"),
			want:    pastDue,
			outcome: OutcomeIgnored,
		},
		{
			name:    "stale invoice",
			a:       pastDue,
			ev:      invoiceEvent("e", EventInvoicePaid, at(4), "sub_1"),
			want:    pastDue,
			outcome: OutcomeStale,
		},
		{
			name:    "other types ignored",
			a:       activePro,
			ev:      Event{ID: "e", Type: "customer.updated", Created: at(9), CustomerID: "cus_1"},
			want:    activePro,
			outcome: OutcomeIgnored, note: "not handled",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, outcome, note := Apply(tc.a, tc.ev, prices)
			if outcome != tc.outcome {
				t.Errorf("outcome %s, want %s (note %q)", outcome, tc.outcome, note)
			}
			if got != tc.want {
				t.Errorf("account\ngot  %+v\nwant %+v", got, tc.want)
			}
			if !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want it to contain %q", note, tc.note)
			}
		})
	}
}

// TestApplyAnyOrderEndsInNewestState delivers the events of a subscription's
// life in every order: the tenant always ends as the newest event left it.
func TestApplyAnyOrderEndsInNewestState(t *testing.T) {
	t.Parallel()
	start := Account{TenantID: "t1", Plan: tenant.PlanStarter, Status: tenant.StatusActive, CustomerID: "cus_1"}
	for _, tc := range []struct {
		name   string
		events []Event // in created order
		want   Account
	}{
		{
			name: "deleted delivered before updated",
			events: []Event{
				subEvent("e1", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem),
				subEvent("e2", EventSubscriptionUpdated, at(2), "sub_1", tenant.StatusPastDue, proItem),
				subEvent("e3", EventSubscriptionDeleted, at(3), "sub_1", tenant.StatusCanceled, proItem),
			},
			want: Account{TenantID: "t1", Plan: tenant.PlanPro, Status: tenant.StatusCanceled, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(3), PlanUpdatedAt: at(3)},
		},
		{
			name: "dunning and recovery",
			events: []Event{
				{ID: "e0", Type: EventCheckoutCompleted, Created: at(1), CustomerID: "cus_1", Checkout: &Checkout{Mode: "subscription", SubscriptionID: "sub_1"}},
				subEvent("e1", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem),
				invoiceEvent("e2", EventInvoicePaymentFailed, at(2), "sub_1"),
				subEvent("e3", EventSubscriptionUpdated, at(3), "sub_1", tenant.StatusUnpaid, proItem),
				invoiceEvent("e4", EventInvoicePaid, at(4), "sub_1"),
			},
			want: Account{TenantID: "t1", Plan: tenant.PlanPro, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(4), PlanUpdatedAt: at(3)},
		},
		{
			name: "plan change during dunning",
			events: []Event{
				subEvent("e1", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem),
				invoiceEvent("e2", EventInvoicePaymentFailed, at(2), "sub_1"),
				subEvent("e3", EventSubscriptionUpdated, at(3), "sub_1", tenant.StatusPastDue, Item{ID: "si_e", PriceID: "price_ent"}),
				invoiceEvent("e4", EventInvoicePaid, at(4), "sub_1"),
			},
			want: Account{TenantID: "t1", Plan: tenant.PlanEnterprise, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(4), PlanUpdatedAt: at(3)},
		},
		{
			name: "upgrade then downgrade",
			events: []Event{
				subEvent("e1", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem),
				subEvent("e2", EventSubscriptionUpdated, at(2), "sub_1", tenant.StatusActive, Item{ID: "si_e", PriceID: "price_ent"}),
				subEvent("e3", EventSubscriptionUpdated, at(3), "sub_1", tenant.StatusActive, proItem),
			},
			want: Account{TenantID: "t1", Plan: tenant.PlanPro, Status: tenant.StatusActive, CustomerID: "cus_1", SubscriptionID: "sub_1", UpdatedAt: at(3), PlanUpdatedAt: at(3)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orders := 0
			permute(tc.events, func(order []Event) {
				orders++
				a := start
				var ids []string
				for _, ev := range order {
					next, outcome, _ := Apply(a, ev, prices)
					if outcome == OutcomeApplied {
						a = next
					}
					ids = append(ids, ev.ID)
				}
				if a != tc.want {
					t.Errorf("order %v:\ngot  %+v\nwant %+v", ids, a, tc.want)
				}
			})
			if want := factorial(len(tc.events)); orders != want {
				t.Fatalf("tried %d orders, want %d", orders, want)
			}
		})
	}
}

// permute calls f with every order of evs.
func permute(evs []Event, f func([]Event)) {
	var rec func(k int)
	a := append([]Event(nil), evs...)
	rec = func(k int) {
		if k == len(a) {
			f(a)
			return
		}
		for i := k; i < len(a); i++ {
			a[k], a[i] = a[i], a[k]
			rec(k + 1)
			a[k], a[i] = a[i], a[k]
		}
	}
	rec(0)
}

func factorial(n int) int {
	if n <= 1 {
		return 1
	}
	return n * factorial(n-1)
}

func TestUsageKey(t *testing.T) {
	t.Parallel()
	got := UsageKey("7f1c", time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC))
	if want := "tollgate-usage/7f1c/2026-11/30T23Z"; got != want {
		t.Errorf("UsageKey = %q, want %q", got, want)
	}
	// An hour given in another zone is the same hour.
	loc := time.FixedZone("x", 3600)
	if got2 := UsageKey("7f1c", time.Date(2026, 12, 1, 0, 0, 0, 0, loc)); got2 != got {
		t.Errorf("UsageKey in another zone = %q, want %q", got2, got)
	}
}

// TestApplyFollowsTheBillingAnchor: the anchor follows the newest
// subscription event that states one, an event without one leaves it, and
// a deleted subscription clears it (the calendar month again).
func TestApplyFollowsTheBillingAnchor(t *testing.T) {
	t.Parallel()
	anchor := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	acct := Account{TenantID: "t", Plan: "starter", CustomerID: "cus_1"}
	created := subEvent("e1", EventSubscriptionCreated, at(1), "sub_1", tenant.StatusActive, proItem)
	created.Subscription.Anchor = anchor
	a, out, why := Apply(acct, created, prices)
	if out != OutcomeApplied || !a.Anchor.Equal(anchor) || !strings.Contains(why, "billing periods from 2026-01-31T10:00:00Z (were from the 1st") {
		t.Fatalf("created: %s, anchor %v (%s); want applied, %v", out, a.Anchor, why, anchor)
	}
	a, out, _ = Apply(a, subEvent("e2", EventSubscriptionUpdated, at(2), "sub_1", tenant.StatusActive, proItem), prices)
	if out != OutcomeApplied || !a.Anchor.Equal(anchor) {
		t.Fatalf("updated without an anchor: %s, anchor %v; want it kept", out, a.Anchor)
	}
	stale := subEvent("e0", EventSubscriptionUpdated, at(0), "sub_1", tenant.StatusActive, proItem)
	stale.Subscription.Anchor = anchor.AddDate(0, 0, 3)
	if a2, _, _ := Apply(a, stale, prices); !a2.Anchor.Equal(anchor) {
		t.Fatalf("a stale event moved the anchor to %v", a2.Anchor)
	}
	a, out, _ = Apply(a, subEvent("e3", EventSubscriptionDeleted, at(3), "sub_1", tenant.StatusCanceled, proItem), prices)
	if out != OutcomeApplied || !a.Anchor.IsZero() {
		t.Fatalf("deleted: %s, anchor %v; want none", out, a.Anchor)
	}
}
