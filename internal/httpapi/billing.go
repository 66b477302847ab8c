package httpapi

import (
	"context"
	"fmt"
	"net/http"

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
