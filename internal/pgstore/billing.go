package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// Billing keeps the Stripe events received (stripe_events), applies them to
// tenants (and billing_accounts), and hands out the hours of metered usage to
// report (billing_usage_reports): the billing.Store, billing.UsageCursors
// and billing.EventPruner. It is safe for concurrent use, and any number of
// instances may share its database.
type Billing struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var (
	_ billing.Store        = (*Billing)(nil)
	_ billing.UsageCursors = (*Billing)(nil)
	_ billing.EventPruner  = (*Billing)(nil)
)

// NewBilling returns the billing store on pool, a database migrated to at
// least 000007.
func NewBilling(pool *pgxpool.Pool) *Billing {
	return &Billing{pool: pool, q: sqlcgen.New(pool)}
}

// MaxStoredPayload bounds the part of a webhook body kept for operators.
const MaxStoredPayload = 64 << 10

// ProcessEvent implements billing.Store. The event's row is inserted (or,
// for a delivery seen before, locked) by the transaction's first statement,
// so concurrent deliveries of one event queue on that row; the effect and
// the outcome commit together.
func (s *Billing) ProcessEvent(ctx context.Context, ev billing.Event, apply func(ctx context.Context, tx billing.Tx) (billing.Result, error)) (billing.Result, error) {
	rec, err := eventRecord(ev)
	if err != nil {
		return billing.Result{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return billing.Result{}, dbErr(err, billingErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	claim, err := q.ClaimStripeEvent(ctx, sqlcgen.ClaimStripeEventParams{
		ID: ev.ID, Type: ev.Type, Created: ts(ev.Created), Livemode: ev.Livemode, CustomerID: rec.customer,
		Event: rec.event, Payload: rec.payload, PayloadTruncated: rec.truncated,
	})
	if err != nil {
		return billing.Result{}, fmt.Errorf("record event: %w", dbErr(err, billingErrors))
	}
	if claim.Outcome != "processing" && claim.Outcome != string(billing.OutcomeFailed) {
		// Processed before: only the delivery is recorded.
		if err := tx.Commit(ctx); err != nil {
			return billing.Result{}, dbErr(err, billingErrors)
		}
		r := billing.Result{Outcome: billing.OutcomeReplay, Note: "first processed: " + claim.Outcome}
		if claim.Note != "" {
			r.Note += ": " + claim.Note
		}
		if claim.TenantID.Valid {
			r.TenantID = claim.TenantID.String()
		}
		return r, nil
	}
	r, err := apply(ctx, &billingTx{q: q})
	if err != nil {
		return billing.Result{}, err
	}
	if err := finish(ctx, q, ev.ID, r); err != nil {
		return billing.Result{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return billing.Result{}, dbErr(err, billingErrors)
	}
	return r, nil
}

// InTx implements billing.Store.
func (s *Billing) InTx(ctx context.Context, fn func(ctx context.Context, tx billing.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbErr(err, billingErrors)
	}
	defer tx.Rollback(ctx)
	if err := fn(ctx, &billingTx{q: s.q.WithTx(tx)}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr(err, billingErrors)
	}
	return nil
}

// RecordFailure implements billing.Store.
func (s *Billing) RecordFailure(ctx context.Context, ev billing.Event, cause string) error {
	rec, err := eventRecord(ev)
	if err != nil {
		return err
	}
	cause = truncateUTF8(cause, 2000)
	err = s.q.FailStripeEvent(ctx, sqlcgen.FailStripeEventParams{
		ID: ev.ID, Type: ev.Type, Created: ts(ev.Created), Livemode: ev.Livemode, CustomerID: rec.customer,
		Error: &cause, Event: rec.event, Payload: rec.payload, PayloadTruncated: rec.truncated,
	})
	if err != nil {
		return fmt.Errorf("record failure of event %s: %w", ev.ID, dbErr(err, billingErrors))
	}
	return nil
}

// Events implements billing.Store. A tenant id that is not a UUID has no
// events.
func (s *Billing) Events(ctx context.Context, f billing.EventFilter) ([]billing.EventRecord, error) {
	p := sqlcgen.ListStripeEventsParams{Outcome: string(f.Outcome), SkipRows: int32(max(f.Offset, 0)), MaxRows: int32(max(f.Limit, 0))}
	if f.TenantID != "" {
		id, ok := uuidOf(f.TenantID)
		if !ok {
			return nil, nil
		}
		p.TenantID = id
	}
	if !f.Before.IsZero() {
		p.Before = ts(f.Before)
	}
	rows, err := s.q.ListStripeEvents(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("stripe events: %w", dbErr(err, billingErrors))
	}
	out := make([]billing.EventRecord, len(rows))
	for i, r := range rows {
		out[i] = eventRecordOf(sqlcgen.GetStripeEventRow{
			ID: r.ID, Type: r.Type, Created: r.Created, Livemode: r.Livemode, CustomerID: r.CustomerID,
			TenantID: r.TenantID, TenantName: r.TenantName, Outcome: r.Outcome, Note: r.Note, Error: r.Error,
			PayloadTruncated: r.PayloadTruncated, Deliveries: r.Deliveries, ReceivedAt: r.ReceivedAt,
			LastDeliveryAt: r.LastDeliveryAt, ProcessedAt: r.ProcessedAt,
		})
	}
	return out, nil
}

// Event implements billing.Store.
func (s *Billing) Event(ctx context.Context, id string) (billing.EventRecord, error) {
	r, err := s.q.GetStripeEvent(ctx, id)
	if err != nil {
		return billing.EventRecord{}, fmt.Errorf("stripe event %s: %w", id, dbErr(err, billingErrors))
	}
	return eventRecordOf(r), nil
}

// eventRecordOf turns a stripe_events row into a billing.EventRecord.
func eventRecordOf(r sqlcgen.GetStripeEventRow) billing.EventRecord {
	e := billing.EventRecord{
		ID: r.ID, Type: r.Type, Created: timeOf(r.Created), Livemode: r.Livemode,
		CustomerID: deref(r.CustomerID), TenantName: deref(r.TenantName), Outcome: billing.Outcome(r.Outcome), Note: r.Note,
		Error: deref(r.Error), Truncated: r.PayloadTruncated, Deliveries: int(r.Deliveries),
		ReceivedAt: timeOf(r.ReceivedAt), LastDeliveryAt: timeOf(r.LastDeliveryAt),
	}
	if r.Payload != "" {
		e.Payload = []byte(r.Payload)
	}
	if r.TenantID.Valid {
		e.TenantID = r.TenantID.String()
	}
	if r.ProcessedAt.Valid {
		e.ProcessedAt = timeOf(r.ProcessedAt)
	}
	return e
}

// PruneEvents implements billing.EventPruner, at most pruneRows rows a
// statement so that no statement holds many locks. Events held for their
// customer (unknown_customer) are kept, however old.
func (s *Billing) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.q.PruneStripeEvents(ctx, sqlcgen.PruneStripeEventsParams{Before: ts(before), MaxRows: pruneRows})
		total += n
		if err != nil {
			return total, fmt.Errorf("prune events: %w", dbErr(err, billingErrors))
		}
		if n < pruneRows {
			return total, nil
		}
	}
}

// ReportNextHour implements billing.UsageCursors: the claim is a lock on the
// tenant's billing_accounts row taken with SKIP LOCKED, held while report
// runs (it calls Stripe), and the report row and the move to the next hour
// commit together. The lock is not on the tenants row, so webhooks for the
// tenant wait for Stripe only if they change its billing_accounts row.
func (s *Billing) ReportNextHour(ctx context.Context, due time.Time, skip []string, report func(ctx context.Context, h billing.UsageHour) (billing.UsageResult, error)) (bool, error) {
	skipIDs := make([]pgtype.UUID, 0, len(skip))
	for _, id := range skip {
		if u, ok := uuidOf(id); ok {
			skipIDs = append(skipIDs, u)
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, dbErr(err, billingErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	row, err := q.ClaimUsageHour(ctx, sqlcgen.ClaimUsageHourParams{Due: ts(due), Skip: skipIDs})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim usage hour: %w", dbErr(err, billingErrors))
	}
	h := billing.UsageHour{
		TenantID: row.TenantID.String(), ItemID: row.UsageItemID, Plan: row.Plan, Status: row.BillingStatus,
		Hour: timeOf(row.UsageNextHour),
	}
	res, err := report(ctx, h)
	if err != nil {
		return true, err
	}
	err = q.InsertUsageReport(ctx, sqlcgen.InsertUsageReportParams{
		TenantID: row.TenantID, Hour: row.UsageNextHour, ItemID: row.UsageItemID, Quantity: res.Quantity,
		Outcome: res.Outcome, IdempotencyKey: res.IdempotencyKey, Note: truncateUTF8(res.Note, 2000),
	})
	if err != nil {
		return true, fmt.Errorf("record usage report: %w", dbErr(err, billingErrors))
	}
	if err := q.AdvanceUsageHour(ctx, row.TenantID); err != nil {
		return true, fmt.Errorf("advance usage hour: %w", dbErr(err, billingErrors))
	}
	if err := tx.Commit(ctx); err != nil {
		return true, dbErr(err, billingErrors)
	}
	return true, nil
}

// UsageReport is one hour's usage report, as recorded.
type UsageReport struct {
	TenantID       string
	Hour           time.Time
	ItemID         string
	Quantity       int64
	Outcome        string
	IdempotencyKey string
	Note           string
	ReportedAt     time.Time
}

// UsageReports returns the tenant's usage reports, latest hour first, at
// most limit of them.
func (s *Billing) UsageReports(ctx context.Context, tenantID string, limit int) ([]UsageReport, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListUsageReports(ctx, sqlcgen.ListUsageReportsParams{TenantID: id, MaxRows: int32(limit)})
	if err != nil {
		return nil, dbErr(err, billingErrors)
	}
	out := make([]UsageReport, len(rows))
	for i, r := range rows {
		out[i] = UsageReport{
			TenantID: r.TenantID.String(), Hour: timeOf(r.Hour), ItemID: r.ItemID, Quantity: r.Quantity,
			Outcome: r.Outcome, IdempotencyKey: r.IdempotencyKey, Note: r.Note, ReportedAt: timeOf(r.ReportedAt),
		}
	}
	return out, nil
}

// billingTx is billing.Tx on one transaction.
type billingTx struct {
	q *sqlcgen.Queries
}

var _ billing.Tx = (*billingTx)(nil)

func (t *billingTx) LockCustomer(ctx context.Context, customerID string) error {
	if err := t.q.LockStripeCustomer(ctx, customerID); err != nil {
		return fmt.Errorf("lock customer %s: %w", customerID, dbErr(err, billingErrors))
	}
	return nil
}

func (t *billingTx) AccountByCustomer(ctx context.Context, customerID string) (billing.Account, error) {
	r, err := t.q.BillingAccountByCustomer(ctx, &customerID)
	if err != nil {
		return billing.Account{}, fmt.Errorf("tenant of customer %s: %w", customerID, dbErr(err, billingErrors))
	}
	return accountOf(sqlcgen.BillingAccountRow(r)), nil
}

func (t *billingTx) Account(ctx context.Context, tenantID string) (billing.Account, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return billing.Account{}, fmt.Errorf("tenant %q: %w", tenantID, billing.ErrNotFound)
	}
	r, err := t.q.BillingAccount(ctx, id)
	if err != nil {
		return billing.Account{}, fmt.Errorf("tenant %s: %w", tenantID, dbErr(err, billingErrors))
	}
	return accountOf(r), nil
}

func (t *billingTx) Prices(ctx context.Context) (billing.Prices, error) {
	rows, err := t.q.PlanPrices(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan prices: %w", dbErr(err, billingErrors))
	}
	p := make(billing.Prices, len(rows))
	for _, r := range rows {
		p[r.StripePriceID] = r.Name
	}
	return p, nil
}

func (t *billingTx) SaveAccount(ctx context.Context, a billing.Account, usageFrom time.Time) error {
	id, ok := uuidOf(a.TenantID)
	if !ok {
		return fmt.Errorf("save billing of tenant %q: %w", a.TenantID, billing.ErrNotFound)
	}
	p := sqlcgen.SaveBillingAccountParams{
		ID: id, Plan: a.Plan, BillingStatus: a.Status,
		StripeCustomerID: nonEmpty(a.CustomerID), StripeSubscriptionID: nonEmpty(a.SubscriptionID),
	}
	if !a.UpdatedAt.IsZero() {
		p.BillingUpdatedAt = ts(a.UpdatedAt)
	}
	if !a.Anchor.IsZero() {
		p.BillingAnchor = ts(a.Anchor)
	}
	// The state before, locked, for the plan.changed event written in
	// this transaction when the effective plan moves.
	before, err := t.q.BillingAccount(ctx, id)
	if err != nil {
		return fmt.Errorf("save billing of tenant %s: %w", a.TenantID, dbErr(err, billingErrors))
	}
	n, err := t.q.SaveBillingAccount(ctx, p)
	if err != nil {
		return fmt.Errorf("save billing of tenant %s: %w", a.TenantID, dbErr(err, billingErrors))
	}
	if n == 0 {
		return fmt.Errorf("save billing of tenant %s: %w", a.TenantID, billing.ErrNotFound)
	}
	if err := emitPlanChanged(ctx, t.q, id, planState{before.Plan, before.BillingStatus}, planState{a.Plan, a.Status}); err != nil {
		return fmt.Errorf("save billing of tenant %s: %w", a.TenantID, dbErr(err, billingErrors))
	}
	x := sqlcgen.SaveBillingExtrasParams{
		TenantID: id, UsageItemID: a.UsageItemID, UsageFrom: ts(usageFrom.UTC().Truncate(time.Hour)),
	}
	if !a.PlanUpdatedAt.IsZero() {
		x.PlanUpdatedAt = ts(a.PlanUpdatedAt)
	}
	if err := t.q.SaveBillingExtras(ctx, x); err != nil {
		return fmt.Errorf("save billing of tenant %s: %w", a.TenantID, dbErr(err, billingErrors))
	}
	return nil
}

func (t *billingTx) HeldEvents(ctx context.Context, customerID string) ([]billing.Event, error) {
	rows, err := t.q.HeldStripeEvents(ctx, &customerID)
	if err != nil {
		return nil, fmt.Errorf("events held for customer %s: %w", customerID, dbErr(err, billingErrors))
	}
	out := make([]billing.Event, 0, len(rows))
	for _, r := range rows {
		var ev billing.Event
		if err := json.Unmarshal(r, &ev); err != nil {
			return nil, fmt.Errorf("event held for customer %s: %v", customerID, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

func (t *billingTx) SetOutcome(ctx context.Context, eventID string, r billing.Result) error {
	return finish(ctx, t.q, eventID, r)
}

func (t *billingTx) Audit() *audit.Log {
	return audit.NewLog(&Audit{q: t.q})
}

// finish records r as the outcome of the event id.
func finish(ctx context.Context, q *sqlcgen.Queries, id string, r billing.Result) error {
	p := sqlcgen.FinishStripeEventParams{ID: id, Outcome: string(r.Outcome), Note: truncateUTF8(r.Note, 2000)}
	if r.TenantID != "" {
		u, ok := uuidOf(r.TenantID)
		if !ok {
			return fmt.Errorf("outcome of event %s: tenant %q: %w", id, r.TenantID, billing.ErrNotFound)
		}
		p.TenantID = u
	}
	if err := q.FinishStripeEvent(ctx, p); err != nil {
		return fmt.Errorf("outcome of event %s: %w", id, dbErr(err, billingErrors))
	}
	return nil
}

// accountOf turns a row into a billing.Account.
func accountOf(r sqlcgen.BillingAccountRow) billing.Account {
	a := billing.Account{
		TenantID: r.ID.String(), Plan: r.Plan, Status: r.BillingStatus,
		CustomerID: deref(r.StripeCustomerID), SubscriptionID: deref(r.StripeSubscriptionID),
		UsageItemID: r.UsageItemID,
	}
	if r.BillingUpdatedAt.Valid {
		a.UpdatedAt = timeOf(r.BillingUpdatedAt)
	}
	if r.PlanUpdatedAt.Valid {
		a.PlanUpdatedAt = timeOf(r.PlanUpdatedAt)
	}
	if r.BillingAnchor.Valid {
		a.Anchor = timeOf(r.BillingAnchor)
	}
	return a
}

// storedEvent is an event as its row holds it.
type storedEvent struct {
	customer  *string
	event     []byte
	payload   string
	truncated bool
}

// eventRecord encodes ev for its row, the payload cut to MaxStoredPayload
// (on a character boundary, as text must be valid UTF-8).
func eventRecord(ev billing.Event) (storedEvent, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return storedEvent{}, fmt.Errorf("encode event %s: %v", ev.ID, err)
	}
	payload := strings.ToValidUTF8(string(ev.Payload), "\uFFFD")
	payload = strings.ReplaceAll(payload, "\x00", "")
	cut := truncateUTF8(payload, MaxStoredPayload)
	return storedEvent{customer: nonEmpty(ev.CustomerID), event: b, payload: cut, truncated: len(cut) < len(payload)}, nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
