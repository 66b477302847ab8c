package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
)

// WebhookVerifier is stripeapi.Verifier: it checks a webhook's signature and
// reads its event; a bad signature or body is billing.ErrBadWebhook.
type WebhookVerifier interface {
	Parse(payload []byte, signatureHeader string) (billing.Event, error)
}

// MaxWebhookBody bounds a Stripe webhook body. Stripe's events are far
// smaller (an invoice shows at most ten lines); a larger body is refused
// with 413 before its signature is checked.
const MaxWebhookBody = 512 << 10

type webhookAnswer struct {
	Received bool   `json:"received"`
	Outcome  string `json:"outcome"`
}

// stripeWebhook serves POST /webhooks/stripe. It answers
//
//   - 503 when no signing secret is configured (and logs why): an
//     unverified webhook is never processed;
//   - 400 without a Stripe-Signature header and 413 for a Content-Length
//     over MaxWebhookBody, both before the body is read; 413 for a body
//     over MaxWebhookBody, 400 for a wrong or too old signature or a body
//     that is not an event; nothing changes;
//   - 200 with the outcome once the event is recorded: applied, stale,
//     unknown_customer, ignored, or replay for one processed before;
//   - 500 when processing failed, so that Stripe delivers it again.
//
// Webhooks are outside /v1 and its ceilings: Stripe's retries are their own
// rate limit, and a dropped delivery would only come back later.
func stripeWebhook(cfg Config) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		switch {
		case cfg.StripeWebhooks == nil:
			cfg.Logger.ErrorContext(ctx, "stripe webhook refused: STRIPE_WEBHOOK_SECRET is not set, and unverified webhooks are never processed")
			return fmt.Errorf("stripe webhook: %w", billing.ErrNotConfigured)
		case cfg.Billing == nil:
			cfg.Logger.ErrorContext(ctx, "stripe webhook refused: no billing service")
			return fmt.Errorf("stripe webhook: %w", billing.ErrNotConfigured)
		}
		// Nothing is read of a body that cannot be a webhook: without the
		// signature header (which stripe-go requires anyway) or longer
		// than any event, the answer comes before the body.
		signature := c.Request().Header.Get("Stripe-Signature")
		if signature == "" {
			cfg.Logger.WarnContext(ctx, "stripe webhook refused", "reason", "no Stripe-Signature header")
			closeUnread(c)
			return fmt.Errorf("stripe webhook: no Stripe-Signature header: %w", billing.ErrBadWebhook)
		}
		if c.Request().ContentLength > MaxWebhookBody {
			closeUnread(c)
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("A webhook body is at most %d bytes.", MaxWebhookBody))
		}
		body, err := readWebhookBody(c.Request())
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "The body could not be read.")
		}
		if len(body) > MaxWebhookBody {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("A webhook body is at most %d bytes.", MaxWebhookBody))
		}
		ev, err := cfg.StripeWebhooks.Parse(body, signature)
		if err != nil {
			// The reason (never the body) helps whoever set up the
			// endpoint; the client learns only that it was refused.
			cfg.Logger.WarnContext(ctx, "stripe webhook refused", "reason", err.Error())
			return err
		}
		r, err := cfg.Billing.HandleEvent(ctx, ev)
		if err != nil {
			// Whatever went wrong is ours and passing: 500 (logged by the
			// error handler), never a 4xx that would read as Stripe's
			// fault.
			return fmt.Errorf("stripe webhook: %v", err)
		}
		cfg.Logger.InfoContext(ctx, "stripe event", "event_id", ev.ID, "event_type", ev.Type,
			"outcome", string(r.Outcome), "tenant_id", r.TenantID, "note", r.Note)
		return c.JSON(http.StatusOK, webhookAnswer{Received: true, Outcome: string(r.Outcome)})
	}
}

// closeUnread makes the connection close after the answer instead of
// draining a body nobody will read, so that a client trickling one gets its
// answer at once and holds nothing afterwards.
func closeUnread(c echo.Context) {
	c.Response().Header().Set(echo.HeaderConnection, "close")
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now())
}

// readWebhookBody reads a body of up to MaxWebhookBody bytes, and one byte
// more to tell a larger one, into a buffer allocated once at its declared
// length (or the bound, when none is declared): the memory a body takes is
// what bodyBudget reserved for it, not the doubling of a growing buffer.
func readWebhookBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > MaxWebhookBody {
		n = MaxWebhookBody
	}
	buf := make([]byte, n+1)
	got, err := io.ReadFull(r.Body, buf)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return buf[:got], nil
	case err != nil:
		return nil, err
	}
	// Full: net/http ends a body at its Content-Length, so only a body of
	// unknown length gets here, and it is longer than the bound.
	return buf, nil
}
