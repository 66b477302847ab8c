package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/web"
)

// KindAdminCreated is the audit kind of an admin added from the dashboard;
// its detail names the new admin, never the password.
const KindAdminCreated = "admin_created"

// adminsView builds the list of admins with an empty form.
func (d *Dashboard) adminsView(ctx context.Context, s *signedIn) (web.AdminsView, error) {
	as, err := d.cfg.Accounts.Admins(ctx)
	if err != nil {
		return web.AdminsView{}, fmt.Errorf("admins: %w", err)
	}
	v := web.AdminsView{Chrome: d.chrome(s, "Admins", "admins"), NewAdmin: web.AdminForm{Action: "/admin/admins"}}
	for _, a := range as {
		v.Rows = append(v.Rows, web.AdminRow{Email: a.Email, Created: when(a.CreatedAt), You: a.ID == s.admin.ID})
	}
	return v, nil
}

// admins lists the admins.
func (d *Dashboard) admins(c echo.Context, s *signedIn) error {
	v, err := d.adminsView(c.Request().Context(), s)
	if err != nil {
		return err
	}
	v.Flash = flashes[c.QueryParam("done")]
	return render(c, http.StatusOK, web.Admins(v))
}

// createAdmin adds an admin as `tollgate admins create` does (admin.Create:
// the same email and password rules), the password typed twice and hashed
// within the sign-ins' bound on hashes at once, and audits who did it. A
// mistake is shown on the form with the email kept, never the passwords.
func (d *Dashboard) createAdmin(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	email, password := c.FormValue("email"), c.FormValue("password")
	field, msg := "", ""
	norm, err := admin.NormalizeEmail(email)
	switch {
	case err != nil:
		field, msg = "email", invalidWords(err)
	case admin.ValidatePassword(password) != nil:
		field, msg = "password", invalidWords(admin.ValidatePassword(password))
	case c.FormValue("password_again") != password:
		field, msg = "password_again", "the two passwords differ"
	}
	var a admin.Admin
	if field == "" {
		a, err = admin.Create(ctx, d.cfg.Accounts, d.cfg.Hasher, norm, password, d.cfg.Argon2)
		switch {
		case errors.Is(err, admin.ErrConflict):
			field, msg = "email", norm+" already has an account; change its password with `tollgate admins set-password --email "+norm+"`"
		case errors.Is(err, admin.ErrBusy):
			c.Response().Header().Set("Retry-After", "1")
			return &pageError{http.StatusServiceUnavailable, "Busy", "The server is checking many passwords at the moment: no admin was added. Try again in a second."}
		case err != nil:
			return fmt.Errorf("add admin %s: %w", norm, err)
		}
	}
	if field != "" {
		v, err := d.adminsView(ctx, s)
		if err != nil {
			return err
		}
		v.NewAdmin.Email, v.NewAdmin.Error, v.NewAdmin.ErrorField = email, "Not added: "+msg+".", field
		return render(c, http.StatusBadRequest, web.Admins(v))
	}
	d.record(ctx, s, "", KindAdminCreated, map[string]any{"admin_id": a.ID, "email": a.Email})
	d.log.InfoContext(ctx, "admin created", "new_admin_id", a.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/admins?done=admin-created#top")
}

// invalidWords is an admin.ErrInvalid error as words for the form.
func invalidWords(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+admin.ErrInvalid.Error())
}
