package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

func TestProblemFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		want  problem
		known bool
	}{
		{"field error, wrapped",
			fmt.Errorf("put policy p: %w", &policy.FieldError{Field: "limit", Reason: "is required"}),
			problem{Problem{problemBase + "invalid-request", "Invalid request", 400, "is required"}, "limit"}, true},
		{"field error of the whole body",
			&policy.FieldError{Reason: "body must be a JSON object"},
			problem{Problem{problemBase + "invalid-request", "Invalid request", 400, "body must be a JSON object"}, ""}, true},
		{"a tenant's field error",
			fmt.Errorf("checkout: %w", &tenant.FieldError{Field: "plan", Reason: "is required"}),
			problem{Problem{problemBase + "invalid-request", "Invalid request", 400, "is required"}, "plan"}, true},
		{"the HTTP layer's own",
			fmt.Errorf("decode: %w", &badRequest{field: "mode", reason: `want "consume" or "peek"`}),
			problem{Problem{problemBase + "invalid-request", "Invalid request", 400, `want "consume" or "peek"`}, "mode"}, true},
		{"a bare ErrInvalid says no more than its status",
			fmt.Errorf("secret detail: %w", policy.ErrInvalid),
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, ""}}, true},
		{"not found, named",
			fmt.Errorf("get policy: %w", &policy.NotFoundError{Policy: "p"}),
			problem{Problem: Problem{problemBase + "not-found", "Not found", 404, `policy "p" not found`}}, true},
		{"not found, bare",
			fmt.Errorf("tenant 123: %w", policy.ErrNotFound),
			problem{Problem: Problem{problemBase + "not-found", "Not found", 404, ""}}, true},
		{"conflict",
			fmt.Errorf("policies_pkey: %w", policy.ErrConflict),
			problem{Problem: Problem{problemBase + "conflict", "Conflict", 409, ""}}, true},
		{"Echo's 404",
			echo.ErrNotFound,
			problem{Problem: Problem{problemBase + "not-found", "Not found", 404, ""}}, true},
		{"Echo's 405",
			echo.ErrMethodNotAllowed,
			problem{Problem: Problem{"about:blank", "Method Not Allowed", 405, ""}}, true},
		{"Echo's 400 with a message",
			echo.NewHTTPError(http.StatusBadRequest, "missing header"),
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, "missing header"}}, true},
		{"Echo's 500",
			echo.NewHTTPError(http.StatusInternalServerError, "boom"),
			internalProblem, false},
		{"anything else",
			errors.New("connection refused"),
			internalProblem, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, known := problemFor(tt.err)
			if got != tt.want || known != tt.known {
				t.Errorf("got %+v, %v; want %+v, %v", got, known, tt.want, tt.known)
			}
		})
	}
}
