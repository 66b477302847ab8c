package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Tenants keeps tenants, API keys and plans in PostgreSQL. It is safe for
// concurrent use.
type Tenants struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var _ tenant.Store = (*Tenants)(nil)

// NewTenants returns the tenant store on pool, a migrated database.
func NewTenants(pool *pgxpool.Pool) *Tenants {
	return &Tenants{pool: pool, q: sqlcgen.New(pool)}
}

// CreateTenant implements tenant.Store.
func (s *Tenants) CreateTenant(ctx context.Context, name, plan string, keys ...tenant.Key) (tenant.Tenant, error) {
	if err := tenant.ValidateName(name); err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", translate(err))
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	row, err := q.CreateTenant(ctx, sqlcgen.CreateTenantParams{Name: name, Plan: plan})
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant on plan %q: %w", plan, translate(err))
	}
	for _, k := range keys {
		if _, err := q.CreateKey(ctx, keyParams(k, row.ID)); err != nil {
			return tenant.Tenant{}, fmt.Errorf("create tenant: key %s: %w", k.ID, translate(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", translate(err))
	}
	return tenantOf(row), nil
}

// Tenant implements tenant.Store.
func (s *Tenants) Tenant(ctx context.Context, id string) (tenant.Tenant, error) {
	uid, ok := parseUUID(id)
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %s: %w", id, tenant.ErrNotFound)
	}
	row, err := s.q.GetTenant(ctx, uid)
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("tenant %s: %w", id, translate(err))
	}
	return tenantOf(row), nil
}

// Tenants implements tenant.Store.
func (s *Tenants) Tenants(ctx context.Context) ([]tenant.Tenant, error) {
	rows, err := s.q.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", translate(err))
	}
	out := make([]tenant.Tenant, len(rows))
	for i, r := range rows {
		out[i] = tenantOf(r)
	}
	return out, nil
}

// SetTenantLimits implements tenant.Store.
func (s *Tenants) SetTenantLimits(ctx context.Context, id string, l tenant.TenantLimits) (tenant.Tenant, error) {
	if err := l.Validate(); err != nil {
		return tenant.Tenant{}, fmt.Errorf("set tenant limits: %w", err)
	}
	uid, ok := parseUUID(id)
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("set tenant limits: tenant %s: %w", id, tenant.ErrNotFound)
	}
	row, err := s.q.SetTenantLimits(ctx, sqlcgen.SetTenantLimitsParams{
		ID:                 uid,
		RateLimitPerMinute: l.RateLimitPerMinute,
		QuotaPerMinute:     l.QuotaPerMinute,
		QuotaPerHour:       l.QuotaPerHour,
	})
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("set tenant limits: tenant %s: %w", id, translate(err))
	}
	return tenantOf(row), nil
}

// tenantOf turns a row into a tenant.Tenant.
func tenantOf(r sqlcgen.Tenant) tenant.Tenant {
	return tenant.Tenant{
		ID:                   r.ID.String(),
		Name:                 r.Name,
		Plan:                 r.Plan,
		BillingStatus:        r.BillingStatus,
		RateLimitPerMinute:   r.RateLimitPerMinute,
		QuotaPerMinute:       r.QuotaPerMinute,
		QuotaPerHour:         r.QuotaPerHour,
		StripeCustomerID:     deref(r.StripeCustomerID),
		StripeSubscriptionID: deref(r.StripeSubscriptionID),
		BillingUpdatedAt:     timePtr(r.BillingUpdatedAt),
		CreatedAt:            r.CreatedAt.Time,
	}
}

// parseUUID reads a tenant ID; anything that is not a UUID names no tenant.
func parseUUID(s string) (pgtype.UUID, bool) {
	var u pgtype.UUID
	if err := u.Scan(s); err != nil || !u.Valid {
		return u, false
	}
	return u, true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

// translate turns a pgx error into the tenant package's sentinels: no rows
// is ErrNotFound, a unique violation ErrConflict, a foreign key to plans an
// unknown plan (ErrInvalid), a foreign key to tenants ErrNotFound, any other
// constraint ErrInvalid. Anything else keeps its text but not its pgx type;
// ctx's errors stay errors.Is-able.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.ErrNotFound
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return tenant.ErrConflict
		case "23503": // foreign_key_violation
			switch pe.ConstraintName {
			case "tenants_plan_fkey":
				return &tenant.FieldError{Field: "plan", Reason: "no such plan"}
			case "api_keys_tenant_id_fkey":
				return fmt.Errorf("tenant: %w", tenant.ErrNotFound)
			}
			return &tenant.FieldError{Field: pe.ConstraintName, Reason: "refers to nothing"}
		case "23514", "22001", "23502": // check, string too long, not null
			// The domain's validation should have refused it first.
			return &tenant.FieldError{Field: pe.ConstraintName, Reason: "out of range"}
		}
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("%w: %v", c, err)
		}
	}
	return fmt.Errorf("%v", err)
}
