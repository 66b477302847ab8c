package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/policy"
)

// Policies is the policy.Store of tenants' policies and overrides, in the
// policies and policy_overrides tables. It is safe for concurrent use.
type Policies struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var _ policy.Store = (*Policies)(nil)

// NewPolicies returns the policy store on pool.
func NewPolicies(pool *pgxpool.Pool) *Policies {
	return &Policies{pool: pool, q: sqlcgen.New(pool)}
}

// PutPolicy creates or replaces a policy. The tenant row stays locked until
// the write commits, so that concurrent puts cannot pass MaxPolicies
// together. Lock, count and write are three statements (the count must
// follow the lock, see sql/policies.sql), on a path that is not the hot one.
func (s *Policies) PutPolicy(ctx context.Context, tenantID string, p policy.Policy) (policy.Policy, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return policy.Policy{}, err
	}
	var row sqlcgen.Policy
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if _, err := q.LockTenantPolicies(ctx, tid); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("tenant %s: %w", tenantID, policy.ErrNotFound)
		} else if err != nil {
			return err
		}
		n, err := q.CountPolicies(ctx, sqlcgen.CountPoliciesParams{TenantID: tid, Name: p.Name})
		if err != nil {
			return err
		}
		if !n.Exists && n.Policies >= policy.MaxPolicies {
			return policy.ErrTooManyPolicies
		}
		row, err = q.UpsertPolicy(ctx, sqlcgen.UpsertPolicyParams{
			TenantID:   tid,
			Name:       p.Name,
			Limit:      p.Limit,
			Window:     storedWindow(p),
			Algorithm:  p.Algorithm.String(),
			Scope:      string(p.Scope),
			FailMode:   string(p.FailMode),
			Shadow:     p.Shadow,
			AlertAfter: p.AlertAfter,
			Unit:       p.Unit,
			OnExpiry:   storedOnExpiry(p),
		})
		return err
	})
	if err != nil {
		return policy.Policy{}, fmt.Errorf("put policy %s: %w", p.Name, dbErr(err, policyErrors))
	}
	return policyFromRow(row)
}

// GetPolicy returns one policy.
func (s *Policies) GetPolicy(ctx context.Context, tenantID, name string) (policy.Policy, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return policy.Policy{}, err
	}
	row, err := s.q.GetPolicy(ctx, sqlcgen.GetPolicyParams{TenantID: tid, Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return policy.Policy{}, &policy.NotFoundError{Policy: name}
	} else if err != nil {
		return policy.Policy{}, fmt.Errorf("get policy %s: %w", name, dbErr(err, policyErrors))
	}
	return policyFromRow(row)
}

// ListPolicies returns a tenant's policies sorted by name.
func (s *Policies) ListPolicies(ctx context.Context, tenantID string) ([]policy.Policy, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ListPolicies(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", dbErr(err, policyErrors))
	}
	ps := make([]policy.Policy, 0, len(rows))
	for _, r := range rows {
		p, err := policyFromRow(r)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// DeletePolicy deletes a policy; its overrides go with it (ON DELETE CASCADE).
func (s *Policies) DeletePolicy(ctx context.Context, tenantID, name string) error {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return err
	}
	n, err := s.q.DeletePolicy(ctx, sqlcgen.DeletePolicyParams{TenantID: tid, Name: name})
	if err != nil {
		return fmt.Errorf("delete policy %s: %w", name, dbErr(err, policyErrors))
	}
	if n == 0 {
		return &policy.NotFoundError{Policy: name}
	}
	return nil
}

// PutOverride creates or replaces an override. The tenant and policy rows
// stay locked until the write commits, so that concurrent puts cannot pass
// MaxOverrides or MaxWildcards together; the policy's expired overrides are deleted on the way, so that
// they do not pile up.
func (s *Policies) PutOverride(ctx context.Context, tenantID, name string, o policy.Override) (policy.Override, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return policy.Override{}, err
	}
	var row sqlcgen.PolicyOverride
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		// The tenant row first (as PutPolicy takes it), so that puts on two
		// of its policies cannot pass MaxOverrides together either.
		if _, err := q.LockTenantPolicies(ctx, tid); errors.Is(err, pgx.ErrNoRows) {
			return &policy.NotFoundError{Policy: name}
		} else if err != nil {
			return err
		}
		scope, err := q.LockPolicyOverrides(ctx, sqlcgen.LockPolicyOverridesParams{TenantID: tid, Policy: name})
		if errors.Is(err, pgx.ErrNoRows) {
			return &policy.NotFoundError{Policy: name}
		} else if err != nil {
			return err
		}
		if policy.Scope(scope) == policy.ScopeGlobal {
			return policy.ErrGlobalOverride
		}
		n, err := q.CountOverrides(ctx, sqlcgen.CountOverridesParams{TenantID: tid, Policy: name, Pattern: o.Pattern})
		if err != nil {
			return err
		}
		if !n.Exists && n.Overrides >= policy.MaxOverrides {
			return policy.ErrTooManyOverrides
		}
		if !n.Exists && strings.Contains(o.Pattern, "*") && n.Wildcards >= policy.MaxWildcards {
			return policy.ErrTooManyWildcards
		}
		if err := q.PruneOverrides(ctx, sqlcgen.PruneOverridesParams{TenantID: tid, Policy: name}); err != nil {
			return err
		}
		row, err = q.UpsertOverride(ctx, sqlcgen.UpsertOverrideParams{
			TenantID:  tid,
			Policy:    name,
			Pattern:   o.Pattern,
			Limit:     o.Limit,
			ExpiresAt: tsPtr(o.ExpiresAt),
		})
		return err
	})
	if err != nil {
		return policy.Override{}, fmt.Errorf("put override %q of policy %s: %w", o.Pattern, name, dbErr(err, policyErrors))
	}
	return overrideFromRow(row), nil
}

// GetOverride returns one unexpired override.
func (s *Policies) GetOverride(ctx context.Context, tenantID, name, pattern string) (policy.Override, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return policy.Override{}, err
	}
	row, err := s.q.GetOverride(ctx, sqlcgen.GetOverrideParams{TenantID: tid, Policy: name, Pattern: pattern})
	if errors.Is(err, pgx.ErrNoRows) {
		return policy.Override{}, s.missingOverride(ctx, tid, name, pattern)
	} else if err != nil {
		return policy.Override{}, fmt.Errorf("get override %q of policy %s: %w", pattern, name, dbErr(err, policyErrors))
	}
	return overrideFromRow(row), nil
}

// ListOverrides returns a policy's unexpired overrides sorted by pattern.
func (s *Policies) ListOverrides(ctx context.Context, tenantID, name string) ([]policy.Override, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ListOverrides(ctx, sqlcgen.ListOverridesParams{TenantID: tid, Policy: name})
	if err != nil {
		return nil, fmt.Errorf("list overrides of policy %s: %w", name, dbErr(err, policyErrors))
	}
	if len(rows) == 0 {
		// No overrides, or no policy: only the second is an error.
		if _, err := s.GetPolicy(ctx, tenantID, name); err != nil {
			return nil, err
		}
	}
	ovs := make([]policy.Override, 0, len(rows))
	for _, r := range rows {
		ovs = append(ovs, overrideFromRow(r))
	}
	return ovs, nil
}

// DeleteOverride deletes an unexpired override.
func (s *Policies) DeleteOverride(ctx context.Context, tenantID, name, pattern string) error {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return err
	}
	n, err := s.q.DeleteOverride(ctx, sqlcgen.DeleteOverrideParams{TenantID: tid, Policy: name, Pattern: pattern})
	if err != nil {
		return fmt.Errorf("delete override %q of policy %s: %w", pattern, name, dbErr(err, policyErrors))
	}
	if n == 0 {
		return s.missingOverride(ctx, tid, name, pattern)
	}
	return nil
}

// missingOverride tells a missing override from a missing policy.
func (s *Policies) missingOverride(ctx context.Context, tid pgtype.UUID, name, pattern string) error {
	_, err := s.q.GetPolicy(ctx, sqlcgen.GetPolicyParams{TenantID: tid, Name: name})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &policy.NotFoundError{Policy: name}
	case err != nil:
		return fmt.Errorf("get policy %s: %w", name, dbErr(err, policyErrors))
	}
	return &policy.NotFoundError{Policy: name, Pattern: pattern}
}

// LoadSet reads a tenant's policies and unexpired overrides in one statement,
// and anchors its billing periods (limit.Window.Anchored) at the tenant's
// billing anchor.
func (s *Policies) LoadSet(ctx context.Context, tenantID string) (policy.Set, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return policy.Set{}, err
	}
	rows, err := s.q.LoadPolicySet(ctx, tid)
	if err != nil {
		return policy.Set{}, fmt.Errorf("load policy set: %w", dbErr(err, policyErrors))
	}
	var ps []policy.Policy
	ovs := make(map[string][]policy.Override)
	for _, r := range rows {
		// Rows come sorted by policy name, one or more per policy.
		if len(ps) == 0 || ps[len(ps)-1].Name != r.Policy.Name {
			p, err := policyFromRow(r.Policy)
			if err != nil {
				return policy.Set{}, err
			}
			// A billing period counts from the tenant's anchor as of this
			// load: a new anchor changes the tenants row, whose
			// notification reloads the Set (app.invalidate).
			p.Window = p.Window.Anchored(timeOf(r.BillingAnchor))
			ps = append(ps, p)
		}
		if r.OverridePattern != nil && r.OverrideLimit != nil {
			ovs[r.Policy.Name] = append(ovs[r.Policy.Name], policy.Override{
				Pattern:   *r.OverridePattern,
				Limit:     *r.OverrideLimit,
				ExpiresAt: timePtrOf(r.OverrideExpiresAt),
			})
		}
	}
	return policy.NewSet(ps, ovs), nil
}

// policyFromRow turns a policies row into a policy.Policy. A row the policy
// package would not have written is an error, not a guess.
func policyFromRow(r sqlcgen.Policy) (policy.Policy, error) {
	a, err := limit.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return policy.Policy{}, fmt.Errorf("policy %s: stored %w", r.Name, err)
	}
	var w limit.Window
	if a != limit.Concurrency {
		if w, err = limit.ParseWindow(r.Window); err != nil {
			return policy.Policy{}, fmt.Errorf("policy %s: stored %w", r.Name, err)
		}
	}
	return policy.Policy{
		Name:            r.Name,
		Limit:           r.Limit,
		Window:          w,
		Algorithm:       a,
		Scope:           policy.Scope(r.Scope),
		FailMode:        policy.FailMode(r.FailMode),
		Shadow:          r.Shadow,
		AlertAfter:      r.AlertAfter,
		Unit:            r.Unit,
		ReleaseOnExpiry: r.OnExpiry == "release",
		CreatedAt:       timeOf(r.CreatedAt),
		UpdatedAt:       timeOf(r.UpdatedAt),
	}, nil
}

// storedOnExpiry is the policies.on_expiry of p.
func storedOnExpiry(p policy.Policy) string {
	if p.ReleaseOnExpiry {
		return "release"
	}
	return "settle"
}

// storedWindow is the policies.window of p: its shortest form, or "" for a
// concurrency policy, which has no window (the table's check holds it).
func storedWindow(p policy.Policy) string {
	if p.Algorithm == limit.Concurrency {
		return ""
	}
	return policy.FormatWindow(p.Window)
}

// overrideFromRow turns a policy_overrides row into a policy.Override.
func overrideFromRow(r sqlcgen.PolicyOverride) policy.Override {
	return policy.Override{Pattern: r.Pattern, Limit: r.Limit, ExpiresAt: timePtrOf(r.ExpiresAt)}
}

// policyTenantUUID reads a tenant id; one that is not a UUID names no tenant.
func policyTenantUUID(id string) (pgtype.UUID, error) {
	u, ok := uuidOf(id)
	if !ok {
		return u, fmt.Errorf("tenant %q: %w", id, policy.ErrNotFound)
	}
	return u, nil
}
