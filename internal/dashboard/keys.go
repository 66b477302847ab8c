package dashboard

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// createKey makes a key for the tenant and shows it, this once.
func (d *Dashboard) createKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	var test bool
	switch c.FormValue("mode") {
	case "live", "":
	case "test":
		test = true
	default:
		return badRequest("A key's mode is live or test.")
	}
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		return fmt.Errorf("new key of tenant %s: %w", id, err)
	}
	k.TenantID = id
	if k, err = d.cfg.Tenants.CreateKey(ctx, k); err != nil {
		return fmt.Errorf("store new key of tenant %s: %w", id, err)
	}
	d.record(ctx, s, id, KindKeyCreated, map[string]any{"key_id": k.ID, "test": k.Test})
	d.log.InfoContext(ctx, "key created", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	v, err := d.tenantView(ctx, s, id)
	if err != nil {
		return err
	}
	mode := "live"
	if test {
		mode = "test"
	}
	v.NewKey = &web.NewKey{ID: k.ID, Raw: raw, Mode: mode}
	return render(c, http.StatusOK, web.Tenant(v))
}

// revokeKey revokes one of the tenant's keys.
func (d *Dashboard) revokeKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, keyID := c.Param("id"), c.Param("key")
	keys, err := d.cfg.Tenants.Keys(ctx, id)
	if err != nil {
		return fmt.Errorf("keys of tenant %s: %w", id, err)
	}
	found := false
	for _, k := range keys {
		found = found || k.ID == keyID
	}
	if !found {
		return notFound("This tenant has no key " + keyID + ".")
	}
	k, err := d.cfg.Tenants.RevokeKey(ctx, keyID)
	if err != nil {
		return fmt.Errorf("revoke key %s of tenant %s: %w", keyID, id, err)
	}
	d.changed("key", k.Prefix)
	d.record(ctx, s, id, KindKeyRevoked, map[string]any{"key_id": k.ID})
	d.log.InfoContext(ctx, "key revoked", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=revoked")
}
