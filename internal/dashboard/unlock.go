package dashboard

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/web"
)

// unlockForm is the empty form that unlocks a subject of one of pols, the
// tenant's policies that count subjects.
func (d *Dashboard) unlockForm(tenantID string, pols []policy.Policy) web.UnlockForm {
	f := web.UnlockForm{Action: "/admin/tenants/" + tenantID + "/subjects/reset", Mode: "live"}
	if d.cfg.Counters == nil {
		f.Unavailable = "This dashboard was started without the counter store, so it cannot unlock subjects: `tollgate serve` wires it."
		return f
	}
	for _, p := range pols {
		if p.Scope == policy.ScopeSubject {
			f.Policies = append(f.Policies, web.Option{Value: p.Name, Label: p.Name})
		}
	}
	return f
}

// unlockSubject resets one subject's counter of one of the tenant's
// policies (its leases, for a concurrency policy), live or the sandbox's,
// through the gate as DELETE /v1/policies/{name}/subjects/{subject} does,
// and audits it with the admin and the counter's key, never the subject.
// A mistake is answered on the form in the gate's words; a store that does
// not answer is a 503 on the form, nothing reset.
func (d *Dashboard) unlockSubject(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	if d.cfg.Counters == nil {
		return notFound("This dashboard was started without the counter store, so it cannot unlock subjects.")
	}
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("unlock a subject of tenant %s: %w", id, err)
	}
	name, subject, mode := c.FormValue("policy"), c.FormValue("subject"), c.FormValue("mode")
	var test bool
	switch mode {
	case "live", "":
		mode = "live"
	case "test":
		test = true
	default:
		return badRequest("A counter is live or test (the sandbox's).")
	}
	key, err := d.cfg.Counters.Reset(ctx, id, test, name, subject)
	status, msg := http.StatusBadRequest, ""
	field, reason, isFault := fault.Of(err)
	var nf *policy.NotFoundError
	switch {
	case errors.As(err, &nf):
		field, msg = "policy", nf.Error()
	case isFault:
		msg = field + " " + reason
	case errors.Is(err, gate.ErrStoreUnavailable), errors.Is(err, gate.ErrBusy), errors.Is(err, gate.ErrUnavailable):
		d.log.WarnContext(ctx, "subject not unlocked", "tenant_id", id, "policy", name, "err", err)
		status, msg = http.StatusServiceUnavailable, "the counter store did not answer in time, and nothing was reset. Try again in a moment"
	case err != nil:
		return fmt.Errorf("unlock a subject of policy %s of tenant %s: %w", name, id, err)
	}
	if msg != "" {
		v, err := d.tenantView(ctx, s, id)
		if err != nil {
			return err
		}
		f := &v.Unlock
		f.Subject, f.Mode, f.Error, f.ErrorField = subject, mode, "Not unlocked: "+msg+".", field
		for i := range f.Policies {
			f.Policies[i].Selected = f.Policies[i].Value == name
		}
		return render(c, status, web.Tenant(v))
	}
	d.record(ctx, s, id, audit.KindCounterReset, map[string]any{"policy": name, "subject_key": key, "sandbox": test})
	d.log.InfoContext(ctx, "subject unlocked", "tenant_id", id, "policy", name, "sandbox", test, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=unlocked#top")
}
