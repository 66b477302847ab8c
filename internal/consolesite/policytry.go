package consolesite

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/web"
)

// Counters is what a policy's page asks of the counters the API counts in
// (*gate.Gate): Try peeks a check of one policy without counting, Reset
// unlocks a subject (clears its counter), as the dashboard's unlock form.
type Counters interface {
	Try(ctx context.Context, tenantID string, test bool, name, subject string, cost int64) (gate.Verdict, error)
	Reset(ctx context.Context, tenantID string, test bool, name, subject string) (string, error)
}

// registerPolicyCounters mounts the "Try it" and "Unlock a subject" forms
// of a policy's page. Both post (a subject is kept out of addresses and
// their logs); trying counts nothing.
func (s *Site) registerPolicyCounters(g *echo.Group) {
	g.POST("/policies/:name/try", s.page(s.tryPolicy))
	g.POST("/policies/:name/unlock", s.page(s.unlockSubject))
}

// counterMode reads the form's mode: the live counters, or the sandbox's
// (test keys'); ok is false for anything else.
func counterMode(c echo.Context) (mode string, test, ok bool) {
	switch mode = c.FormValue("mode"); mode {
	case "live", "":
		return "live", false, true
	case "test":
		return "test", true, true
	}
	return mode, false, false
}

// tryPolicy answers the policy's "Try it" form: what a check in mode peek
// of the subject at the cost would get now, and the RateLimit headers the
// API would give it. Nothing is counted.
func (s *Site) tryPolicy(c echo.Context, m *member) error {
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	f := web.ConsoleTryForm{Subject: c.FormValue("subject"), Cost: strings.TrimSpace(c.FormValue("cost"))}
	mode, test, modeOK := counterMode(c)
	f.Mode = mode
	cost, costErr := strconv.ParseInt(f.Cost, 10, 64)
	switch {
	case !modeOK:
		f.Error, f.ErrorField = "Not tried: a counter is live or test (the sandbox's).", "mode"
	case f.Cost == "":
		cost = 1
	case costErr != nil:
		f.Error, f.ErrorField = "Not tried: cost must be a whole number.", "cost"
	}
	if f.Error != "" {
		return s.renderPolicyEdit(c, m, http.StatusBadRequest, policyForm(p), &f, nil)
	}
	v, err := s.cfg.Counters.Try(c.Request().Context(), m.TenantID, test, p.Name, f.Subject, cost)
	if status, msg, field, handled := s.counterFault(c, p.Name, err); handled {
		f.Error, f.ErrorField = "Not tried: "+msg+".", field
		return s.renderPolicyEdit(c, m, status, policyForm(p), &f, nil)
	} else if err != nil {
		return s.fail(c, err)
	}
	f.Result = tryResult(v)
	return s.renderPolicyEdit(c, m, http.StatusOK, policyForm(p), &f, nil)
}

// tryResult is how the page shows a Try verdict.
func tryResult(v gate.Verdict) *web.ConsoleTryResult {
	it := v.Items[0]
	r := &web.ConsoleTryResult{Allowed: it.Allowed, Limit: strconv.FormatInt(it.Limit, 10),
		Remaining: strconv.FormatInt(it.Remaining, 10), Reset: when(it.ResetAt), Retry: "—", Shadow: it.Shadow}
	if !it.Allowed {
		r.Retry = strconv.FormatInt(gate.RetrySeconds(it.RetryAfter), 10) + " s"
	}
	rl := v.RateLimit()
	if rl.Policy != "" {
		r.Headers = append(r.Headers, "RateLimit-Policy: "+rl.Policy, "RateLimit: "+rl.Fields)
	}
	if rl.RetryAfter > 0 {
		r.Headers = append(r.Headers, "Retry-After: "+strconv.FormatInt(rl.RetryAfter, 10))
	}
	return r
}

// unlockSubject resets the subject's counter of the policy (a
// concurrency policy's leases), live or the sandbox's, through the gate as
// DELETE /v1/policies/{name}/subjects/{subject} does, and audits it with
// the member's email and the counter's key, never the subject.
func (s *Site) unlockSubject(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	f := web.ConsoleUnlockForm{Subject: c.FormValue("subject")}
	mode, test, modeOK := counterMode(c)
	f.Mode = mode
	if !modeOK {
		f.Error, f.ErrorField = "Not unlocked: a counter is live or test (the sandbox's).", "mode"
		return s.renderPolicyEdit(c, m, http.StatusBadRequest, policyForm(p), nil, &f)
	}
	key, err := s.cfg.Counters.Reset(ctx, m.TenantID, test, p.Name, f.Subject)
	if status, msg, field, handled := s.counterFault(c, p.Name, err); handled {
		f.Error, f.ErrorField = "Not unlocked: "+msg+".", field
		return s.renderPolicyEdit(c, m, status, policyForm(p), nil, &f)
	} else if err != nil {
		return s.fail(c, err)
	}
	s.record(ctx, m, audit.KindCounterReset, map[string]any{"policy": p.Name, "subject_key": key, "sandbox": test})
	s.log.InfoContext(ctx, "console subject unlocked", "tenant_id", m.TenantID, "policy", p.Name, "sandbox", test, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/policies/"+url.PathEscape(p.Name)+"?done=unlocked")
}

// counterFault words an error of Try or Reset the member can act on: a
// fault of theirs (400, with the field it names) or a counter store that
// did not answer (503, logged). handled is false for any other error.
func (s *Site) counterFault(c echo.Context, name string, err error) (status int, msg, field string, handled bool) {
	if f, reason, ok := fault.Of(err); ok {
		if f == "" {
			return http.StatusBadRequest, reason, "", true
		}
		return http.StatusBadRequest, f + " " + reason, f, true
	}
	if errors.Is(err, gate.ErrStoreUnavailable) || errors.Is(err, gate.ErrBusy) || errors.Is(err, gate.ErrUnavailable) {
		s.log.WarnContext(c.Request().Context(), "console counter call failed", "policy", name, "err", err)
		return http.StatusServiceUnavailable, "the counter store did not answer in time, and nothing was done. Try again in a moment", "", true
	}
	return 0, "", "", false
}
