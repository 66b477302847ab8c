package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// Webhooks keeps tenants' webhook endpoints, the outbox of events and
// their deliveries (migration 000022) for package webhooks. The events of
// revoked keys and raised alerts are written by triggers in the
// transactions that make them; plan changes by Billing. Safe for
// concurrent use.
type Webhooks struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var _ webhooks.Store = (*Webhooks)(nil)

// NewWebhooks returns the webhooks store on pool.
func NewWebhooks(pool *pgxpool.Pool) *Webhooks {
	return &Webhooks{pool: pool, q: sqlcgen.New(pool)}
}

// ids parses a tenant's and an object's ids; either not a UUID is an
// object the tenant does not have.
func ids(tenantID, id string) (pgtype.UUID, pgtype.UUID, error) {
	t, ok1 := uuidOf(tenantID)
	o, ok2 := uuidOf(id)
	if !ok1 || !ok2 {
		return t, o, webhooks.ErrNotFound
	}
	return t, o, nil
}

// CreateEndpoint implements webhooks.Store: the tenant's row is locked
// while its endpoints are counted, so that concurrent creations cannot
// pass max together.
func (s *Webhooks) CreateEndpoint(ctx context.Context, tenantID, url string, events []string, secret webhooks.Sealed, max int) (webhooks.Endpoint, error) {
	tid, ok := uuidOf(tenantID)
	if !ok {
		return webhooks.Endpoint{}, webhooks.ErrNotFound
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return webhooks.Endpoint{}, dbErr(err, webhookErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if _, err := q.LockTenantWebhooks(ctx, tid); err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("create webhook endpoint: %w", dbErr(err, webhookErrors))
	}
	n, err := q.CountWebhookEndpoints(ctx, tid)
	if err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("create webhook endpoint: %w", dbErr(err, webhookErrors))
	}
	if int(n) >= max {
		return webhooks.Endpoint{}, fmt.Errorf("create webhook endpoint: %w", webhooks.ErrTooMany)
	}
	row, err := q.CreateWebhookEndpoint(ctx, sqlcgen.CreateWebhookEndpointParams{
		TenantID: tid, Url: url, Events: events, Secret: secret.Box, SecretKeyID: secret.KeyID,
	})
	if err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("create webhook endpoint: %w", dbErr(err, webhookErrors))
	}
	if err := tx.Commit(ctx); err != nil {
		return webhooks.Endpoint{}, dbErr(err, webhookErrors)
	}
	return endpointOf(row), nil
}

// Endpoints implements webhooks.Store.
func (s *Webhooks) Endpoints(ctx context.Context, tenantID string) ([]webhooks.Endpoint, error) {
	tid, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListWebhookEndpoints(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("webhook endpoints of tenant %s: %w", tenantID, dbErr(err, webhookErrors))
	}
	out := make([]webhooks.Endpoint, len(rows))
	for i, r := range rows {
		out[i] = endpointOf(r)
	}
	return out, nil
}

// Endpoint implements webhooks.Store.
func (s *Webhooks) Endpoint(ctx context.Context, tenantID, id string) (webhooks.Endpoint, error) {
	tid, eid, err := ids(tenantID, id)
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	row, err := s.q.GetWebhookEndpoint(ctx, sqlcgen.GetWebhookEndpointParams{TenantID: tid, ID: eid})
	if err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("webhook endpoint %s: %w", id, dbErr(err, webhookErrors))
	}
	return endpointOf(row), nil
}

// DeleteEndpoint implements webhooks.Store; its deliveries go with it.
func (s *Webhooks) DeleteEndpoint(ctx context.Context, tenantID, id string) error {
	tid, eid, err := ids(tenantID, id)
	if err != nil {
		return err
	}
	n, err := s.q.DeleteWebhookEndpoint(ctx, sqlcgen.DeleteWebhookEndpointParams{TenantID: tid, ID: eid})
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %s: %w", id, dbErr(err, webhookErrors))
	}
	if n == 0 {
		return webhooks.ErrNotFound
	}
	return nil
}

// RotateSecret implements webhooks.Store.
func (s *Webhooks) RotateSecret(ctx context.Context, tenantID, id string, secret webhooks.Sealed, previousUntil time.Time) (webhooks.Endpoint, error) {
	tid, eid, err := ids(tenantID, id)
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	row, err := s.q.RotateWebhookSecret(ctx, sqlcgen.RotateWebhookSecretParams{
		TenantID: tid, ID: eid, Secret: secret.Box, SecretKeyID: secret.KeyID, PreviousExpiresAt: ts(previousUntil),
	})
	if err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("rotate webhook secret %s: %w", id, dbErr(err, webhookErrors))
	}
	return endpointOf(row), nil
}

// SetEnabled implements webhooks.Store.
func (s *Webhooks) SetEnabled(ctx context.Context, tenantID, id string, enabled bool, reason string) (webhooks.Endpoint, error) {
	tid, eid, err := ids(tenantID, id)
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	row, err := s.q.SetWebhookEndpointEnabled(ctx, sqlcgen.SetWebhookEndpointEnabledParams{
		TenantID: tid, ID: eid, Enabled: enabled, Reason: truncateUTF8(reason, 500),
	})
	if err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("enable webhook endpoint %s: %w", id, dbErr(err, webhookErrors))
	}
	return endpointOf(row), nil
}

// Ping implements webhooks.Store: a test.ping event and its one delivery,
// in one transaction.
func (s *Webhooks) Ping(ctx context.Context, tenantID, endpointID string) (webhooks.Delivery, error) {
	tid, eid, err := ids(tenantID, endpointID)
	if err != nil {
		return webhooks.Delivery{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return webhooks.Delivery{}, dbErr(err, webhookErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if _, err := q.GetWebhookEndpoint(ctx, sqlcgen.GetWebhookEndpointParams{TenantID: tid, ID: eid}); err != nil {
		return webhooks.Delivery{}, fmt.Errorf("ping webhook endpoint %s: %w", endpointID, dbErr(err, webhookErrors))
	}
	ev, err := q.InsertWebhookEvent(ctx, sqlcgen.InsertWebhookEventParams{
		TenantID: tid, Type: webhooks.EventTestPing,
		Data:           fmt.Appendf(nil, `{"endpoint_id":%q}`, endpointID),
		IdempotencyKey: "test.ping:" + uuid.NewString(),
	})
	if err != nil {
		return webhooks.Delivery{}, fmt.Errorf("ping webhook endpoint %s: %w", endpointID, dbErr(err, webhookErrors))
	}
	d, err := q.InsertWebhookDelivery(ctx, sqlcgen.InsertWebhookDeliveryParams{EventID: ev.ID, EndpointID: eid, TenantID: tid})
	if err != nil {
		return webhooks.Delivery{}, fmt.Errorf("ping webhook endpoint %s: %w", endpointID, dbErr(err, webhookErrors))
	}
	if d.Status == "dropped" {
		// Refused, not kept: the event goes with the transaction.
		return webhooks.Delivery{}, fmt.Errorf("ping webhook endpoint %s: %w", endpointID, webhooks.ErrOutboxFull)
	}
	if err := tx.Commit(ctx); err != nil {
		return webhooks.Delivery{}, dbErr(err, webhookErrors)
	}
	now := timeOf(ev.CreatedAt)
	return webhooks.Delivery{
		ID: d.ID.String(), EventID: ev.ID.String(), EventType: webhooks.EventTestPing,
		Status: "pending", NextAttemptAt: &now, CreatedAt: now,
	}, nil
}

// Deliveries implements webhooks.Store.
func (s *Webhooks) Deliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]webhooks.Delivery, error) {
	tid, eid, err := ids(tenantID, endpointID)
	if err != nil {
		return nil, err
	}
	if _, err := s.q.GetWebhookEndpoint(ctx, sqlcgen.GetWebhookEndpointParams{TenantID: tid, ID: eid}); err != nil {
		return nil, fmt.Errorf("deliveries of webhook endpoint %s: %w", endpointID, dbErr(err, webhookErrors))
	}
	rows, err := s.q.ListWebhookDeliveries(ctx, sqlcgen.ListWebhookDeliveriesParams{
		TenantID: tid, EndpointID: eid, MaxRows: int32(min(max(limit, 1), 1000)),
	})
	if err != nil {
		return nil, fmt.Errorf("deliveries of webhook endpoint %s: %w", endpointID, dbErr(err, webhookErrors))
	}
	out := make([]webhooks.Delivery, len(rows))
	for i, r := range rows {
		out[i] = webhooks.Delivery{
			ID: r.ID.String(), EventID: r.EventID.String(), EventType: r.Type, Status: r.Status,
			Attempts: int(r.Attempts), NextAttemptAt: timePtrOf(r.NextAttemptAt), LastAttemptAt: timePtrOf(r.LastAttemptAt),
			LastStatusCode: intPtr(r.LastStatusCode), LastLatencyMS: intPtr(r.LastLatencyMs),
			LastError: r.LastError, ResponseExcerpt: r.ResponseExcerpt,
			CreatedAt: timeOf(r.CreatedAt), DeliveredAt: timePtrOf(r.DeliveredAt),
		}
	}
	return out, nil
}

// Resend implements webhooks.Store.
func (s *Webhooks) Resend(ctx context.Context, tenantID, endpointID, deliveryID string) error {
	tid, eid, err := ids(tenantID, endpointID)
	if err != nil {
		return err
	}
	did, ok := uuidOf(deliveryID)
	if !ok {
		return webhooks.ErrNotFound
	}
	n, err := s.q.ResendWebhookDelivery(ctx, sqlcgen.ResendWebhookDeliveryParams{TenantID: tid, EndpointID: eid, ID: did})
	if err != nil {
		return fmt.Errorf("resend webhook delivery %s: %w", deliveryID, dbErr(err, webhookErrors))
	}
	if n == 1 {
		return nil
	}
	st, err := s.q.WebhookDeliveryState(ctx, sqlcgen.WebhookDeliveryStateParams{TenantID: tid, EndpointID: eid, ID: did})
	switch {
	case err != nil:
		return fmt.Errorf("resend webhook delivery %s: %w", deliveryID, dbErr(err, webhookErrors))
	case !st.Settled:
		return webhooks.ErrConflict
	case st.Full:
		return webhooks.ErrOutboxFull
	}
	// Settled between the two statements: sent again by then, or not,
	// the tenant's next try says.
	return webhooks.ErrConflict
}

// Claim implements webhooks.Store (sql/webhooks.sql, ClaimWebhookDeliveries).
func (s *Webhooks) Claim(ctx context.Context, r webhooks.ClaimRequest) ([]webhooks.Job, error) {
	inFlight := make([]pgtype.UUID, 0, len(r.InFlight))
	for _, t := range r.InFlight {
		if id, ok := uuidOf(t); ok {
			inFlight = append(inFlight, id)
		}
	}
	rows, err := s.q.ClaimWebhookDeliveries(ctx, sqlcgen.ClaimWebhookDeliveriesParams{
		ClaimUntil: ts(r.Until), InFlight: inFlight, KeyID: r.KeyID, MaxDeliveries: int32(r.Max),
		PerEndpoint: int32(r.PerEndpoint), PerTenant: int32(r.PerTenant),
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", dbErr(err, webhookErrors))
	}
	jobs := make([]webhooks.Job, len(rows))
	for i, r := range rows {
		jobs[i] = webhooks.Job{
			DeliveryID: r.ID.String(), Attempt: int(r.Attempts), TenantID: r.TenantID.String(),
			EventID: r.EventID.String(), Type: r.Type, Data: r.Data, EventAt: timeOf(r.EventAt),
			EndpointID: r.EndpointID.String(), URL: r.Url, Secret: r.Secret,
			PreviousSecret: r.PreviousSecret, PreviousUntil: timeOf(r.PreviousExpiresAt),
		}
	}
	return jobs, nil
}

// Delivered implements webhooks.Store.
func (s *Webhooks) Delivered(ctx context.Context, deliveryID string, o webhooks.Outcome) error {
	id, ok := uuidOf(deliveryID)
	if !ok {
		return webhooks.ErrNotFound
	}
	code, lat := outcomeNumbers(o)
	err := s.q.DeliveredWebhook(ctx, sqlcgen.DeliveredWebhookParams{
		ID: id, StatusCode: code, LatencyMs: lat, ResponseExcerpt: truncateUTF8(o.ResponseExcerpt, webhooks.MaxExcerpt),
	})
	if err != nil {
		return fmt.Errorf("webhook delivery %s delivered: %w", deliveryID, dbErr(err, webhookErrors))
	}
	return nil
}

// Failed implements webhooks.Store.
func (s *Webhooks) Failed(ctx context.Context, deliveryID string, o webhooks.Outcome, next time.Time) error {
	id, ok := uuidOf(deliveryID)
	if !ok {
		return webhooks.ErrNotFound
	}
	code, lat := outcomeNumbers(o)
	p := sqlcgen.FailedWebhookParams{
		ID: id, StatusCode: code, LatencyMs: lat,
		LastError: truncateUTF8(o.Error, 300), ResponseExcerpt: truncateUTF8(o.ResponseExcerpt, webhooks.MaxExcerpt),
		DisableAfter:  pgtype.Interval{Microseconds: webhooks.DisableAfter.Microseconds(), Valid: true},
		DisableReason: webhooks.DisabledForFailures,
	}
	if !next.IsZero() {
		p.NextAttemptAt = ts(next)
	}
	if err := s.q.FailedWebhook(ctx, p); err != nil {
		return fmt.Errorf("webhook delivery %s failed: %w", deliveryID, dbErr(err, webhookErrors))
	}
	return nil
}

// Sweep implements webhooks.Store: the month's allotment thresholds, the
// alerts resolved in the last week, the pruning, each one statement.
func (s *Webhooks) Sweep(ctx context.Context, now, pruneBefore time.Time) (int64, error) {
	now = now.UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	percents := make([]int32, len(webhooks.AllotmentPercents))
	for i, p := range webhooks.AllotmentPercents {
		percents[i] = int32(p)
	}
	n1, err := s.q.EmitAllotmentThresholds(ctx, sqlcgen.EmitAllotmentThresholdsParams{
		MonthStart: ts(month), MonthEnd: ts(month.AddDate(0, 1, 0)), Month: month.Format("2006-01"),
		// usage.CountsAsCheck and tenant.EffectivePlanName.
		CountingOutcomes: []string{admission.OutcomeAllowed, admission.LayerPolicy},
		KeepStatuses:     []string{tenant.StatusActive, tenant.StatusTrialing, tenant.StatusPastDue},
		Percents:         percents,
	})
	if err != nil {
		return 0, fmt.Errorf("sweep allotment thresholds: %w", dbErr(err, webhookErrors))
	}
	today := audit.DayOf(now)
	n2, err := s.q.EmitAlertResolutions(ctx, sqlcgen.EmitAlertResolutionsParams{
		FirstDay:  pgtype.Date{Time: today.AddDate(0, 0, -7), Valid: true},
		Yesterday: pgtype.Date{Time: today.AddDate(0, 0, -1), Valid: true},
	})
	if err != nil {
		return n1, fmt.Errorf("sweep resolved alerts: %w", dbErr(err, webhookErrors))
	}
	if _, err := s.q.PruneWebhookEvents(ctx, sqlcgen.PruneWebhookEventsParams{Before: ts(pruneBefore), MaxRows: pruneRows}); err != nil {
		return n1 + n2, fmt.Errorf("prune webhook events: %w", dbErr(err, webhookErrors))
	}
	return n1 + n2, nil
}

// EmitBudgetThreshold implements webhooks.Store in one statement: the
// event's deliveries are made by the outbox's trigger, as for every event.
func (s *Webhooks) EmitBudgetThreshold(ctx context.Context, l webhooks.BudgetLevel, percent int) (bool, error) {
	tid, ok := uuidOf(l.TenantID)
	if !ok {
		return false, fmt.Errorf("budget.threshold of tenant %q: %w", l.TenantID, webhooks.ErrNotFound)
	}
	data, err := json.Marshal(map[string]any{
		"percent": percent, "policy": l.Policy, "subject_digest": l.SubjectDigest, "unit": l.Unit,
		"limit": l.Limit, "taken": l.Taken, "window_start": l.WindowStart.UTC(), "window_end": l.WindowEnd.UTC(),
	})
	if err != nil {
		return false, fmt.Errorf("budget.threshold data: %w", err)
	}
	_, err = s.q.InsertWebhookEvent(ctx, sqlcgen.InsertWebhookEventParams{
		TenantID: tid, Type: webhooks.EventBudgetThreshold, Data: data, IdempotencyKey: l.Key(percent),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Written before, by this instance or another.
		return false, nil
	case err != nil:
		return false, fmt.Errorf("budget.threshold event: %w", dbErr(err, webhookErrors))
	}
	return true, nil
}

// Outbox implements webhooks.Store.
func (s *Webhooks) Outbox(ctx context.Context, keyID []byte) (webhooks.Outbox, error) {
	r, err := s.q.WebhookOutbox(ctx, keyID)
	if err != nil {
		return webhooks.Outbox{}, fmt.Errorf("webhook outbox: %w", dbErr(err, webhookErrors))
	}
	o := webhooks.Outbox{Unsettled: r.Unsettled, Dropped: r.Dropped, OtherKey: r.OtherKey}
	if r.LastDroppedTenant.Valid {
		o.LastDroppedTenant = r.LastDroppedTenant.String()
	}
	return o, nil
}

// LabelSecrets implements webhooks.Store.
func (s *Webhooks) LabelSecrets(ctx context.Context, keyID []byte, opens func(sealed []byte) bool) (int, error) {
	rows, err := s.q.UnlabelledWebhookSecrets(ctx)
	if err != nil {
		return 0, fmt.Errorf("label webhook secrets: %w", dbErr(err, webhookErrors))
	}
	n := 0
	for _, r := range rows {
		if !opens(r.Secret) {
			continue
		}
		m, err := s.q.LabelWebhookSecret(ctx, sqlcgen.LabelWebhookSecretParams{ID: r.ID, Secret: r.Secret, SecretKeyID: keyID})
		if err != nil {
			return n, fmt.Errorf("label webhook secrets: %w", dbErr(err, webhookErrors))
		}
		n += int(m)
	}
	return n, nil
}

// emitPlanChanged writes plan.changed in the transaction of q when the
// effective plan moves from before to after (tenant.EffectivePlanName),
// saying why.
func emitPlanChanged(ctx context.Context, q *sqlcgen.Queries, tenantID pgtype.UUID, before, after planState) error {
	was := tenant.EffectivePlanName(before.plan, before.status)
	is := tenant.EffectivePlanName(after.plan, after.status)
	if was == is {
		return nil
	}
	wasHeld := was != canonicalPlan(before.plan)
	isHeld := is != canonicalPlan(after.plan)
	reason := "changed"
	switch {
	case isHeld && !wasHeld && after.status == tenant.StatusCanceled:
		reason = "subscription_canceled"
	case isHeld && !wasHeld:
		reason = "payment_failed"
	case wasHeld && !isHeld:
		reason = "payment_recovered"
	case planRank(is) > planRank(was):
		reason = "upgraded"
	case planRank(is) < planRank(was):
		reason = "downgraded"
	}
	data := fmt.Appendf(nil, `{"plan":%q,"effective_plan":%q,"previous_effective_plan":%q,"billing_status":%q,"reason":%q}`,
		after.plan, is, was, after.status, reason)
	_, err := q.InsertWebhookEvent(ctx, sqlcgen.InsertWebhookEventParams{
		TenantID: tenantID, Type: webhooks.EventPlanChanged, Data: data,
		// The transaction is the occurrence: a key of its own.
		IdempotencyKey: "plan.changed:" + uuid.NewString(),
	})
	if err != nil {
		return fmt.Errorf("plan.changed event: %w", err)
	}
	return nil
}

// planState is a tenant's purchased plan and billing status.
type planState struct{ plan, status string }

func canonicalPlan(p string) string {
	if p == tenant.PlanGrowth {
		return tenant.PlanPro
	}
	return p
}

// planRank orders the plans by what they allow.
func planRank(p string) int {
	switch p {
	case tenant.PlanStarter:
		return 1
	case tenant.PlanPro, tenant.PlanGrowth:
		return 2
	case tenant.PlanEnterprise:
		return 3
	case tenant.PlanEnterpriseDedicated:
		return 4
	}
	return 0
}

func endpointOf(r sqlcgen.WebhookEndpoint) webhooks.Endpoint {
	e := webhooks.Endpoint{
		ID: r.ID.String(), TenantID: r.TenantID.String(), URL: r.Url, Events: r.Events,
		Enabled: r.Enabled, DisabledReason: r.DisabledReason, FailingSince: timePtrOf(r.FailingSince),
		CreatedAt: timeOf(r.CreatedAt),
	}
	if r.PreviousExpiresAt.Valid && r.PreviousExpiresAt.Time.After(time.Now()) {
		e.PreviousSecretExpiresAt = timePtrOf(r.PreviousExpiresAt)
	}
	if e.Events == nil {
		e.Events = []string{}
	}
	return e
}

func outcomeNumbers(o webhooks.Outcome) (code, latency *int32) {
	if o.StatusCode > 0 {
		c := int32(o.StatusCode)
		code = &c
	}
	l := int32(min(o.Latency.Milliseconds(), 1<<30))
	return code, &l
}

func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	n := int(*p)
	return &n
}
