package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/gate"
)

// maxLeaseBody bounds a lease request's body: a policy name, a 512-byte
// subject and a ttl fit many times over.
const maxLeaseBody = 4 << 10

// registerLeases adds the lease routes and the reset route to v1. Acquiring is admitted like a
// check (the allotment counts it); releasing, renewing and resetting pass
// the ceilings without the allotment, as the policy routes do, and test
// keys may use them: a test key's leases and counters are its sandbox's.
func registerLeases(v1 *echo.Group, a *api) {
	h := leaseHandlers{api: a}
	v1.POST("/leases", h.acquire)
	v1.DELETE("/leases/:id", h.release, a.admit("leases"))
	v1.POST("/leases/:id/renew", h.renew, a.admit("leases"))
	v1.DELETE("/policies/:name/subjects/:subject", h.reset, a.admit("reset"))
}

type leaseHandlers struct {
	*api
}

// leaseBody is the body of POST /v1/leases; ttl is also the body of a
// renewal.
type leaseBody struct {
	Policy  string  `json:"policy"`
	Subject string  `json:"subject"`
	TTL     *string `json:"ttl"`
}

// leaseAnswer is the answer to POST /v1/leases: lease_id and expires_at
// only when allowed.
type leaseAnswer struct {
	Allowed      bool   `json:"allowed"`
	LeaseID      string `json:"lease_id,omitempty"`
	ExpiresAt    string `json:"expires_at,omitempty"`
	InFlight     int64  `json:"in_flight"`
	Limit        int64  `json:"limit"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Degraded     bool   `json:"degraded"`
	// TenantFull is set on a refusal because the tenant holds its bound of
	// leases (gate.Config.TenantMaxLeases) across all its policies.
	TenantFull bool `json:"tenant_full,omitempty"`
}

// renewAnswer is the answer to POST /v1/leases/{id}/renew.
type renewAnswer struct {
	LeaseID   string `json:"lease_id"`
	ExpiresAt string `json:"expires_at"`
}

// expiresAt formats a lease's expiry to the millisecond, rounded down: a
// holder that renews by then still holds its place.
func expiresAt(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
}

// parseTTL reads a ttl member: a Go duration from gate.MinLeaseTTL to
// gate.MaxLeaseTTL, gate.DefaultLeaseTTL when absent.
func parseTTL(s *string) (time.Duration, error) {
	if s == nil {
		return gate.DefaultLeaseTTL, nil
	}
	d, err := time.ParseDuration(*s)
	if err != nil || d < gate.MinLeaseTTL || d > gate.MaxLeaseTTL {
		return 0, &badRequest{field: "ttl", reason: fmt.Sprintf(`must be a duration from %q to %q, such as "30s" or "5m"`, gate.MinLeaseTTL.String(), gate.MaxLeaseTTL.String())}
	}
	return d, nil
}

// parseLease reads a POST /v1/leases body; every fault is the client's and
// names its field.
func parseLease(c echo.Context) (*gate.Lease, error) {
	var b leaseBody
	if err := decodeJSON(c, maxLeaseBody, &b); err != nil {
		return nil, err
	}
	if b.Policy == "" {
		return nil, &badRequest{field: "policy", reason: "is required"}
	}
	if len(b.Subject) > gate.MaxSubjectLen {
		return nil, &badRequest{field: "subject", reason: fmt.Sprintf("at most %d bytes", gate.MaxSubjectLen)}
	}
	ttl, err := parseTTL(b.TTL)
	if err != nil {
		return nil, err
	}
	return &gate.Lease{Policy: b.Policy, Subject: b.Subject, TTL: ttl}, nil
}

// acquire answers POST /v1/leases. A malformed request still passes the
// ceilings and authentication first, as a malformed check does.
func (h leaseHandlers) acquire(c echo.Context) error {
	req, held, done, err := h.open(c, "leases", maxLeaseBody+1)
	if done {
		return err
	}
	defer held.give()
	l, perr := parseLease(c)
	if perr != nil {
		return h.malformed(c, req, perr)
	}
	v, err := h.gate.Acquire(c.Request().Context(), req, *l)
	if err != nil {
		return err
	}
	if v.Refusal != nil {
		return h.writeRefusal(c, v)
	}
	writeRateLimit(c.Response().Header(), v.Tightest.RateLimit())
	if v.Degraded {
		c.Response().Header().Set("X-RateLimit-Degraded", "true")
	}
	lv := v.Lease
	out := leaseAnswer{Allowed: lv.Allowed, InFlight: lv.InFlight, Limit: lv.Limit, Degraded: lv.Degraded,
		RetryAfterMS: ceilDiv(lv.RetryAfter, time.Millisecond), TenantFull: lv.TenantFull}
	if lv.Allowed {
		out.LeaseID, out.ExpiresAt = lv.ID, expiresAt(lv.ExpiresAt)
	}
	return c.JSON(http.StatusOK, out)
}

// release answers DELETE /v1/leases/{id}: 204 when the lease was live and
// is now released, 404 when it was not (never taken, already released,
// expired, dropped by a reset). Either way the caller holds no place
// afterwards, so a client may treat 404 as done.
func (h leaseHandlers) release(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	k := apiKey(c)
	if err := h.gate.Release(c.Request().Context(), tenantID(c), k.Test, id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// renew answers POST /v1/leases/{id}/renew: the new expiry, now + ttl; 404
// when the lease is gone, so that its holder knows it lost the place.
func (h leaseHandlers) renew(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, maxLeaseBody, buf)
	if err != nil {
		return err
	}
	var b struct {
		TTL *string `json:"ttl"`
	}
	if len(body) > 0 {
		if err := unmarshalStrict(body, &b); err != nil {
			return err
		}
	}
	ttl, err := parseTTL(b.TTL)
	if err != nil {
		return err
	}
	k := apiKey(c)
	exp, err := h.gate.Renew(c.Request().Context(), tenantID(c), k.Test, id, ttl)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, renewAnswer{LeaseID: id, ExpiresAt: expiresAt(exp)})
}

// reset answers DELETE /v1/policies/{name}/subjects/{subject}: 204 once the
// subject's counter (its leases, for a concurrency policy) is cleared, and
// audited with the key that did it. A test key resets the sandbox's
// counter, a live key the live one. The subject is one path segment,
// path-escaped, under the rules of a check's subject (gate.Reset applies
// them); a "/" in it is written %2F.
func (h leaseHandlers) reset(c echo.Context) error {
	name, err := policyName(c)
	if err != nil {
		return err
	}
	if strings.Contains(c.Param("subject"), "/") {
		// Echo gives the last parameter the rest of the path, raw "/"
		// included. A raw "/" ends a segment for everyone else: proxies
		// merge "//" and resolve "..", and would reset another subject.
		return &badRequest{field: "subject", reason: `is one path segment: escape "/" in it as %2F`}
	}
	subject, err := pathParam(c, "subject")
	if err != nil {
		return err
	}
	k := apiKey(c)
	ctx := c.Request().Context()
	key, err := h.gate.Reset(ctx, tenantID(c), k.Test, name, subject)
	if err != nil {
		return err
	}
	if h.cfg.Audit != nil {
		h.cfg.Audit(ctx, tenantID(c), audit.KindCounterReset, map[string]any{
			"policy": name, "subject_key": key, "key_id": k.ID, "sandbox": k.Test,
		})
	}
	return c.NoContent(http.StatusNoContent)
}
