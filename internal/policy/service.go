package policy

import "context"

// Service is what the tenant API calls to change policies: the Store, with
// every change also dropping the tenant's Set from this instance's Catalog,
// so that the instance that took a change applies it to the very next check.
// Other instances apply it when the database's change notification reaches
// them. A change that failed invalidates too: it may have committed before
// the failure (a cancelled COMMIT), and a needless reload costs one query.
type Service struct {
	Store
	Catalog *Catalog
}

// PutPolicy is Store.PutPolicy, then Catalog.Invalidate.
func (s Service) PutPolicy(ctx context.Context, tenantID string, p Policy) (Policy, error) {
	p, err := s.Store.PutPolicy(ctx, tenantID, p)
	s.changed(tenantID)
	return p, err
}

// DeletePolicy is Store.DeletePolicy, then Catalog.Invalidate.
func (s Service) DeletePolicy(ctx context.Context, tenantID, name string) error {
	err := s.Store.DeletePolicy(ctx, tenantID, name)
	s.changed(tenantID)
	return err
}

// PutOverride is Store.PutOverride, then Catalog.Invalidate.
func (s Service) PutOverride(ctx context.Context, tenantID, name string, o Override) (Override, error) {
	o, err := s.Store.PutOverride(ctx, tenantID, name, o)
	s.changed(tenantID)
	return o, err
}

// DeleteOverride is Store.DeleteOverride, then Catalog.Invalidate.
func (s Service) DeleteOverride(ctx context.Context, tenantID, name, pattern string) error {
	err := s.Store.DeleteOverride(ctx, tenantID, name, pattern)
	s.changed(tenantID)
	return err
}

func (s Service) changed(tenantID string) {
	if s.Catalog != nil {
		s.Catalog.Invalidate(tenantID)
	}
}
