package policy

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// Service is what the tenant API calls to change policies: the Store, with
// every change also dropping the tenant's Set from this instance's Catalog,
// so that the instance that took a change applies it to the very next check.
// Other instances apply it when the database's change notification reaches
// them. A change that failed invalidates too: it may have committed before
// the failure (a cancelled COMMIT), and a needless reload costs one query.
//
// Every change that succeeds is also written to the audit log through Audit,
// when set, with what changed (DESIGN §2: override changes are audited).
type Service struct {
	Store
	Catalog *Catalog
	// Audit records one change: kind is policy_put, policy_deleted,
	// override_put or override_deleted. A failure to audit is the caller's to
	// log; the change stands.
	Audit func(ctx context.Context, tenantID, kind string, detail map[string]any)
}

// The kinds of the audit entries Service writes.
const (
	KindPolicyPut       = "policy_put"
	KindPolicyDeleted   = "policy_deleted"
	KindOverridePut     = "override_put"
	KindOverrideDeleted = "override_deleted"
)

// PutPolicy is Store.PutPolicy, then Catalog.Invalidate.
func (s Service) PutPolicy(ctx context.Context, tenantID string, p Policy) (Policy, error) {
	p, err := s.Store.PutPolicy(ctx, tenantID, p)
	s.changed(tenantID)
	if err == nil {
		var window any
		if p.Algorithm != limit.Concurrency {
			window = FormatWindow(p.Window)
		}
		s.audit(ctx, tenantID, KindPolicyPut, map[string]any{
			"policy": p.Name, "limit": p.Limit, "window": window, "algorithm": p.Algorithm.String(),
			"scope": string(p.Scope), "fail_mode": string(p.FailMode), "shadow": p.Shadow, "alert_after": p.AlertAfter,
		})
	}
	return p, err
}

// DeletePolicy is Store.DeletePolicy, then Catalog.Invalidate.
func (s Service) DeletePolicy(ctx context.Context, tenantID, name string) error {
	err := s.Store.DeletePolicy(ctx, tenantID, name)
	s.changed(tenantID)
	if err == nil {
		s.audit(ctx, tenantID, KindPolicyDeleted, map[string]any{"policy": name})
	}
	return err
}

// PutOverride is Store.PutOverride, then Catalog.Invalidate.
func (s Service) PutOverride(ctx context.Context, tenantID, name string, o Override) (Override, error) {
	o, err := s.Store.PutOverride(ctx, tenantID, name, o)
	s.changed(tenantID)
	if err == nil {
		d := map[string]any{"policy": name, "pattern": o.Pattern, "limit": o.Limit, "expires_at": nil}
		if o.ExpiresAt != nil {
			d["expires_at"] = o.ExpiresAt.UTC().Format(time.RFC3339)
		}
		s.audit(ctx, tenantID, KindOverridePut, d)
	}
	return o, err
}

// DeleteOverride is Store.DeleteOverride, then Catalog.Invalidate.
func (s Service) DeleteOverride(ctx context.Context, tenantID, name, pattern string) error {
	err := s.Store.DeleteOverride(ctx, tenantID, name, pattern)
	s.changed(tenantID)
	if err == nil {
		s.audit(ctx, tenantID, KindOverrideDeleted, map[string]any{"policy": name, "pattern": pattern})
	}
	return err
}

func (s Service) audit(ctx context.Context, tenantID, kind string, detail map[string]any) {
	if s.Audit != nil {
		s.Audit(ctx, tenantID, kind, detail)
	}
}

func (s Service) changed(tenantID string) {
	if s.Catalog != nil {
		s.Catalog.Invalidate(tenantID)
	}
}
