package policy

import "context"

// Store keeps tenants' policies and overrides; pgstore implements it. Every
// method is safe for concurrent use. A policy or override that does not
// exist is a *NotFoundError (wrapping ErrNotFound); a tenant that does not
// exist wraps ErrNotFound too.
type Store interface {
	// PutPolicy creates or replaces the policy p.Name of a tenant and returns
	// it as stored, with CreatedAt kept from the policy it replaces. A new
	// policy beyond MaxPolicies returns ErrTooManyPolicies.
	PutPolicy(ctx context.Context, tenantID string, p Policy) (Policy, error)
	GetPolicy(ctx context.Context, tenantID, name string) (Policy, error)
	// ListPolicies returns a tenant's policies sorted by name.
	ListPolicies(ctx context.Context, tenantID string) ([]Policy, error)
	// DeletePolicy deletes a policy and its overrides.
	DeletePolicy(ctx context.Context, tenantID, name string) error

	// PutOverride creates or replaces the override o.Pattern of a policy and
	// returns it as stored. A new override beyond MaxOverrides returns
	// ErrTooManyOverrides, and one of a global policy ErrGlobalOverride.
	PutOverride(ctx context.Context, tenantID, policy string, o Override) (Override, error)
	// GetOverride and ListOverrides see unexpired overrides only; ListOverrides
	// sorts them by pattern.
	GetOverride(ctx context.Context, tenantID, policy, pattern string) (Override, error)
	ListOverrides(ctx context.Context, tenantID, policy string) ([]Override, error)
	DeleteOverride(ctx context.Context, tenantID, policy, pattern string) error

	Loader
}

// Loader loads a tenant's whole Set; the Catalog calls it.
type Loader interface {
	// LoadSet returns a tenant's policies with their unexpired overrides, as
	// of one moment. A tenant without policies has an empty Set.
	LoadSet(ctx context.Context, tenantID string) (Set, error)
}
