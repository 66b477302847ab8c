package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
)

// BillingService is billing.Service: Stripe events, Checkout and the
// portal. Errors wrap billing's and tenant's sentinels.
type BillingService interface {
	HandleEvent(ctx context.Context, ev billing.Event) (billing.Result, error)
	Checkout(ctx context.Context, r billing.CheckoutRequest) (string, error)
	Portal(ctx context.Context, tenantID, returnURL string) (string, error)
}

// maxBillingBody bounds a /v1/billing body.
const maxBillingBody = 8 << 10

type checkoutBody struct {
	Plan       string `json:"plan"`
	SuccessURL string `json:"success_url"`
	CancelURL  string `json:"cancel_url"`
}

type portalBody struct {
	ReturnURL string `json:"return_url"`
}

type urlAnswer struct {
	URL string `json:"url"`
}

// registerBilling serves the tenant's billing routes on g, which
// authenticates: POST /checkout {"plan":…} and POST /portal, each answering
// {"url":…} for the tenant to open.
func registerBilling(g *echo.Group, a *api) {
	g.POST("/checkout", a.checkout)
	g.POST("/portal", a.portal)
}

func (a *api) checkout(c echo.Context) error {
	if a.cfg.Billing == nil {
		return fmt.Errorf("checkout: %w", billing.ErrNotConfigured)
	}
	var b checkoutBody
	if err := decodeJSON(c, maxBillingBody, &b); err != nil {
		return err
	}
	u, err := a.cfg.Billing.Checkout(c.Request().Context(), billing.CheckoutRequest{
		TenantID: tenantID(c), Plan: b.Plan, SuccessURL: b.SuccessURL, CancelURL: b.CancelURL,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, urlAnswer{URL: u})
}

func (a *api) portal(c echo.Context) error {
	if a.cfg.Billing == nil {
		return fmt.Errorf("portal: %w", billing.ErrNotConfigured)
	}
	var b portalBody
	// An empty body is as good as {}.
	if c.Request().ContentLength != 0 {
		if err := decodeJSON(c, maxBillingBody, &b); err != nil {
			return err
		}
	}
	u, err := a.cfg.Billing.Portal(c.Request().Context(), tenantID(c), b.ReturnURL)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, urlAnswer{URL: u})
}

// portalLink serves GET /billing/portal/{token}, the billing_url of 402
// answers: a stable address, signed for one tenant, that sends whoever
// follows it to a fresh Customer Portal session (303). A token that is not
// one billingURL made is 404, whatever is wrong with it, and costs no call
// to Stripe.
func portalLink(cfg Config) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, ok := verifyPortalToken(cfg.BillingKey, c.Param("token"))
		if !ok {
			return echo.NewHTTPError(http.StatusNotFound, "No such billing link.")
		}
		if cfg.Billing == nil {
			return fmt.Errorf("billing link: %w", billing.ErrNotConfigured)
		}
		u, err := cfg.Billing.Portal(c.Request().Context(), id, "")
		if err != nil {
			return err
		}
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return c.Redirect(http.StatusSeeOther, u)
	}
}

// verifyPortalToken returns the tenant id of a token "<tenant id>.<hex of
// the first 16 bytes of HMAC-SHA-256(key, "billing-portal:" + tenant id)>",
// as api.billingURL makes them, comparing the MAC in constant time. An empty
// key verifies nothing.
func verifyPortalToken(key []byte, token string) (string, bool) {
	id, sig, ok := strings.Cut(token, ".")
	if !ok || id == "" || len(key) == 0 {
		return "", false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return "", false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("billing-portal:" + id))
	if !hmac.Equal(got, m.Sum(nil)[:16]) {
		return "", false
	}
	return id, true
}
