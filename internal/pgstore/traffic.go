package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/traffic"
)

// Traffic reads the service's traffic from usage_minutes and tenants, and
// keeps degraded_minutes: the traffic.Store and traffic.DegradedStore. It is
// safe for concurrent use.
type Traffic struct {
	q *sqlcgen.Queries
}

var (
	_ traffic.Store         = (*Traffic)(nil)
	_ traffic.DegradedStore = (*Traffic)(nil)
)

// NewTraffic returns the traffic store on pool, a database migrated to at
// least 000008.
func NewTraffic(pool *pgxpool.Pool) *Traffic {
	return &Traffic{q: sqlcgen.New(pool)}
}

// Traffic implements traffic.Store. A tenant id that is not a UUID has no
// traffic.
func (s *Traffic) Traffic(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.MinuteCount, error) {
	p := sqlcgen.TrafficByMinuteParams{FromMinute: ts(from), UntilMinute: ts(until)}
	if tenantID != "" {
		id, ok := uuidOf(tenantID)
		if !ok {
			return nil, nil
		}
		p.TenantID = id
	}
	rows, err := s.q.TrafficByMinute(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("traffic: %w", dbErr(err, auditErrors))
	}
	out := make([]traffic.MinuteCount, len(rows))
	for i, r := range rows {
		out[i] = traffic.MinuteCount{Minute: timeOf(r.Minute), Outcome: r.Outcome, Count: r.Requests}
	}
	return out, nil
}

// DailyChecks implements traffic.Store.
func (s *Traffic) DailyChecks(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.DayCount, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.DailyChecks(ctx, sqlcgen.DailyChecksParams{TenantID: id, FromMinute: ts(from), UntilMinute: ts(until)})
	if err != nil {
		return nil, fmt.Errorf("daily checks of tenant %s: %w", tenantID, dbErr(err, auditErrors))
	}
	out := make([]traffic.DayCount, len(rows))
	for i, r := range rows {
		out[i] = traffic.DayCount{Day: timeOf(r.Day), Count: r.Checks}
	}
	return out, nil
}

// DailyTraffic implements traffic.Store.
func (s *Traffic) DailyTraffic(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.DayOutcome, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.TrafficByDay(ctx, sqlcgen.TrafficByDayParams{TenantID: id, FromMinute: ts(from), UntilMinute: ts(until)})
	if err != nil {
		return nil, fmt.Errorf("daily traffic of tenant %s: %w", tenantID, dbErr(err, auditErrors))
	}
	out := make([]traffic.DayOutcome, len(rows))
	for i, r := range rows {
		out[i] = traffic.DayOutcome{Day: timeOf(r.Day), Outcome: r.Outcome, Count: r.Requests}
	}
	return out, nil
}

// TopTenants implements traffic.Store.
func (s *Traffic) TopTenants(ctx context.Context, from, until time.Time, n int) (byChecks, byRefusals []traffic.TenantTraffic, err error) {
	checks, err := s.q.TopTenantsByChecks(ctx, sqlcgen.TopTenantsByChecksParams{FromMinute: ts(from), UntilMinute: ts(until), MaxRows: int32(n)})
	if err != nil {
		return nil, nil, fmt.Errorf("top tenants by checks: %w", dbErr(err, auditErrors))
	}
	refusals, err := s.q.TopTenantsByRefusals(ctx, sqlcgen.TopTenantsByRefusalsParams{FromMinute: ts(from), UntilMinute: ts(until), MaxRows: int32(n)})
	if err != nil {
		return nil, nil, fmt.Errorf("top tenants by refusals: %w", dbErr(err, auditErrors))
	}
	for _, r := range checks {
		byChecks = append(byChecks, traffic.TenantTraffic{TenantID: r.ID.String(), Name: r.Name, Checks: r.Checks, Refusals: r.Refusals})
	}
	for _, r := range refusals {
		byRefusals = append(byRefusals, traffic.TenantTraffic{TenantID: r.ID.String(), Name: r.Name, Checks: r.Checks, Refusals: r.Refusals})
	}
	return byChecks, byRefusals, nil
}

// likeEscaper makes a search text match itself under ILIKE's default escape
// character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// SearchTenants implements traffic.Store.
func (s *Traffic) SearchTenants(ctx context.Context, q traffic.Search) ([]traffic.TenantRow, int, error) {
	query := strings.TrimSpace(q.Query)
	pattern := "%" + likeEscaper.Replace(query) + "%"
	total, err := s.q.CountTenants(ctx, sqlcgen.CountTenantsParams{Pattern: pattern, Query: query})
	if err != nil {
		return nil, 0, fmt.Errorf("count tenants: %w", dbErr(err, tenantErrors))
	}
	rows, err := s.q.SearchTenants(ctx, sqlcgen.SearchTenantsParams{
		MonthStart: ts(q.MonthStart), Pattern: pattern, Query: query,
		SkipRows: int32(max(q.Offset, 0)), MaxRows: int32(max(q.Limit, 0)),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("search tenants: %w", dbErr(err, tenantErrors))
	}
	out := make([]traffic.TenantRow, len(rows))
	for i, r := range rows {
		out[i] = traffic.TenantRow{
			Tenant: tenantOf(sqlcgen.Tenant{
				ID: r.ID, Name: r.Name, Plan: r.Plan, BillingStatus: r.BillingStatus,
				RateLimitPerMinute: r.RateLimitPerMinute, QuotaPerMinute: r.QuotaPerMinute, QuotaPerHour: r.QuotaPerHour,
				StripeCustomerID: r.StripeCustomerID, StripeSubscriptionID: r.StripeSubscriptionID,
				BillingUpdatedAt: r.BillingUpdatedAt, CreatedAt: r.CreatedAt,
				DisabledAt: r.DisabledAt, DisabledReason: r.DisabledReason,
			}),
			MonthChecks: r.MonthChecks,
		}
	}
	return out, int(total), nil
}

// DegradedMinutes implements traffic.Store.
func (s *Traffic) DegradedMinutes(ctx context.Context, from, until time.Time) ([]traffic.Degraded, error) {
	rows, err := s.q.DegradedMinutes(ctx, sqlcgen.DegradedMinutesParams{FromMinute: ts(from), UntilMinute: ts(until)})
	if err != nil {
		return nil, fmt.Errorf("degraded minutes: %w", dbErr(err, auditErrors))
	}
	out := make([]traffic.Degraded, len(rows))
	for i, r := range rows {
		out[i] = traffic.Degraded{Minute: timeOf(r.Minute), Answers: r.Answers}
	}
	return out, nil
}

// AddDegraded implements traffic.DegradedStore in one statement.
func (s *Traffic) AddDegraded(ctx context.Context, counts map[time.Time]int64) error {
	minutes := make([]time.Time, 0, len(counts))
	for m := range counts {
		minutes = append(minutes, m)
	}
	slices.SortFunc(minutes, time.Time.Compare)
	p := sqlcgen.AddDegradedParams{Minutes: make([]pgtype.Timestamptz, len(minutes)), Answers: make([]int64, len(minutes))}
	for i, m := range minutes {
		p.Minutes[i], p.Answers[i] = ts(m), counts[m]
	}
	if err := s.q.AddDegraded(ctx, p); err != nil {
		return fmt.Errorf("add degraded minutes: %w", dbErr(err, auditErrors))
	}
	return nil
}

// PruneDegraded implements traffic.DegradedStore.
func (s *Traffic) PruneDegraded(ctx context.Context, before time.Time) error {
	if _, err := s.q.PruneDegraded(ctx, ts(before)); err != nil {
		return fmt.Errorf("prune degraded minutes: %w", dbErr(err, auditErrors))
	}
	return nil
}
