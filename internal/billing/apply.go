package billing

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// Apply returns the account after ev, the outcome and a note for operators.
// It is the whole of what an event does, a pure function of the account as
// stored, the event, and the plans' prices; the caller stores the account
// when the outcome is OutcomeApplied.
//
// Order. Stripe delivers events in any order, so each part of the state
// follows the newest event that speaks of it, by the event's "created":
//
//   - the billing status follows the newest subscription or invoice event
//     (a.UpdatedAt, stored as tenants.billing_updated_at);
//   - the plan, subscription and metered item follow the newest
//     subscription event (a.PlanUpdatedAt): only those carry a price.
//
// An event older than both is stale and changes nothing; one older than
// only the status's changes the plan alone. So any delivery order ends in
// the state of the newest events, and an invoice event never makes the
// price of an older subscription event stale. Two clocks are needed because
// invoice events carry a status but no price.
//
// Stripe's "created" has a resolution of one second, and the events of one
// change often share it: within one second, a subscription's first event
// (created) never overrides a later one of the same subscription; and a
// subscription that has ended (canceled, incomplete_expired) never comes
// back, as Stripe never revives one.
//
// What each type does:
//
//   - checkout.session.completed (subscription mode) links the tenant to
//     its customer and subscription, and says nothing of status or plan. A
//     tenant that has another customer keeps it (OutcomeCustomerConflict):
//     a second session made for the tenant, or one that names it falsely,
//     never takes its billing over;
//   - customer.subscription.created, .updated and .deleted carry the whole
//     subscription: status (deleted: canceled), plan (the first item whose
//     price a plan has; an unknown price leaves the plan and says so),
//     metered item, and billing cycle anchor (deleted: none, so the
//     calendar month again; an event without one leaves it). A late event of a subscription the tenant has left is
//     ignored, but a new subscription replaces an ended one;
//   - invoice.paid says money came in: past_due, unpaid and incomplete
//     become active; invoice.payment_failed says it did not: active and
//     trialing become past_due. Either moves the status clock, since it
//     states the status at that time. Stripe sends the matching
//     subscription event too; the invoice makes the change take effect
//     without waiting for it.
func Apply(a Account, ev Event, prices Prices) (Account, Outcome, string) {
	switch ev.Type {
	case EventCheckoutCompleted:
		return applyCheckout(a, ev)
	case EventSubscriptionCreated, EventSubscriptionUpdated, EventSubscriptionDeleted:
		return applySubscription(a, ev, prices)
	case EventInvoicePaid, EventInvoicePaymentFailed:
		return applyInvoice(a, ev)
	}
	return a, OutcomeIgnored, "event type not handled"
}

// applyCheckout is Apply for checkout.session.completed: it links the
// tenant to its customer and subscription, unless the tenant has another
// customer.
func applyCheckout(a Account, ev Event) (Account, Outcome, string) {
	c := ev.Checkout
	if c == nil || c.Mode != checkoutModeSubscription {
		return a, OutcomeIgnored, "not a subscription checkout"
	}
	if a.CustomerID != "" && ev.CustomerID != "" && ev.CustomerID != a.CustomerID {
		return a, OutcomeCustomerConflict, note(fmt.Sprintf("tenant has customer %s: kept it, and did not link customer %s and subscription %s",
			a.CustomerID, ev.CustomerID, cmp.Or(c.SubscriptionID, "-")))
	}
	if a.CustomerID != "" && ev.Created.Before(later(a.UpdatedAt, a.PlanUpdatedAt)) {
		return a, OutcomeStale, staleNote(ev, later(a.UpdatedAt, a.PlanUpdatedAt))
	}
	next := a
	if ev.CustomerID != "" {
		next.CustomerID = ev.CustomerID
	}
	if c.SubscriptionID != "" {
		next.SubscriptionID = c.SubscriptionID
	}
	return next, OutcomeApplied, fmt.Sprintf("linked customer %s and subscription %s", cmp.Or(next.CustomerID, "-"), cmp.Or(next.SubscriptionID, "-"))
}

// applySubscription is Apply for customer.subscription.created, .updated
// and .deleted: the status follows the event unless a newer one set it, and
// so do the plan and the metered item.
func applySubscription(a Account, ev Event, prices Prices) (Account, Outcome, string) {
	s := ev.Subscription
	if s == nil || s.ID == "" {
		return a, OutcomeIgnored, "no subscription in the event"
	}
	same := a.SubscriptionID == s.ID
	// A subscription's first event loses a tie with a later one.
	first := same && ev.Type == EventSubscriptionCreated
	planStale := older(ev.Created, a.PlanUpdatedAt, first)
	statusStale := older(ev.Created, a.UpdatedAt, first)
	if planStale && statusStale {
		return a, OutcomeStale, staleNote(ev, later(a.UpdatedAt, a.PlanUpdatedAt))
	}
	if same && ended(a.Status) {
		return a, OutcomeStale, fmt.Sprintf("subscription %s has already ended (%s)", s.ID, a.Status)
	}
	if a.SubscriptionID != "" && !same {
		// A late event of a subscription the tenant left must not
		// undo the one it has; a new subscription replaces it.
		switch {
		case ev.Type == EventSubscriptionDeleted:
			return a, OutcomeIgnored, fmt.Sprintf("subscription %s is not the tenant's (%s)", s.ID, a.SubscriptionID)
		case ev.Type == EventSubscriptionUpdated && !ended(a.Status):
			return a, OutcomeIgnored, fmt.Sprintf("subscription %s is not the tenant's (%s, %s)", s.ID, a.SubscriptionID, a.Status)
		}
	}
	next := a
	if next.CustomerID == "" {
		next.CustomerID = ev.CustomerID
	}
	var notes []string
	if !statusStale {
		status := s.Status
		if ev.Type == EventSubscriptionDeleted {
			status = tenant.StatusCanceled
		}
		if knownStatus(status) {
			next.Status = status
		} else {
			notes = append(notes, fmt.Sprintf("unknown status %q left %s", status, a.Status))
		}
		next.UpdatedAt = ev.Created
	} else {
		notes = append(notes, "status left as a newer event set it")
	}
	if !planStale {
		next.SubscriptionID = s.ID
		plan, price := planOf(s.Items, prices)
		switch {
		case plan != "":
			next.Plan = plan
		case price != "":
			notes = append(notes, fmt.Sprintf("no plan has price %s (tollgate plans set-price); plan left %s", price, a.Plan))
		default:
			notes = append(notes, "no priced item; plan left "+a.Plan)
		}
		switch {
		case ev.Type == EventSubscriptionDeleted:
			next.Anchor = time.Time{}
		case !s.Anchor.IsZero():
			next.Anchor = s.Anchor
		}
		next.UsageItemID = ""
		if ev.Type != EventSubscriptionDeleted {
			for _, it := range s.Items {
				if it.Metered {
					next.UsageItemID = it.ID
					break
				}
			}
		}
		next.PlanUpdatedAt = ev.Created
	} else {
		notes = append(notes, "plan left as a newer event set it")
	}
	return next, OutcomeApplied, changeNote(a, next, notes)
}

// applyInvoice is Apply for invoice.paid and invoice.payment_failed: the
// status moves between active and past_due.
func applyInvoice(a Account, ev Event) (Account, Outcome, string) {
	inv := ev.Invoice
	if inv == nil {
		return a, OutcomeIgnored, "no invoice in the event"
	}
	if inv.SubscriptionID == "" || (a.SubscriptionID != "" && inv.SubscriptionID != a.SubscriptionID) {
		return a, OutcomeIgnored, fmt.Sprintf("invoice %s is not for the tenant's subscription (%s)", inv.ID, cmp.Or(a.SubscriptionID, "none"))
	}
	if older(ev.Created, a.UpdatedAt, false) {
		return a, OutcomeStale, staleNote(ev, a.UpdatedAt)
	}
	next := a
	// The customer's invoice names its subscription, which the
	// tenant may not know yet (the checkout's event still to come).
	next.SubscriptionID = inv.SubscriptionID
	switch {
	case ev.Type == EventInvoicePaid && (a.Status == tenant.StatusPastDue || a.Status == tenant.StatusUnpaid || a.Status == tenant.StatusIncomplete):
		next.Status = tenant.StatusActive
	case ev.Type == EventInvoicePaymentFailed && (a.Status == tenant.StatusActive || a.Status == tenant.StatusTrialing):
		next.Status = tenant.StatusPastDue
	}
	next.UpdatedAt = ev.Created
	return next, OutcomeApplied, changeNote(a, next, nil)
}

// staleNote says why ev changes nothing: it is older than the change at
// since.
func staleNote(ev Event, since time.Time) string {
	return fmt.Sprintf("created %s, before the last billing change (%s)", stamp(ev.Created), stamp(since))
}

// older reports whether an event created at t is older than the change at
// since (never, when nothing has changed); tie says that the same second
// counts as older.
func older(t, since time.Time, tie bool) bool {
	if since.IsZero() {
		return false
	}
	return t.Before(since) || (tie && t.Equal(since))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// planOf returns the plan of the first item whose price a plan has, or, when
// none has, the first price seen (for the note).
func planOf(items []Item, prices Prices) (plan, price string) {
	for _, it := range items {
		if p, ok := prices[it.PriceID]; ok && it.PriceID != "" {
			return p, it.PriceID
		}
		if price == "" {
			price = it.PriceID
		}
	}
	return "", price
}

// changeNote describes what changed from a to b, followed by notes.
func changeNote(a, b Account, notes []string) string {
	s := "no change"
	switch {
	case a.Plan != b.Plan && a.Status != b.Status:
		s = fmt.Sprintf("plan %s -> %s, status %s -> %s", a.Plan, b.Plan, a.Status, b.Status)
	case a.Plan != b.Plan:
		s = fmt.Sprintf("plan %s -> %s", a.Plan, b.Plan)
	case a.Status != b.Status:
		s = fmt.Sprintf("status %s -> %s", a.Status, b.Status)
	}
	if !a.Anchor.Equal(b.Anchor) {
		notes = append(notes, "billing periods from "+anchorNote(b.Anchor)+" (were from "+anchorNote(a.Anchor)+")")
	}
	for _, n := range notes {
		s += "; " + n
	}
	return note(s)
}

// anchorNote says where a billing anchor starts each period.
func anchorNote(t time.Time) string {
	if t.IsZero() {
		return "the 1st (calendar months)"
	}
	return stamp(t)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
