package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// createKey makes a key for the tenant, named and expiring when the form
// says so (by tenant.ParseKeyExpiry's rules, as `tollgate keys create
// --expires` reads them), and shows it, this once. A mistake is shown on
// the form, as typed.
func (d *Dashboard) createKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	f := web.KeyForm{Mode: c.FormValue("mode"), Name: c.FormValue("name"), ExpiresAt: strings.TrimSpace(c.FormValue("expires_at"))}
	var test bool
	switch f.Mode {
	case "live", "":
		f.Mode = "live"
	case "test":
		test = true
	default:
		return badRequest("A key's mode is live or test.")
	}
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("keys of tenant %s: %w", id, err)
	}
	err := tenant.ValidateKeyName(f.Name)
	var expiresAt *time.Time
	if err == nil {
		expiresAt, err = tenant.ParseKeyExpiry(f.ExpiresAt, d.now())
	}
	if field, reason, ok := fault.Of(err); ok {
		v, err := d.tenantView(ctx, s, id)
		if err != nil {
			return err
		}
		f.Action, f.Error, f.ErrorField = v.KeyForm.Action, "Not created: "+field+" "+reason+".", field
		v.KeyForm = f
		return render(c, http.StatusBadRequest, web.Tenant(v))
	}
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		return fmt.Errorf("new key of tenant %s: %w", id, err)
	}
	k.TenantID, k.Name, k.ExpiresAt = id, f.Name, expiresAt
	if k, err = d.cfg.Tenants.CreateKey(ctx, k); err != nil {
		return fmt.Errorf("store new key of tenant %s: %w", id, err)
	}
	var expires any
	if k.ExpiresAt != nil {
		expires = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	d.record(ctx, s, id, KindKeyCreated, map[string]any{"key_id": k.ID, "test": k.Test, "name": k.Name, "expires_at": expires})
	d.log.InfoContext(ctx, "key created", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	v, err := d.tenantView(ctx, s, id)
	if err != nil {
		return err
	}
	v.NewKey = &web.NewKey{ID: k.ID, Raw: raw, Mode: f.Mode, Name: k.Name, Expires: whenPtr(k.ExpiresAt)}
	return render(c, http.StatusOK, web.Tenant(v))
}

// tenantKey returns the tenant's key keyID: a page error when the tenant
// has no such key.
func (d *Dashboard) tenantKey(ctx context.Context, id, keyID string) (tenant.Key, error) {
	keys, err := d.cfg.Tenants.Keys(ctx, id)
	if err != nil {
		return tenant.Key{}, fmt.Errorf("keys of tenant %s: %w", id, err)
	}
	for _, k := range keys {
		if k.ID == keyID {
			return k, nil
		}
	}
	return tenant.Key{}, notFound("This tenant has no key " + keyID + ".")
}

// confirmRevokeKey asks before revoking one of the tenant's keys: revoking
// cannot be undone. The page's button posts to revokeKey.
func (d *Dashboard) confirmRevokeKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, keyID := c.Param("id"), c.Param("key")
	t, err := d.cfg.Tenants.Tenant(ctx, id)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", id, err)
	}
	k, err := d.tenantKey(ctx, id, keyID)
	if err != nil {
		return err
	}
	if k.RevokedAt != nil {
		return &pageError{http.StatusConflict, "Already revoked", "Key " + k.ID + " was already revoked at " + when(*k.RevokedAt) + ": there is nothing to do."}
	}
	row := keyRows(id, []tenant.Key{k}, d.now())[0]
	v := web.ConfirmView{
		Chrome:     d.chrome(s, "Revoke key "+k.ID+" of "+t.Name+"?", "tenants"),
		TenantName: t.Name, TenantHref: "/admin/tenants/" + id,
		Facts: []web.KV{
			{Key: "Key", Value: row.Display}, {Key: "Key ID", Value: k.ID}, {Key: "Name", Value: cmp.Or(k.Name, "unnamed")},
			{Key: "Mode", Value: row.Mode}, {Key: "Created", Value: row.Created}, {Key: "Last used", Value: row.LastUsed},
		},
		Consequence: "From now on the API refuses this key with 401, on every instance within a second. This cannot be undone: the tenant's servers that use it need another key.",
		Action:      row.RevokeAction, Button: "Revoke key " + k.ID,
		CancelHref: "/admin/tenants/" + id + "#keys-h",
	}
	if row.Expires != "" {
		v.Facts = append(v.Facts, web.KV{Key: "Expires", Value: row.Expires})
	}
	return render(c, http.StatusOK, web.Confirm(v))
}

// revokeKey revokes one of the tenant's keys (asked first by
// confirmRevokeKey).
func (d *Dashboard) revokeKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, keyID := c.Param("id"), c.Param("key")
	if _, err := d.tenantKey(ctx, id, keyID); err != nil {
		return err
	}
	k, err := d.cfg.Tenants.RevokeKey(ctx, keyID)
	if err != nil {
		return fmt.Errorf("revoke key %s of tenant %s: %w", keyID, id, err)
	}
	d.changed("key", k.Prefix)
	d.record(ctx, s, id, KindKeyRevoked, map[string]any{"key_id": k.ID})
	d.log.InfoContext(ctx, "key revoked", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=revoked#top")
}
