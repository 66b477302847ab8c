package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// EnvoyDomains is the envoyconf.Store of tenants' envoyproxy/ratelimit
// files, in the envoy_domains table. It is safe for concurrent use.
type EnvoyDomains struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var _ envoyconf.Store = (*EnvoyDomains)(nil)

// NewEnvoyDomains returns the store of domains on pool.
func NewEnvoyDomains(pool *pgxpool.Pool) *EnvoyDomains {
	return &EnvoyDomains{pool: pool, q: sqlcgen.New(pool)}
}

// PutDomain creates or replaces a domain. The tenant row stays locked until
// the write commits, so that concurrent puts cannot pass MaxDomains or
// MaxTenantRules together (the same lock PutPolicy takes: a tenant's
// writes of either kind wait for each other, which costs nothing on a path
// that is not the hot one).
func (s *EnvoyDomains) PutDomain(ctx context.Context, tenantID string, d envoyconf.Domain) (envoyconf.Domain, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return envoyconf.Domain{}, err
	}
	var row sqlcgen.UpsertEnvoyDomainRow
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if _, err := q.LockTenantEnvoyDomains(ctx, tid); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("tenant %s: %w", tenantID, policy.ErrNotFound)
		} else if err != nil {
			return err
		}
		n, err := q.CountEnvoyDomains(ctx, sqlcgen.CountEnvoyDomainsParams{TenantID: tid, Domain: d.Name})
		if err != nil {
			return err
		}
		if err := (envoyconf.Holding{Domains: int(n.Domains), Rules: int(n.Rules)}).Admit(d.Rules); err != nil {
			return err
		}
		row, err = q.UpsertEnvoyDomain(ctx, sqlcgen.UpsertEnvoyDomainParams{
			TenantID: tid, Domain: d.Name, Source: string(d.Source), Rules: int32(d.Rules),
		})
		return err
	})
	if err != nil {
		return envoyconf.Domain{}, fmt.Errorf("put envoy domain %q: %w", d.Name, dbErr(err, policyErrors))
	}
	return envoyconf.Domain{
		Name: row.Domain, Rules: int(row.Rules), Version: row.Version,
		CreatedAt: timeOf(row.CreatedAt), UpdatedAt: timeOf(row.UpdatedAt),
	}, nil
}

// GetDomain returns one domain with its source.
func (s *EnvoyDomains) GetDomain(ctx context.Context, tenantID, domain string) (envoyconf.Domain, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return envoyconf.Domain{}, err
	}
	row, err := s.q.GetEnvoyDomain(ctx, sqlcgen.GetEnvoyDomainParams{TenantID: tid, Domain: domain})
	if errors.Is(err, pgx.ErrNoRows) {
		return envoyconf.Domain{}, &envoyconf.NotFoundError{Domain: domain}
	} else if err != nil {
		return envoyconf.Domain{}, fmt.Errorf("get envoy domain %q: %w", domain, dbErr(err, policyErrors))
	}
	return envoyDomainFromRow(row), nil
}

// ListDomains returns a tenant's domains, without sources, sorted by name.
func (s *EnvoyDomains) ListDomains(ctx context.Context, tenantID string) ([]envoyconf.Domain, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ListEnvoyDomains(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("list envoy domains: %w", dbErr(err, policyErrors))
	}
	ds := make([]envoyconf.Domain, 0, len(rows))
	for _, r := range rows {
		ds = append(ds, envoyconf.Domain{
			Name: r.Domain, Rules: int(r.Rules), CreatedAt: timeOf(r.CreatedAt), UpdatedAt: timeOf(r.UpdatedAt),
		})
	}
	return ds, nil
}

// DeleteDomain deletes a domain.
func (s *EnvoyDomains) DeleteDomain(ctx context.Context, tenantID, domain string) error {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return err
	}
	n, err := s.q.DeleteEnvoyDomain(ctx, sqlcgen.DeleteEnvoyDomainParams{TenantID: tid, Domain: domain})
	if err != nil {
		return fmt.Errorf("delete envoy domain %q: %w", domain, dbErr(err, policyErrors))
	}
	if n == 0 {
		return &envoyconf.NotFoundError{Domain: domain}
	}
	return nil
}

// LoadDomains reads a tenant's domains in one statement, with the sources
// of those whose version is not in held.
func (s *EnvoyDomains) LoadDomains(ctx context.Context, tenantID string, held []int64) ([]envoyconf.Domain, error) {
	tid, err := policyTenantUUID(tenantID)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.LoadEnvoyDomains(ctx, sqlcgen.LoadEnvoyDomainsParams{TenantID: tid, Held: held})
	if err != nil {
		return nil, fmt.Errorf("load envoy domains: %w", dbErr(err, policyErrors))
	}
	ds := make([]envoyconf.Domain, 0, len(rows))
	for _, r := range rows {
		d := envoyconf.Domain{
			Name: r.Domain, Rules: int(r.Rules), Version: r.Version,
			CreatedAt: timeOf(r.CreatedAt), UpdatedAt: timeOf(r.UpdatedAt),
		}
		if !r.Held {
			d.Source = []byte(r.Source)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// envoyDomainFromRow turns an envoy_domains row into an envoyconf.Domain.
func envoyDomainFromRow(r sqlcgen.EnvoyDomain) envoyconf.Domain {
	return envoyconf.Domain{
		Name: r.Domain, Source: []byte(r.Source), Rules: int(r.Rules), Version: r.Version,
		CreatedAt: timeOf(r.CreatedAt), UpdatedAt: timeOf(r.UpdatedAt),
	}
}
