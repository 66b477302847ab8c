package stripeapi

import (
	"errors"
	"net/http"
	"testing"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/tollgate/tollgate/internal/billing"
)

func TestStripeErr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		rejected bool
	}{
		{"invalid request", &stripe.Error{Type: stripe.ErrorTypeInvalidRequest, HTTPStatusCode: http.StatusBadRequest, Msg: "timestamp out of period"}, true},
		{"rate limited", &stripe.Error{Type: stripe.ErrorTypeInvalidRequest, HTTPStatusCode: http.StatusTooManyRequests}, false},
		{"api error", &stripe.Error{Type: stripe.ErrorTypeAPI, HTTPStatusCode: http.StatusInternalServerError}, false},
		{"idempotency", &stripe.Error{Type: stripe.ErrorTypeIdempotency, HTTPStatusCode: http.StatusBadRequest}, false},
		{"network", errors.New("dial tcp: connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := stripeErr(tc.err)
			if !errors.Is(err, billing.ErrProvider) {
				t.Errorf("%v does not wrap ErrProvider", err)
			}
			if errors.Is(err, billing.ErrRejected) != tc.rejected {
				t.Errorf("%v: rejected %t, want %t", err, errors.Is(err, billing.ErrRejected), tc.rejected)
			}
			var se *stripe.Error
			if errors.As(err, &se) {
				t.Errorf("%v lets a stripe-go type out", err)
			}
		})
	}
}
