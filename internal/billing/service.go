package billing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Store keeps the events received and applies them to tenants, each in one
// transaction. pgstore.Billing implements it. Methods are safe for
// concurrent use, from any number of instances on one database.
type Store interface {
	// ProcessEvent records the delivery of ev and, unless ev was
	// processed before, runs apply in the same transaction and records the
	// Result it returns as ev's outcome, all or nothing. An event whose
	// first processing committed is a replay: apply is not called, and the
	// Result is OutcomeReplay with the tenant and note of that first
	// processing. An event whose processing failed before (its outcome is
	// OutcomeFailed) is processed again. Two calls with one event id at
	// the same moment run apply at most once: the second waits for the
	// first and is a replay unless the first rolled back.
	ProcessEvent(ctx context.Context, ev Event, apply func(ctx context.Context, tx Tx) (Result, error)) (Result, error)
	// RecordFailure records that processing ev failed with cause, for an
	// operator, unless ev has been processed meanwhile.
	RecordFailure(ctx context.Context, ev Event, cause string) error
	// InTx runs fn in one transaction, committed when fn returns nil.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// Events lists the recorded events f selects, newest first, without
	// their payloads.
	Events(ctx context.Context, f EventFilter) ([]EventRecord, error)
	// Event returns the recorded event id with its payload; ErrNotFound
	// when there is none.
	Event(ctx context.Context, id string) (EventRecord, error)
}

// Tx is what an event's processing does inside its transaction.
type Tx interface {
	// LockCustomer holds the customer until the transaction ends, so that
	// the events of one customer are processed one at a time: an event
	// that finds no tenant for its customer cannot miss the linking
	// committed meanwhile by another.
	LockCustomer(ctx context.Context, customerID string) error
	// AccountByCustomer and Account return a tenant's billing state,
	// locked until the transaction ends; ErrNotFound when no tenant has
	// the customer, or the id.
	AccountByCustomer(ctx context.Context, customerID string) (Account, error)
	Account(ctx context.Context, tenantID string) (Account, error)
	// Prices returns every plan's Stripe price.
	Prices(ctx context.Context) (Prices, error)
	// SaveAccount stores a. When a.UsageItemID differs from the item
	// stored, usage is reported on the new item from the hour usageFrom
	// (never an hour already reported); an empty UsageItemID stops
	// reporting. A customer linked to another tenant is ErrConflict.
	SaveAccount(ctx context.Context, a Account, usageFrom time.Time) error
	// HeldEvents returns the events recorded as OutcomeUnknownCustomer for
	// customerID, oldest (by created) first.
	HeldEvents(ctx context.Context, customerID string) ([]Event, error)
	// SetOutcome records r as the outcome of the event id, another than
	// the one being processed (one held for its customer).
	SetOutcome(ctx context.Context, eventID string, r Result) error
	// Audit is the audit log, writing in the transaction.
	Audit() *audit.Log
}

// EventFilter selects recorded events.
type EventFilter struct {
	// TenantID keeps one tenant's events; empty keeps all.
	TenantID string
	// Outcome keeps the events of one stored outcome, or with
	// OutcomeReplay those delivered more than once, whatever their stored
	// outcome; empty keeps all.
	Outcome Outcome
	// Limit bounds the events returned: zero means 50, more than 500
	// means 500.
	Limit int
	// Offset skips that many events (paging by page number); Before, when
	// not zero, keeps events received before it (paging by time).
	Offset int
	Before time.Time
}

// EventRecord is a recorded event, for operators: the Stripe event log of
// the dashboard.
type EventRecord struct {
	ID       string
	Type     string
	Created  time.Time
	Livemode bool
	// CustomerID and TenantID are empty when the event named none, or
	// when no tenant was found.
	CustomerID string
	TenantID   string
	// TenantName is the tenant's name while it exists.
	TenantName string
	// Outcome is the stored outcome: what the event's first processing
	// decided, never OutcomeReplay (Deliveries says how often it came).
	Outcome Outcome
	Note    string
	// Error is why processing last failed (OutcomeFailed).
	Error string
	// Payload is the body as received, at most 64 KiB of it, Truncated
	// when it was cut to fit; only Event fills it.
	Payload   []byte
	Truncated bool
	// Deliveries counts the deliveries of the event, replays included.
	Deliveries     int
	ReceivedAt     time.Time
	LastDeliveryAt time.Time
	// ProcessedAt is when the outcome was decided; zero for a failure.
	ProcessedAt time.Time
}

// Payments makes Stripe sessions. stripeapi.Client implements it. Errors
// wrap ErrProvider.
type Payments interface {
	// CheckoutSession creates a Checkout Session in subscription mode and
	// returns its URL.
	CheckoutSession(ctx context.Context, p CheckoutParams) (string, error)
	// PortalSession creates a Customer Portal session and returns its URL.
	PortalSession(ctx context.Context, customerID, returnURL string) (string, error)
}

// CheckoutParams describes a Checkout Session.
type CheckoutParams struct {
	// TenantID is the session's client_reference_id and the
	// MetadataTenantID of the session and of the subscription it creates.
	TenantID string
	// CustomerID, when set, is the tenant's existing Stripe customer.
	CustomerID string
	// PriceID is the plan's price.
	PriceID    string
	SuccessURL string
	CancelURL  string
}

// Tenants is where the Service reads tenants and plans; tenant.Directory
// satisfies it.
type Tenants interface {
	Tenant(ctx context.Context, id string) (tenant.Tenant, error)
	Plan(ctx context.Context, name string) (tenant.Plan, error)
}

// Config configures a Service.
type Config struct {
	// Store is required.
	Store Store
	// Tenants is required for Checkout and Portal.
	Tenants Tenants
	// Payments makes Checkout and portal sessions; nil (no Stripe API key)
	// makes Checkout and Portal return ErrNotConfigured.
	Payments Payments
	// PublicURL is where Checkout and the portal send the tenant back by
	// default.
	PublicURL string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Service applies Stripe events and makes billing links. It is safe for
// concurrent use.
type Service struct {
	store     Store
	tenants   Tenants
	payments  Payments
	publicURL string
	log       *slog.Logger
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{
		store: cfg.Store, tenants: cfg.Tenants, payments: cfg.Payments,
		publicURL: strings.TrimRight(cfg.PublicURL, "/"), log: cfg.Logger,
	}
}

// HandleEvent applies a verified event once. A replay answers OutcomeReplay
// and changes nothing. An error means nothing was applied and the event is
// recorded as failed; the caller answers so that Stripe delivers it again.
func (s *Service) HandleEvent(ctx context.Context, ev Event) (Result, error) {
	if ev.ID == "" || ev.Type == "" {
		return Result{}, fmt.Errorf("stripe event without id or type: %w", ErrBadWebhook)
	}
	r, err := s.store.ProcessEvent(ctx, ev, func(ctx context.Context, tx Tx) (Result, error) {
		return s.process(ctx, tx, ev)
	})
	if err != nil {
		err = fmt.Errorf("stripe event %s (%s): %w", ev.ID, ev.Type, err)
		if ferr := s.store.RecordFailure(context.WithoutCancel(ctx), ev, err.Error()); ferr != nil {
			s.log.WarnContext(ctx, "stripe event failure not recorded", "event_id", ev.ID, "err", ferr)
		}
		return Result{Outcome: OutcomeFailed}, err
	}
	return r, nil
}

// process finds the event's tenant and applies the event to it, then any
// events held for the customer it linked.
func (s *Service) process(ctx context.Context, tx Tx, ev Event) (Result, error) {
	switch ev.Type {
	case EventCheckoutCompleted, EventSubscriptionCreated, EventSubscriptionUpdated, EventSubscriptionDeleted,
		EventInvoicePaid, EventInvoicePaymentFailed:
	default:
		return Result{Outcome: OutcomeIgnored, Note: "event type not handled"}, nil
	}
	if ev.CustomerID != "" {
		if err := tx.LockCustomer(ctx, ev.CustomerID); err != nil {
			return Result{}, err
		}
	}
	a, why, err := s.find(ctx, tx, ev)
	if errors.Is(err, ErrNotFound) {
		return Result{Outcome: OutcomeUnknownCustomer, Note: why}, nil
	}
	if err != nil {
		return Result{}, err
	}
	prices, err := tx.Prices(ctx)
	if err != nil {
		return Result{}, err
	}
	before := a
	a, outcome, why := Apply(a, ev, prices)
	r := Result{Outcome: outcome, TenantID: a.TenantID, Note: why}
	if outcome == OutcomeCustomerConflict {
		s.log.WarnContext(ctx, "stripe checkout for a tenant that has another customer: kept the tenant's",
			"event_id", ev.ID, "tenant_id", a.TenantID, "customer_id", ev.CustomerID, "tenant_customer_id", a.CustomerID)
	}
	if outcome != OutcomeApplied || a == before {
		return r, nil
	}
	if err := s.changed(ctx, tx, before, a, ev); err != nil {
		return Result{}, err
	}
	if a.CustomerID != "" && a.CustomerID != before.CustomerID {
		// Events that came before the customer was linked to the tenant
		// were held; they apply now, in the order they were created.
		if err := s.applyHeld(ctx, tx, a, ev.ID, prices); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// find returns the account ev is about: by customer, else, for a checkout,
// the tenant it was made for, and for a subscription, the tenant in its
// metadata (a subscription event may come before the checkout's). A tenant
// that already has another customer is never taken over by metadata. why
// says what was looked for when nothing was found (ErrNotFound).
func (s *Service) find(ctx context.Context, tx Tx, ev Event) (a Account, why string, err error) {
	if ev.CustomerID != "" {
		a, err = tx.AccountByCustomer(ctx, ev.CustomerID)
		if !errors.Is(err, ErrNotFound) {
			return a, "", err
		}
	}
	var tenantID, via string
	switch {
	case ev.Checkout != nil && ev.Checkout.ClientReferenceID != "":
		tenantID, via = ev.Checkout.ClientReferenceID, "client_reference_id"
	case ev.Subscription != nil && ev.Subscription.TenantID != "":
		tenantID, via = ev.Subscription.TenantID, "metadata "+MetadataTenantID
	}
	why = fmt.Sprintf("no tenant has customer %s", cmp.Or(ev.CustomerID, "(none)"))
	if tenantID == "" {
		return Account{}, why, ErrNotFound
	}
	a, err = tx.Account(ctx, tenantID)
	if errors.Is(err, ErrNotFound) {
		return Account{}, why + fmt.Sprintf(", and %s %q names no tenant", via, tenantID), ErrNotFound
	}
	if err != nil {
		return Account{}, "", err
	}
	if ev.Checkout == nil && a.CustomerID != "" && a.CustomerID != ev.CustomerID {
		return Account{}, why + fmt.Sprintf(", and tenant %s (%s) has customer %s", tenantID, via, a.CustomerID), ErrNotFound
	}
	return a, "", nil
}

// changed stores the account after ev and audits a change of plan or status.
func (s *Service) changed(ctx context.Context, tx Tx, before, after Account, ev Event) error {
	// Usage is billed from the first whole hour after the event that
	// brought the metered item.
	if err := tx.SaveAccount(ctx, after, ev.Created.UTC().Truncate(time.Hour).Add(time.Hour)); err != nil {
		return err
	}
	if before.Plan == after.Plan && before.Status == after.Status {
		return nil
	}
	side := func(a Account) map[string]any {
		return map[string]any{
			"plan": a.Plan, "billing_status": a.Status,
			"effective_plan": tenant.EffectivePlanName(a.Plan, a.Status),
		}
	}
	return tx.Audit().Record(ctx, audit.Entry{
		TenantID: after.TenantID, Actor: AuditActor, Kind: AuditKind,
		Detail: map[string]any{
			"event_id": ev.ID, "event_type": ev.Type,
			"before": side(before), "after": side(after),
		},
	})
}

// applyHeld applies the events held for a's customer, oldest first, and
// records their outcomes; a is the account once linker (the event being
// processed, or an operator) has linked the customer.
func (s *Service) applyHeld(ctx context.Context, tx Tx, a Account, linker string, prices Prices) error {
	held, err := tx.HeldEvents(ctx, a.CustomerID)
	if err != nil {
		return err
	}
	for _, ev := range held {
		if ev.ID == linker {
			continue
		}
		before := a
		var outcome Outcome
		var why string
		a, outcome, why = Apply(a, ev, prices)
		if outcome == OutcomeApplied && a != before {
			if err := s.changed(ctx, tx, before, a, ev); err != nil {
				return err
			}
		}
		why = note(why + "; held until " + linker + " linked the customer")
		if err := tx.SetOutcome(ctx, ev.ID, Result{Outcome: outcome, TenantID: a.TenantID, Note: why}); err != nil {
			return err
		}
	}
	return nil
}

// LinkCustomer is an operator (actor) resolving events recorded as
// OutcomeUnknownCustomer: it links the Stripe customer to the tenant, then
// applies the customer's held events, oldest first, as if the link had been
// there when they came; the link and each change are audited. A customer
// already linked to another tenant is ErrConflict (unlink it first); an
// unknown tenant ErrNotFound.
func (s *Service) LinkCustomer(ctx context.Context, tenantID, customerID, actor string) error {
	if customerID == "" || actor == "" {
		return &tenant.FieldError{Field: "customer_id", Reason: "a customer and an actor are required"}
	}
	err := s.store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := tx.LockCustomer(ctx, customerID); err != nil {
			return err
		}
		other, err := tx.AccountByCustomer(ctx, customerID)
		switch {
		case err == nil && other.TenantID != tenantID:
			return fmt.Errorf("customer %s is tenant %s's: %w", customerID, other.TenantID, ErrConflict)
		case err == nil:
			return nil // linked already
		case !errors.Is(err, ErrNotFound):
			return err
		}
		a, err := tx.Account(ctx, tenantID)
		if err != nil {
			return err
		}
		before := a.CustomerID
		a.CustomerID = customerID
		if err := tx.SaveAccount(ctx, a, time.Now().UTC().Truncate(time.Hour).Add(time.Hour)); err != nil {
			return err
		}
		err = tx.Audit().Record(ctx, audit.Entry{
			TenantID: tenantID, Actor: actor, Kind: AuditKindCustomerLinked,
			Detail: map[string]any{"before": map[string]any{"customer_id": before}, "after": map[string]any{"customer_id": customerID}},
		})
		if err != nil {
			return err
		}
		prices, err := tx.Prices(ctx)
		if err != nil {
			return err
		}
		return s.applyHeld(ctx, tx, a, "operator "+actor, prices)
	})
	if err != nil {
		return fmt.Errorf("link customer %s to tenant %s: %w", customerID, tenantID, err)
	}
	return nil
}

// Events lists the recorded Stripe events f selects, newest first, without
// their payloads, for operators.
func (s *Service) Events(ctx context.Context, f EventFilter) ([]EventRecord, error) {
	switch {
	case f.Limit <= 0:
		f.Limit = 50
	case f.Limit > 500:
		f.Limit = 500
	}
	f.Offset = max(f.Offset, 0)
	es, err := s.store.Events(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list stripe events: %w", err)
	}
	return es, nil
}

// Event returns the recorded Stripe event id with its payload, for
// operators; ErrNotFound when there is none.
func (s *Service) Event(ctx context.Context, id string) (EventRecord, error) {
	e, err := s.store.Event(ctx, id)
	if err != nil {
		return EventRecord{}, fmt.Errorf("stripe event %s: %w", id, err)
	}
	return e, nil
}

// CheckoutRequest is a tenant asking to buy a plan.
type CheckoutRequest struct {
	TenantID string
	Plan     string
	// SuccessURL and CancelURL are where Checkout sends the tenant back;
	// empty means the service's public URL.
	SuccessURL string
	CancelURL  string
}

// Checkout returns the URL of a new Checkout Session for r.Plan. The plan
// must be purchasable and have a Stripe price, and the tenant must not have a
// subscription that is still running (plan changes go through the portal);
// otherwise the error is a *tenant.FieldError on "plan". Without Payments it
// is ErrNotConfigured; a failing Stripe is ErrProvider.
func (s *Service) Checkout(ctx context.Context, r CheckoutRequest) (string, error) {
	if s.payments == nil {
		return "", fmt.Errorf("checkout: %w", ErrNotConfigured)
	}
	if r.Plan == "" {
		return "", &tenant.FieldError{Field: "plan", Reason: "is required"}
	}
	success, err := s.backURL("success_url", r.SuccessURL, "/?checkout=success")
	if err != nil {
		return "", err
	}
	cancel, err := s.backURL("cancel_url", r.CancelURL, "/?checkout=canceled")
	if err != nil {
		return "", err
	}
	t, err := s.tenants.Tenant(ctx, r.TenantID)
	if err != nil {
		return "", fmt.Errorf("checkout: %w", err)
	}
	p, err := s.tenants.Plan(ctx, r.Plan)
	if errors.Is(err, tenant.ErrNotFound) {
		return "", &tenant.FieldError{Field: "plan", Reason: fmt.Sprintf("no plan is named %q", r.Plan)}
	}
	if err != nil {
		return "", fmt.Errorf("checkout: %w", err)
	}
	switch {
	case !p.Purchasable:
		return "", &tenant.FieldError{Field: "plan", Reason: fmt.Sprintf("the %s plan cannot be bought; ask us", p.Name)}
	case p.StripePriceID == "":
		return "", &tenant.FieldError{Field: "plan", Reason: fmt.Sprintf("the %s plan has no price yet; an operator sets it with tollgate plans set-price", p.Name)}
	case t.StripeSubscriptionID != "" && !ended(t.BillingStatus):
		return "", &tenant.FieldError{Field: "plan", Reason: "the tenant already has a subscription; change plans in the customer portal (POST /v1/billing/portal)"}
	}
	u, err := s.payments.CheckoutSession(ctx, CheckoutParams{
		TenantID: t.ID, CustomerID: t.StripeCustomerID, PriceID: p.StripePriceID,
		SuccessURL: success, CancelURL: cancel,
	})
	if err != nil {
		return "", fmt.Errorf("checkout for plan %s: %w", p.Name, err)
	}
	return u, nil
}

// Portal returns the URL of a new Customer Portal session for the tenant,
// which comes back to returnURL (empty: the service's public URL). A tenant
// without a Stripe customer is ErrNoCustomer; without Payments it is
// ErrNotConfigured.
func (s *Service) Portal(ctx context.Context, tenantID, returnURL string) (string, error) {
	if s.payments == nil {
		return "", fmt.Errorf("portal: %w", ErrNotConfigured)
	}
	back, err := s.backURL("return_url", returnURL, "/")
	if err != nil {
		return "", err
	}
	t, err := s.tenants.Tenant(ctx, tenantID)
	if err != nil {
		return "", fmt.Errorf("portal: %w", err)
	}
	if t.StripeCustomerID == "" {
		return "", fmt.Errorf("portal: tenant %s: %w", tenantID, ErrNoCustomer)
	}
	u, err := s.payments.PortalSession(ctx, t.StripeCustomerID, back)
	if err != nil {
		return "", fmt.Errorf("portal: %w", err)
	}
	return u, nil
}

// backURL checks a URL a tenant gave to be sent back to, or makes the
// default from the public URL and path.
func (s *Service) backURL(field, v, path string) (string, error) {
	if v == "" {
		return s.publicURL + path, nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(v) > 2048 {
		return "", &tenant.FieldError{Field: field, Reason: "must be an absolute http(s) URL of at most 2048 characters"}
	}
	return v, nil
}
