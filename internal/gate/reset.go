package gate

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/internal/policy"
)

// Reset clears one subject's counter of one of a tenant's policies, as if
// the subject had never been counted: for a concurrency policy, it drops
// the subject's leases (their holders learn it when they renew or
// release). A test key resets the sandbox's counter, a live key the live
// one, as checks count them. It returns the counter's key, a digest that
// names the subject without holding it, for the audit log.
//
// Errors: a *policy.NotFoundError for a policy the tenant does not have, a
// *policy.FieldError for a subject that is missing or too long, or for a
// policy of scope global (it counts no subject), counter.ErrUnavailable.
func (g *Gate) Reset(ctx context.Context, tenantID string, test bool, name, subject string) (string, error) {
	set, err := g.cfg.Policies.For(ctx, tenantID)
	if err != nil {
		return "", fmt.Errorf("policies of tenant %s: %w", tenantID, err)
	}
	p, ok := set.Lookup(name)
	if !ok && set.Stale() {
		return "", errStalePolicy(tenantID, name)
	}
	if !ok {
		return "", &policy.NotFoundError{Policy: name}
	}
	if p.Scope == policy.ScopeGlobal {
		return "", &policy.FieldError{Field: "subject",
			Reason: fmt.Sprintf(`policy %q has scope "global": it counts no subject, so it has no subject's counter to reset`, p.Name)}
	}
	if reason := subjectFault(p, subject); reason != "" {
		return "", &policy.FieldError{Field: "subject", Reason: reason}
	}
	var buf [80]byte
	key := string(g.appendPolicyKey(buf[:0], tenantID, test, p, subject))
	work, err := g.hold(ctx, tenantID)
	if err != nil {
		return "", err
	}
	defer work.release()
	if err := g.storeCall(ctx, opReset, func() error { return g.cfg.Store.Reset(ctx, tenantID, key) }); err != nil {
		return "", fmt.Errorf("reset %s of tenant %s: %w", p.Name, tenantID, err)
	}
	return key, nil
}
