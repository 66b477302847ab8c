package pgstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/tenant"
)

// CreateKey implements tenant.Store.
func (s *Tenants) CreateKey(ctx context.Context, k tenant.Key) (tenant.Key, error) {
	if err := tenant.ValidateKeyName(k.Name); err != nil {
		return tenant.Key{}, fmt.Errorf("create key: %w", err)
	}
	uid, ok := uuidOf(k.TenantID)
	if !ok {
		return tenant.Key{}, fmt.Errorf("create key: tenant %s: %w", k.TenantID, tenant.ErrNotFound)
	}
	row, err := s.q.CreateKey(ctx, keyParams(k, uid))
	if err != nil {
		return tenant.Key{}, fmt.Errorf("create key for tenant %s: %w", k.TenantID, dbErr(err, tenantErrors))
	}
	return keyOf(row), nil
}

func keyParams(k tenant.Key, tenantID pgtype.UUID) sqlcgen.CreateKeyParams {
	return sqlcgen.CreateKeyParams{ID: k.ID, TenantID: tenantID, Prefix: k.Prefix, Hash: k.Hash, Test: k.Test,
		Name: k.Name, ExpiresAt: timestamptzOf(k.ExpiresAt)}
}

// KeyByPrefix implements tenant.Store.
func (s *Tenants) KeyByPrefix(ctx context.Context, prefix string) (tenant.Key, error) {
	row, err := s.q.KeyByPrefix(ctx, prefix)
	if err != nil {
		return tenant.Key{}, fmt.Errorf("key by prefix: %w", dbErr(err, tenantErrors))
	}
	return keyOf(row), nil
}

// Keys implements tenant.Store.
func (s *Tenants) Keys(ctx context.Context, tenantID string) ([]tenant.Key, error) {
	uid, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListKeys(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("list keys of tenant %s: %w", tenantID, dbErr(err, tenantErrors))
	}
	out := make([]tenant.Key, len(rows))
	for i, r := range rows {
		out[i] = keyOf(r)
	}
	return out, nil
}

// RevokeKey implements tenant.Store.
func (s *Tenants) RevokeKey(ctx context.Context, id string) (tenant.Key, error) {
	row, err := s.q.RevokeKey(ctx, id)
	if err != nil {
		return tenant.Key{}, fmt.Errorf("revoke key %s: %w", id, dbErr(err, tenantErrors))
	}
	return keyOf(row), nil
}

// ShortenKeyExpiry sets the expiry of the tenant's key id to at, unless it
// expires earlier already, and returns the key. A key of another tenant,
// or revoked, is tenant.ErrNotFound.
func (s *Tenants) ShortenKeyExpiry(ctx context.Context, tenantID, id string, at time.Time) (tenant.Key, error) {
	uid, ok := uuidOf(tenantID)
	if !ok {
		return tenant.Key{}, fmt.Errorf("shorten expiry of key %s: %w", id, tenant.ErrNotFound)
	}
	row, err := s.q.ShortenKeyExpiry(ctx, sqlcgen.ShortenKeyExpiryParams{ID: id, TenantID: uid, ExpiresAt: pgtype.Timestamptz{Time: at, Valid: true}})
	if err != nil {
		return tenant.Key{}, fmt.Errorf("shorten expiry of key %s: %w", id, dbErr(err, tenantErrors))
	}
	return keyOf(row), nil
}

// TouchKeys implements tenant.Store in one statement.
func (s *Tenants) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	if len(lastUsed) == 0 {
		return nil
	}
	p := sqlcgen.TouchKeysParams{Ids: make([]string, 0, len(lastUsed)), Ats: make([]pgtype.Timestamptz, 0, len(lastUsed))}
	for id := range lastUsed {
		p.Ids = append(p.Ids, id)
	}
	sort.Strings(p.Ids)
	for _, id := range p.Ids {
		p.Ats = append(p.Ats, pgtype.Timestamptz{Time: lastUsed[id], Valid: true})
	}
	if _, err := s.q.TouchKeys(ctx, p); err != nil {
		return fmt.Errorf("touch %d keys: %w", len(lastUsed), dbErr(err, tenantErrors))
	}
	return nil
}

// keyOf turns a row into a tenant.Key.
func keyOf(r sqlcgen.ApiKey) tenant.Key {
	return tenant.Key{
		ID:         r.ID,
		TenantID:   r.TenantID.String(),
		Prefix:     r.Prefix,
		Hash:       r.Hash,
		Test:       r.Test,
		Name:       r.Name,
		ExpiresAt:  timePtrOf(r.ExpiresAt),
		CreatedAt:  timeOf(r.CreatedAt),
		RevokedAt:  timePtrOf(r.RevokedAt),
		LastUsedAt: timePtrOf(r.LastUsedAt),
	}
}
