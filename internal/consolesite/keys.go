package consolesite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// Audit kinds of the keys page (package audit's, which the dashboard
// writes too); the actor is the member's email.
const (
	KindKeyCreated = audit.KindKeyCreated
	KindKeyRevoked = audit.KindKeyRevoked
	KindKeyRolled  = audit.KindKeyRolled
)

// keyAuditKinds are the kinds the keys page lists, and keyAuditEntries how
// many of them, newest first.
var keyAuditKinds = []string{KindKeyCreated, KindKeyRevoked, KindKeyRolled}

const keyAuditEntries = 20

// keyExpiries are the expiries a member may give a new key, by form
// value: days from now, 0 for none.
var keyExpiries = []struct {
	web.ConsoleChoice
	days int
}{
	{web.ConsoleChoice{Value: "none", Label: "Never"}, 0},
	{web.ConsoleChoice{Value: "30", Label: "In 30 days"}, 30},
	{web.ConsoleChoice{Value: "90", Label: "In 90 days"}, 90},
}

// graces are how long a rolled key keeps working, by form value.
var graces = []struct {
	web.ConsoleChoice
	d time.Duration
}{
	{web.ConsoleChoice{Value: "1h", Label: "1 hour"}, time.Hour},
	{web.ConsoleChoice{Value: "24h", Label: "24 hours"}, 24 * time.Hour},
	{web.ConsoleChoice{Value: "7d", Label: "7 days"}, 7 * 24 * time.Hour},
}

// registerKeys mounts the keys page on the console's group: both roles
// may manage keys.
func (s *Site) registerKeys(g *echo.Group) {
	g.GET("/keys", s.page(s.keys))
	g.POST("/keys", s.page(s.createKey))
	g.GET("/keys/:key/revoke", s.page(s.confirmRevoke))
	g.POST("/keys/:key/revoke", s.page(s.revokeKey))
	g.GET("/keys/:key/roll", s.page(s.confirmRoll))
	g.POST("/keys/:key/roll", s.page(s.rollKey))
}

// keys lists the tenant's keys, the form that makes one, and the last key
// changes of its audit log.
func (s *Site) keys(c echo.Context, m *member) error {
	flash := ""
	if c.QueryParam("done") == "revoked" {
		flash = "The key is revoked: the API refuses it from now on."
	}
	return s.renderKeys(c, m, http.StatusOK, web.ConsoleKeyForm{Kind: "test", Expires: "none"}, nil, flash)
}

// createKey makes a key of the form's name, kind and expiry, shown once on
// the answer. A live key waits for the member's confirmed address.
func (s *Site) createKey(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	f := web.ConsoleKeyForm{Name: strings.TrimSpace(c.FormValue("name")), Kind: c.FormValue("kind"), Expires: c.FormValue("expires")}
	expiresAt, expiryOK := s.keyExpiry(f.Expires)
	switch {
	case f.Kind != "live" && f.Kind != "test":
		f.Error = "A key is live or test."
	case tenant.ValidateKeyName(f.Name) != nil:
		f.Error = fmt.Sprintf("Name the key in at most %d characters of text, or leave the name empty.", tenant.MaxKeyNameLen)
	case !expiryOK:
		f.Error = "A key expires never, in 30 days or in 90 days."
	}
	if f.Error != "" {
		return s.renderKeys(c, m, http.StatusBadRequest, f, nil, "")
	}
	if f.Kind == "live" && m.ConfirmedAt == nil {
		f.Error = "Confirm your email address first: live keys wait for it (the link is in the mail we sent to " + m.Email + "). Test keys work now."
		return s.renderKeys(c, m, http.StatusForbidden, f, nil, "")
	}
	raw, k, err := s.newKey(ctx, m.TenantID, f.Name, f.Kind == "test", expiresAt)
	if err != nil {
		return s.fail(c, err)
	}
	var expires any
	if k.ExpiresAt != nil {
		expires = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	s.record(ctx, m, KindKeyCreated, map[string]any{"key_id": k.ID, "test": k.Test, "name": k.Name, "expires_at": expires})
	s.log.InfoContext(ctx, "console key created", "tenant_id", m.TenantID, "key_id", k.ID, "member_id", m.ID)
	fresh := &web.ConsoleNewKey{Kind: f.Kind, Value: raw}
	return s.renderKeys(c, m, http.StatusOK, web.ConsoleKeyForm{Kind: f.Kind, Expires: "none"}, fresh, "Key "+cmp.Or(k.Name, k.ID)+" is made.")
}

// keyExpiry is the expiry the form's value (none, 30 or 90 days) gives a
// key made now; ok is false for any other value.
func (s *Site) keyExpiry(value string) (at *time.Time, ok bool) {
	for _, e := range keyExpiries {
		if e.Value != value {
			continue
		}
		if e.days == 0 {
			return nil, true
		}
		t := s.cfg.Now().AddDate(0, 0, e.days)
		return &t, true
	}
	return nil, false
}

// newKey makes and stores a key of the tenant (tenant.NewKey, as the
// dashboard makes them) and returns its value, to show once.
func (s *Site) newKey(ctx context.Context, tenantID, name string, test bool, expiresAt *time.Time) (string, tenant.Key, error) {
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		return "", tenant.Key{}, fmt.Errorf("new key of tenant %s: %w", tenantID, err)
	}
	k.TenantID, k.Name, k.ExpiresAt = tenantID, name, expiresAt
	if k, err = s.cfg.Tenants.CreateKey(ctx, k); err != nil {
		return "", tenant.Key{}, fmt.Errorf("store new key of tenant %s: %w", tenantID, err)
	}
	return raw, k, nil
}

// memberKey returns the member's tenant's key named in the path, or
// answers: a key of another tenant, or none, is a 404 page; one revoked
// or expired, a 409 page (there is nothing to revoke or roll). When ok is
// false the page is answered, and err is what answering it returned.
func (s *Site) memberKey(c echo.Context, m *member) (tenant.Key, bool, error) {
	keys, err := s.cfg.Tenants.Keys(c.Request().Context(), m.TenantID)
	if err != nil {
		return tenant.Key{}, false, s.fail(c, err)
	}
	for _, k := range keys {
		if k.ID != c.Param("key") {
			continue
		}
		if k.RevokedAt != nil || k.Expired(s.cfg.Now()) {
			return k, false, s.message(c, http.StatusConflict, web.ConsoleMessageView{Title: "This key no longer works",
				Message: "It was revoked, or it expired: there is nothing to revoke or roll.", Link: "/console/keys", LinkLabel: "Your keys"})
		}
		return k, true, nil
	}
	return tenant.Key{}, false, s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found",
		Message: "Your workspace has no such key.", Link: "/console/keys", LinkLabel: "Your keys"})
}

// confirmRevoke asks before revoking: it cannot be undone.
func (s *Site) confirmRevoke(c echo.Context, m *member) error {
	k, ok, err := s.memberKey(c, m)
	if !ok {
		return err
	}
	return s.renderKeyConfirm(c, m, http.StatusOK, web.ConsoleKeyConfirmView{Roll: false, Key: s.keyRow(k)})
}

// revokeKey revokes the key (asked first by confirmRevoke).
func (s *Site) revokeKey(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	k, ok, err := s.memberKey(c, m)
	if !ok {
		return err
	}
	if k, err = s.cfg.Tenants.RevokeKey(ctx, k.ID); err != nil {
		return s.fail(c, err)
	}
	s.changed("key", k.Prefix)
	s.record(ctx, m, KindKeyRevoked, map[string]any{"key_id": k.ID, "name": k.Name})
	s.log.InfoContext(ctx, "console key revoked", "tenant_id", m.TenantID, "key_id", k.ID, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/keys?done=revoked")
}

// confirmRoll asks before rolling, with the grace period to choose.
func (s *Site) confirmRoll(c echo.Context, m *member) error {
	k, ok, err := s.memberKey(c, m)
	if !ok {
		return err
	}
	return s.renderKeyConfirm(c, m, http.StatusOK, web.ConsoleKeyConfirmView{Roll: true, Key: s.keyRow(k), Grace: graces[0].Value})
}

// rollKey makes a new key of the old one's name and kind, shown once, and
// brings the old one's expiry forward to the end of the grace chosen (never
// back: a key that expires sooner keeps its expiry). The new key is made
// first, so that a failure leaves the old key as it was.
func (s *Site) rollKey(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	old, ok, err := s.memberKey(c, m)
	if !ok {
		return err
	}
	v := web.ConsoleKeyConfirmView{Roll: true, Key: s.keyRow(old), Grace: c.FormValue("grace")}
	var grace time.Duration
	for _, g := range graces {
		if g.Value == v.Grace {
			grace = g.d
		}
	}
	if grace == 0 {
		v.Error, v.Grace = "Choose how long the old key keeps working: 1 hour, 24 hours or 7 days.", graces[0].Value
		return s.renderKeyConfirm(c, m, http.StatusBadRequest, v)
	}
	if !old.Test && m.ConfirmedAt == nil {
		v.Error = "Confirm your email address first: live keys wait for it."
		return s.renderKeyConfirm(c, m, http.StatusForbidden, v)
	}
	raw, k, err := s.newKey(ctx, m.TenantID, old.Name, old.Test, nil)
	if err != nil {
		return s.fail(c, err)
	}
	if old, err = s.cfg.Tenants.ShortenKeyExpiry(ctx, m.TenantID, old.ID, s.cfg.Now().Add(grace)); err != nil {
		return s.fail(c, err)
	}
	s.changed("key", old.Prefix)
	s.record(ctx, m, KindKeyRolled, map[string]any{"key_id": k.ID, "old_key_id": old.ID, "name": k.Name, "test": k.Test,
		"grace": v.Grace, "old_expires_at": old.ExpiresAt.UTC().Format(time.RFC3339)})
	s.log.InfoContext(ctx, "console key rolled", "tenant_id", m.TenantID, "key_id", k.ID, "old_key_id", old.ID, "member_id", m.ID)
	fresh := &web.ConsoleNewKey{Kind: kindOf(k), Value: raw}
	flash := "Key " + cmp.Or(k.Name, k.ID) + " is rolled: the old one works until " + when(*old.ExpiresAt) + "."
	return s.renderKeys(c, m, http.StatusOK, web.ConsoleKeyForm{Kind: "test", Expires: "none"}, fresh, flash)
}

// renderKeys renders the keys page with form f, and fresh, a key just
// made, shown once.
func (s *Site) renderKeys(c echo.Context, m *member, status int, f web.ConsoleKeyForm, fresh *web.ConsoleNewKey, flash string) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	keys, err := s.cfg.Tenants.Keys(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	entries, err := s.cfg.Audit.List(ctx, audit.Filter{TenantID: m.TenantID, Kinds: keyAuditKinds, Limit: keyAuditEntries})
	if err != nil {
		return s.fail(c, err)
	}
	for _, e := range keyExpiries {
		f.Expiries = append(f.Expiries, e.ConsoleChoice)
	}
	v := web.ConsoleKeysView{
		Chrome:  web.ConsoleChrome{Title: "Keys", Section: "keys", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: flash},
		Form:    f,
		NewKey:  fresh,
		CanLive: m.ConfirmedAt != nil,
	}
	for _, k := range keys {
		v.Keys = append(v.Keys, s.keyRow(k))
	}
	for _, e := range entries {
		v.Audit = append(v.Audit, auditRow(e))
	}
	return render(c, status, web.ConsoleKeys(v))
}

// renderKeyConfirm renders the revoke or roll page.
func (s *Site) renderKeyConfirm(c echo.Context, m *member, status int, v web.ConsoleKeyConfirmView) error {
	t, err := s.cfg.Tenants.Tenant(c.Request().Context(), m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	title := "Revoke the key “" + v.Key.Name + "”?"
	if v.Roll {
		title = "Roll the key “" + v.Key.Name + "”?"
		for _, g := range graces {
			v.Graces = append(v.Graces, g.ConsoleChoice)
		}
	}
	v.Chrome = web.ConsoleChrome{Title: title, Section: "keys", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf}
	return render(c, status, web.ConsoleKeyConfirm(v))
}

// keyRow is how the keys page lists a key.
func (s *Site) keyRow(k tenant.Key) web.ConsoleKeyRow {
	row := web.ConsoleKeyRow{ID: k.ID, Name: cmp.Or(k.Name, "—"), Kind: kindOf(k), Prefix: k.Prefix + "…",
		Created: when(k.CreatedAt), Expires: "never", LastUsed: "never", Status: "active", Active: true}
	if k.ExpiresAt != nil {
		row.Expires = when(*k.ExpiresAt)
	}
	if k.LastUsedAt != nil {
		row.LastUsed = when(*k.LastUsedAt)
	}
	switch {
	case k.RevokedAt != nil:
		row.Status, row.Active = "revoked", false
	case k.Expired(s.cfg.Now()):
		row.Status, row.Active = "expired", false
	}
	return row
}

// auditRow is how the keys page lists an audit entry: the key by its
// name when the entry says it, else by its ID.
func auditRow(e audit.Entry) web.ConsoleAuditRow {
	key, _ := e.Detail["key_id"].(string)
	if name, _ := e.Detail["name"].(string); name != "" {
		key = name + " (" + key + ")"
	}
	return web.ConsoleAuditRow{At: when(e.At), Actor: e.Actor, Kind: e.Kind, Key: cmp.Or(key, "—")}
}

func kindOf(k tenant.Key) string {
	if k.Test {
		return "test"
	}
	return "live"
}

// when is how the console writes a time.
func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// record writes an audit entry by the member. A failure is logged and does
// not undo the change it describes: the change committed first.
func (s *Site) record(ctx context.Context, m *member, kind string, detail map[string]any) {
	err := s.cfg.Audit.Record(ctx, audit.Entry{TenantID: m.TenantID, Actor: m.Email, Kind: kind, Detail: detail})
	if err != nil {
		s.log.ErrorContext(ctx, "audit entry not written", "kind", kind, "tenant_id", m.TenantID, "err", err)
	}
}

// changed drops what changed from this instance's caches at once (the
// others hear of it from PostgreSQL within a second).
func (s *Site) changed(kind, id string) {
	if s.cfg.Changed != nil {
		s.cfg.Changed(kind, id)
	}
}

// errNoAudit is New's answer to a Config without an audit log.
var errNoAudit = errors.New("console: the audit log is required")
