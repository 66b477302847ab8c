package tenant

import (
	"context"
	"time"
)

// Store is the system of record for tenants, their keys and the plans.
// pgstore.Tenants implements it. Every method is safe for concurrent use.
// Errors wrap ErrNotFound for a tenant, key or plan that does not exist,
// ErrConflict for a duplicate (a key prefix or Stripe price already taken)
// and ErrInvalid (a *FieldError) for input the store refuses, including an
// unknown plan; anything else is the store failing.
type Store interface {
	// CreateTenant creates a tenant named name on plan, in good standing
	// (billing status active), together with keys (their TenantID is set
	// to the new tenant's), all or nothing.
	CreateTenant(ctx context.Context, name, plan string, keys ...Key) (Tenant, error)
	// Tenant returns the tenant with id.
	Tenant(ctx context.Context, id string) (Tenant, error)
	// Tenants returns every tenant, oldest first.
	Tenants(ctx context.Context) ([]Tenant, error)
	// SetTenantLimits replaces the tenant's own limits and returns the
	// tenant as stored.
	SetTenantLimits(ctx context.Context, id string, l TenantLimits) (Tenant, error)

	// CreateKey stores k (made by NewKey, TenantID set) and returns it as
	// stored. An unknown tenant is ErrNotFound.
	CreateKey(ctx context.Context, k Key) (Key, error)
	// KeyByPrefix returns the key with prefix, Hash included, revoked or
	// not.
	KeyByPrefix(ctx context.Context, prefix string) (Key, error)
	// Keys returns the tenant's keys, revoked ones included, oldest first.
	Keys(ctx context.Context, tenantID string) ([]Key, error)
	// RevokeKey revokes the key with id and returns it. Revoking a revoked
	// key changes nothing and returns its first revocation time.
	RevokeKey(ctx context.Context, id string) (Key, error)
	// TouchKeys records, in one write, when each key (by ID) was last used;
	// it never moves last_used_at back, and ignores unknown IDs.
	TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error

	// Plans returns every plan, smallest first.
	Plans(ctx context.Context) ([]Plan, error)
	// Plan returns the plan named name.
	Plan(ctx context.Context, name string) (Plan, error)
	// SetPlanPrice maps a Stripe price to the plan; a price already mapped
	// to another plan is ErrConflict.
	SetPlanPrice(ctx context.Context, name, stripePriceID string) (Plan, error)
	// SetPlanLimits changes the plan's limits that l gives and returns the
	// plan as stored.
	SetPlanLimits(ctx context.Context, name string, l PlanLimits) (Plan, error)
}
