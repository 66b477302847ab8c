package httpapi

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/kit/digest"
)

// BillingLinkLifetime is how long the billing_url of a 402 answer opens the
// portal: a week, so that a developer who finds the answer in a log or a
// ticket days later can still follow it, while a link leaked long ago no
// longer opens anything. The next 402 answer carries a fresh one.
const BillingLinkLifetime = 7 * 24 * time.Hour

// Each open of a billing link asks Stripe for a portal session, and Stripe's
// request budget is shared by every tenant, so opens are limited per tenant
// and per client IP (sliding windows of an hour, across instances when the
// shared counter store answers): a person fixing a card opens the link a
// few times, a script cannot turn it into a stream of Stripe calls.
const (
	BillingLinksPerTenant = 10
	BillingLinksPerIP     = 20
	billingLinkWindow     = time.Hour
)

// billingLinkGroup is the counter group of the billing links' limits.
const billingLinkGroup = "billing-links"

// portalMAC is the MAC of a billing link's tenant id and expiry (Unix
// seconds, as written in the token): the first 16 bytes of HMAC-SHA-256
// under key, domain-separated from everything else the key signs.
func portalMAC(key []byte, tenantID, expires string) []byte {
	return digest.New(key).Append(nil, 16, "tollgate billing portal link", tenantID, "\x00", expires)
}

// signPortalToken returns the token of a billing link for tenantID that
// opens until expires: "<tenant id>.<expiry, Unix seconds>.<hex MAC>".
func signPortalToken(key []byte, tenantID string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return tenantID + "." + exp + "." + hex.EncodeToString(portalMAC(key, tenantID, exp))
}

// verifyPortalToken returns the tenant id of a token signPortalToken made
// with key that has not expired at now. It looks nothing up, so that every
// token it refuses (forged, altered, of the old form without an expiry, or
// expired) is refused alike, whatever the tenant it names. The MAC is
// compared in constant time; an empty key verifies nothing.
func verifyPortalToken(key []byte, token string, now time.Time) (string, bool) {
	id, rest, ok := strings.Cut(token, ".")
	if !ok || id == "" || len(key) == 0 {
		return "", false
	}
	exp, sig, ok := strings.Cut(rest, ".")
	if !ok || exp == "" || len(exp) > 12 {
		return "", false
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, portalMAC(key, id, exp)) {
		return "", false
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !now.Before(time.Unix(secs, 0)) {
		return "", false
	}
	return id, true
}

// portalLink serves GET /billing/portal/{token}, the billing_url of 402
// answers: signed for one tenant and good for BillingLinkLifetime, it sends
// whoever follows it (303) to the console's billing page when the tenant's
// people use the console (cfg.BillingLanding), else to a fresh Customer
// Portal session. A token that is not one billingURL made, or has expired,
// is 404, the same answer whatever is wrong with it, and costs no lookup
// and no call to Stripe. The console's way costs one lookup and no call to
// Stripe, and is not counted; the portal's opens past the limits are 429
// with Retry-After, and cost no call either.
func portalLink(cfg Config) echo.HandlerFunc {
	limits := newLinkLimits(cfg)
	return func(c echo.Context) error {
		id, ok := verifyPortalToken(cfg.BillingKey, c.Param("token"), time.Now())
		if !ok {
			return echo.NewHTTPError(http.StatusNotFound, "No such billing link, or it has expired; the next 402 answer carries a fresh one.")
		}
		ctx := c.Request().Context()
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		if cfg.BillingLanding != nil {
			u, err := cfg.BillingLanding(ctx, id)
			if err != nil {
				return fmt.Errorf("billing link landing: %w", err)
			}
			if u != "" {
				return c.Redirect(http.StatusSeeOther, u)
			}
		}
		if cfg.Billing == nil {
			return fmt.Errorf("billing link: %w", billing.ErrNotConfigured)
		}
		wait, err := limits.admit(ctx, id, clientIP(c))
		if err != nil {
			return err
		}
		if wait > 0 {
			c.Response().Header().Set("Retry-After", strconv.FormatInt(max(1, ceilDiv(wait, time.Second)), 10))
			return echo.NewHTTPError(http.StatusTooManyRequests, fmt.Sprintf(
				"This billing link was opened too often: at most %d times an hour per tenant and %d per client address. Try again later.",
				BillingLinksPerTenant, BillingLinksPerIP))
		}
		u, err := cfg.Billing.Portal(ctx, id, "")
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, u)
	}
}

// linkLimits counts billing link opens, per tenant and per client IP, with
// the gate's Limiter (the shared counter store, else this instance's
// memory; nil counts nowhere, and every open is answered 503). Client IPs
// are counted as HMACs under the billing key.
type linkLimits struct {
	limiter *gate.Limiter
	// digest is HMAC-SHA-256 under the billing key.
	digest *digest.Digester
}

func newLinkLimits(cfg Config) *linkLimits {
	return &linkLimits{limiter: cfg.LinkLimiter, digest: digest.New(cfg.BillingKey)}
}

// ipKey is the counter key of a client address: "ip:" and 128 bits of its
// digest, the same as earlier versions wrote, so that counts survive an
// upgrade. Every unresolved client shares "unknown"'s.
func (l *linkLimits) ipKey(ip netip.Addr) string {
	client := "unknown"
	if ip.IsValid() {
		client = ip.String()
	}
	return "ip:" + l.digest.Hex(16, "tollgate billing link client", client)
}

// admit counts one open of tenantID's link from ip (as the per-IP layers
// key it: an IPv6 address cut to its network; every unresolved client in
// one bucket), on both counters or neither, and returns zero, or how long
// to wait when a limit refuses.
func (l *linkLimits) admit(ctx context.Context, tenantID string, ip netip.Addr) (time.Duration, error) {
	if l.limiter == nil {
		return 0, fmt.Errorf("billing link limits: %w", gate.ErrStoreUnavailable)
	}
	ds, err := l.limiter.Check(ctx, gate.Limits{Group: billingLinkGroup, Rules: []gate.Rule{
		{Key: "tenant:" + tenantID, Limit: BillingLinksPerTenant, Window: billingLinkWindow},
		{Key: l.ipKey(ip), Limit: BillingLinksPerIP, Window: billingLinkWindow},
	}})
	if err != nil {
		return 0, err
	}
	var wait time.Duration
	for _, d := range ds {
		if !d.Allowed {
			wait = max(wait, d.RetryAfter, time.Second)
		}
	}
	return wait, nil
}
