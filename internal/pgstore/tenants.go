package pgstore

import (
	"context"
	"fmt"

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
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", dbErr(err, tenantErrors))
	}
	defer tx.Rollback(ctx)
	t, err := txCreator{s.q.WithTx(tx)}.CreateTenant(ctx, name, plan, keys...)
	if err != nil {
		return tenant.Tenant{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", dbErr(err, tenantErrors))
	}
	return t, nil
}

// txCreator is a tenant.Creator inside a transaction its caller holds (q
// runs in it), so that a tenant is made with other rows all or nothing:
// Tenants.CreateTenant, and the console's sign-up (Members.SignUp).
type txCreator struct{ q *sqlcgen.Queries }

// CreateTenant implements tenant.Creator.
func (c txCreator) CreateTenant(ctx context.Context, name, plan string, keys ...tenant.Key) (tenant.Tenant, error) {
	if err := tenant.ValidateName(name); err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant: %w", err)
	}
	for _, k := range keys {
		if err := tenant.ValidateKeyName(k.Name); err != nil {
			return tenant.Tenant{}, fmt.Errorf("create tenant: key %s: %w", k.ID, err)
		}
	}
	row, err := c.q.CreateTenant(ctx, sqlcgen.CreateTenantParams{Name: name, Plan: plan})
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("create tenant on plan %q: %w", plan, dbErr(err, tenantErrors))
	}
	for _, k := range keys {
		if _, err := c.q.CreateKey(ctx, keyParams(k, row.ID)); err != nil {
			return tenant.Tenant{}, fmt.Errorf("create tenant: key %s: %w", k.ID, dbErr(err, tenantErrors))
		}
	}
	return tenantOf(row), nil
}

// Tenant implements tenant.Store.
func (s *Tenants) Tenant(ctx context.Context, id string) (tenant.Tenant, error) {
	uid, ok := uuidOf(id)
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %s: %w", id, tenant.ErrNotFound)
	}
	row, err := s.q.GetTenant(ctx, uid)
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("tenant %s: %w", id, dbErr(err, tenantErrors))
	}
	return tenantOf(row), nil
}

// Tenants implements tenant.Store.
func (s *Tenants) Tenants(ctx context.Context) ([]tenant.Tenant, error) {
	rows, err := s.q.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", dbErr(err, tenantErrors))
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
	uid, ok := uuidOf(id)
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
		return tenant.Tenant{}, fmt.Errorf("set tenant limits: tenant %s: %w", id, dbErr(err, tenantErrors))
	}
	return tenantOf(row), nil
}

// SetTenantDisabled disables the tenant (an operator's act), keeping the
// first instant it was disabled at and replacing reason, or enables it
// again, and returns it as stored. Nothing else of the tenant changes; the
// tenants trigger tells every instance's Directory, whose next
// Authenticate of its keys answers tenant.ErrDisabled. Errors:
// tenant.ErrNotFound, a *tenant.FieldError for a reason too long.
func (s *Tenants) SetTenantDisabled(ctx context.Context, id string, disabled bool, reason string) (tenant.Tenant, error) {
	verb := "enable"
	if disabled {
		verb = "disable"
		if err := tenant.ValidateDisabledReason(reason); err != nil {
			return tenant.Tenant{}, fmt.Errorf("disable tenant %s: %w", id, err)
		}
	}
	uid, ok := uuidOf(id)
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("%s tenant %s: %w", verb, id, tenant.ErrNotFound)
	}
	row, err := s.q.SetTenantDisabled(ctx, sqlcgen.SetTenantDisabledParams{Disabled: disabled, Reason: reason, ID: uid})
	if err != nil {
		return tenant.Tenant{}, fmt.Errorf("%s tenant %s: %w", verb, id, dbErr(err, tenantErrors))
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
		BillingUpdatedAt:     timePtrOf(r.BillingUpdatedAt),
		CreatedAt:            timeOf(r.CreatedAt),
		DisabledAt:           timePtrOf(r.DisabledAt),
		DisabledReason:       r.DisabledReason,
	}
}
