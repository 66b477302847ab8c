package dashboard

import (
	"context"
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/web"
)

// Audit kinds of the operators' acts on console members.
const (
	KindMemberDisabled = "member_disabled"
	KindMemberEnabled  = "member_enabled"
)

// Members is what the dashboard reads and changes of the tenants' console
// members (*pgstore.Members).
type Members interface {
	Members(ctx context.Context, tenantID string) ([]console.Member, error)
	SetMemberDisabled(ctx context.Context, tenantID, memberID string, disabled bool) (console.Member, error)
}

// memberRows lists a tenant's members for its page.
func memberRows(tenantID string, ms []console.Member) []web.MemberRow {
	rows := make([]web.MemberRow, 0, len(ms))
	for _, m := range ms {
		r := web.MemberRow{ID: m.ID, Email: m.Email, Role: string(m.Role), Since: when(m.CreatedAt),
			Disabled:      m.DisabledAt != nil,
			DisableAction: "/admin/tenants/" + tenantID + "/members/" + m.ID + "/disable",
			EnableAction:  "/admin/tenants/" + tenantID + "/members/" + m.ID + "/enable"}
		switch {
		case m.DisabledAt != nil:
			r.State = "disabled " + when(*m.DisabledAt)
		case m.PasswordHash == "":
			r.State = "invited"
		case m.ConfirmedAt == nil:
			r.State = "email not confirmed"
		default:
			r.State = "active"
		}
		rows = append(rows, r)
	}
	return rows
}

// disableMember disables a console member of the tenant: signed out
// everywhere at once, and kept from signing in.
func (d *Dashboard) disableMember(c echo.Context, s *signedIn) error { return d.setMember(c, s, true) }

// enableMember lets a disabled member sign in again.
func (d *Dashboard) enableMember(c echo.Context, s *signedIn) error { return d.setMember(c, s, false) }

// setMember disables or enables a member and audits who did.
func (d *Dashboard) setMember(c echo.Context, s *signedIn, disabled bool) error {
	ctx := c.Request().Context()
	id, memberID := c.Param("id"), c.Param("member")
	if d.cfg.Members == nil {
		return notFound("This dashboard was started without the console's members.")
	}
	verb, kind := "enabled", KindMemberEnabled
	if disabled {
		verb, kind = "disabled", KindMemberDisabled
	}
	m, err := d.cfg.Members.SetMemberDisabled(ctx, id, memberID, disabled)
	if errors.Is(err, console.ErrNotFound) {
		return notFound("This tenant has no console member " + memberID + ".")
	}
	if err != nil {
		return fmt.Errorf("console member %s of tenant %s not %s: %w", memberID, id, verb, err)
	}
	d.record(ctx, s, id, kind, map[string]any{"member_id": m.ID, "email": m.Email})
	d.log.InfoContext(ctx, "console member "+verb, "tenant_id", id, "member_id", m.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=member-"+verb)
}
