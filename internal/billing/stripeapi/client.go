package stripeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	portalsession "github.com/stripe/stripe-go/v76/billingportal/session"
	checkoutsession "github.com/stripe/stripe-go/v76/checkout/session"
	"github.com/stripe/stripe-go/v76/price"
	"github.com/stripe/stripe-go/v76/usagerecord"

	"github.com/tollgate/tollgate/internal/billing"
)

// Config configures a Client. Key is required.
type Config struct {
	// Key is the secret (sk_…) or restricted (rk_…) API key.
	Key string
	// APIBase is the API's address; empty means Stripe's. Tests point it
	// at stripe-mock.
	APIBase string
	// HTTPClient makes the calls; nil means one with a 30 s timeout.
	HTTPClient *http.Client
	// MaxNetworkRetries is how often stripe-go retries a call that failed
	// on the network or with a 409, 429 or 5xx, under the same idempotency
	// key (default 2).
	MaxNetworkRetries int64
	// Logger receives stripe-go's own messages, at debug level; nil
	// discards them. Errors are returned, and logged by whoever handles
	// them.
	Logger *slog.Logger
}

// Client calls the Stripe API: billing.Payments and billing.Meter. It is safe
// for concurrent use.
//
// It holds the clients of the four resources it calls, not stripe-go's
// client.API, which imports every resource of the API (some 130 packages):
// compiling those took an eighth of the CPU time of a cold build of
// tollgate.
type Client struct {
	prices   price.Client
	checkout checkoutsession.Client
	portal   portalsession.Client
	usage    usagerecord.Client
}

var (
	_ billing.Payments = (*Client)(nil)
	_ billing.Meter    = (*Client)(nil)
)

// New returns a Client.
func New(cfg Config) *Client {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	retries := int64(2)
	if cfg.MaxNetworkRetries > 0 {
		retries = cfg.MaxNetworkRetries
	}
	bc := &stripe.BackendConfig{
		HTTPClient:        cfg.HTTPClient,
		LeveledLogger:     debugLogger{cfg.Logger},
		MaxNetworkRetries: stripe.Int64(retries),
		EnableTelemetry:   stripe.Bool(false),
	}
	if cfg.APIBase != "" {
		bc.URL = stripe.String(cfg.APIBase)
	}
	// Every call here goes to the API backend; client.API's Connect and
	// Uploads backends serve resources this package does not call.
	api := stripe.GetBackendWithConfig(stripe.APIBackend, bc)
	return &Client{
		prices:   price.Client{B: api, Key: cfg.Key},
		checkout: checkoutsession.Client{B: api, Key: cfg.Key},
		portal:   portalsession.Client{B: api, Key: cfg.Key},
		usage:    usagerecord.Client{B: api, Key: cfg.Key},
	}
}

// CheckoutSession implements billing.Payments: a subscription-mode session
// for one unit of the price (none for a metered price, whose quantity is its
// usage), whose client_reference_id and metadata, and its subscription's
// metadata, name the tenant.
func (c *Client) CheckoutSession(ctx context.Context, p billing.CheckoutParams) (string, error) {
	pp := &stripe.PriceParams{}
	pp.Context = ctx
	price, err := c.prices.Get(p.PriceID, pp)
	if err != nil {
		return "", fmt.Errorf("price %s: %w", p.PriceID, stripeErr(err))
	}
	line := &stripe.CheckoutSessionLineItemParams{Price: stripe.String(p.PriceID)}
	if price.Recurring == nil || price.Recurring.UsageType != stripe.PriceRecurringUsageTypeMetered {
		line.Quantity = stripe.Int64(1)
	}
	meta := map[string]string{billing.MetadataTenantID: p.TenantID}
	params := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		ClientReferenceID: stripe.String(p.TenantID),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{line},
		SuccessURL:        stripe.String(p.SuccessURL),
		CancelURL:         stripe.String(p.CancelURL),
		Metadata:          meta,
		SubscriptionData:  &stripe.CheckoutSessionSubscriptionDataParams{Metadata: meta},
	}
	if p.CustomerID != "" {
		params.Customer = stripe.String(p.CustomerID)
	}
	params.Context = ctx
	s, err := c.checkout.New(params)
	if err != nil {
		return "", fmt.Errorf("create checkout session: %w", stripeErr(err))
	}
	if s.URL == "" {
		return "", fmt.Errorf("create checkout session: no URL in the answer: %w", billing.ErrProvider)
	}
	return s.URL, nil
}

// PortalSession implements billing.Payments.
func (c *Client) PortalSession(ctx context.Context, customerID, returnURL string) (string, error) {
	params := &stripe.BillingPortalSessionParams{
		Customer:  stripe.String(customerID),
		ReturnURL: stripe.String(returnURL),
	}
	params.Context = ctx
	s, err := c.portal.New(params)
	if err != nil {
		return "", fmt.Errorf("create portal session for customer %s: %w", customerID, stripeErr(err))
	}
	if s.URL == "" {
		return "", fmt.Errorf("create portal session: no URL in the answer: %w", billing.ErrProvider)
	}
	return s.URL, nil
}

// ReportUsage implements billing.Meter with a usage record that sets
// (action "set", not "increment") the item's usage at the last second of the
// hour: Stripe keeps one quantity per timestamp, so even a report sent again
// after its idempotency key has expired counts once. The last second, not
// the first, is inside the billing period of a subscription that started
// during the hour.
func (c *Client) ReportUsage(ctx context.Context, r billing.UsageReport) error {
	params := &stripe.UsageRecordParams{
		SubscriptionItem: stripe.String(r.ItemID),
		Action:           stripe.String("set"),
		Quantity:         stripe.Int64(r.Quantity),
		Timestamp:        stripe.Int64(r.Hour.Add(time.Hour - time.Second).Unix()),
	}
	params.Context = ctx
	params.SetIdempotencyKey(r.IdempotencyKey)
	if _, err := c.usage.New(params); err != nil {
		return fmt.Errorf("usage record on %s: %w", r.ItemID, stripeErr(err))
	}
	return nil
}

// stripeErr turns a stripe-go error into billing's sentinels: a request
// Stripe refuses as invalid (which retrying cannot fix) wraps ErrRejected
// and ErrProvider, anything else ErrProvider. Stripe's message is kept for
// the log; no stripe-go type leaves.
func stripeErr(err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		msg := fmt.Sprintf("stripe %s (HTTP %d", se.Type, se.HTTPStatusCode)
		if se.Code != "" {
			msg += ", " + string(se.Code)
		}
		if se.RequestID != "" {
			msg += ", request " + se.RequestID
		}
		msg += "): " + se.Msg
		if se.Type == stripe.ErrorTypeInvalidRequest && se.HTTPStatusCode != http.StatusTooManyRequests {
			return fmt.Errorf("%s: %w: %w", msg, billing.ErrRejected, billing.ErrProvider)
		}
		return fmt.Errorf("%s: %w", msg, billing.ErrProvider)
	}
	return fmt.Errorf("%v: %w", err, billing.ErrProvider)
}

// debugLogger hands stripe-go's messages to slog at debug level.
type debugLogger struct{ log *slog.Logger }

func (l debugLogger) Debugf(format string, v ...any) {
	l.log.Debug("stripe-go", "text", fmt.Sprintf(format, v...))
}
func (l debugLogger) Infof(format string, v ...any) {
	l.log.Debug("stripe-go", "text", fmt.Sprintf(format, v...))
}
func (l debugLogger) Warnf(format string, v ...any) {
	l.log.Debug("stripe-go", "text", fmt.Sprintf(format, v...))
}
func (l debugLogger) Errorf(format string, v ...any) {
	l.log.Debug("stripe-go", "text", fmt.Sprintf(format, v...))
}
