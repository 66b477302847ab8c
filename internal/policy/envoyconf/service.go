package envoyconf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Service is what the tenant API and the command line call to change a
// tenant's domains: the file read (Parse) before it is stored, and every
// change also dropping the tenant's Domains from this instance's Catalog,
// so that the instance that took a change applies it to the very next
// request. Other instances apply it when the database's change notification
// reaches them. A change that failed invalidates too: it may have committed
// before the failure (a cancelled COMMIT), and a needless reload costs one
// query.
//
// Every change that succeeds is also written to the audit log through
// Audit, when set.
type Service struct {
	Store   Store
	Catalog *Catalog
	// Audit records one change: kind is envoy_domain_put or
	// envoy_domain_deleted. A failure to audit is the caller's to log; the
	// change stands.
	Audit func(ctx context.Context, tenantID, kind string, detail map[string]any)
}

// The kinds of the audit entries Service writes.
const (
	KindDomainPut     = "envoy_domain_put"
	KindDomainDeleted = "envoy_domain_deleted"
)

// Put creates or replaces a tenant's domain with source, as uploaded. The
// domain must be valid (ValidateDomain: a *policy.FieldError), the file
// must parse for it (Parse: an *Error, with its line) and be UTF-8 text,
// and the tenant's domains must stay within MaxDomains and MaxTenantRules
// (Holding.Admit). It returns the domain as stored, without its source.
func (s Service) Put(ctx context.Context, tenantID, domain string, source []byte) (Domain, error) {
	if err := ValidateDomain(domain); err != nil {
		return Domain{}, err
	}
	c, err := Parse(domain, source)
	if err != nil {
		return Domain{}, err
	}
	if err := checkStorable(source); err != nil {
		return Domain{}, err
	}
	d, err := s.Store.PutDomain(ctx, tenantID, Domain{Name: domain, Source: source, Rules: len(c.Rules)})
	s.changed(tenantID)
	if err == nil {
		sum := sha256.Sum256(source)
		s.audit(ctx, tenantID, KindDomainPut, map[string]any{
			"domain": domain, "rules": d.Rules, "bytes": len(source), "sha256": hex.EncodeToString(sum[:]),
		})
	}
	return d, err
}

// Get returns a tenant's domain with its source as uploaded.
func (s Service) Get(ctx context.Context, tenantID, domain string) (Domain, error) {
	return s.Store.GetDomain(ctx, tenantID, domain)
}

// List returns a tenant's domains without their sources, sorted by name.
func (s Service) List(ctx context.Context, tenantID string) ([]Domain, error) {
	return s.Store.ListDomains(ctx, tenantID)
}

// Delete deletes a tenant's domain: a *NotFoundError when it has none of
// that name.
func (s Service) Delete(ctx context.Context, tenantID, domain string) error {
	err := s.Store.DeleteDomain(ctx, tenantID, domain)
	s.changed(tenantID)
	if err == nil {
		s.audit(ctx, tenantID, KindDomainDeleted, map[string]any{"domain": domain})
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
