package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
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
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, "is required"}, Field: "limit"}, true},
		{"field error of the whole body",
			&policy.FieldError{Reason: "body must be a JSON object"},
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, "body must be a JSON object"}, Field: ""}, true},
		{"a tenant's field error",
			fmt.Errorf("checkout: %w", &tenant.FieldError{Field: "plan", Reason: "is required"}),
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, "is required"}, Field: "plan"}, true},
		{"the HTTP layer's own",
			fmt.Errorf("decode: %w", &badRequest{field: "mode", reason: `want "consume" or "peek"`}),
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, `want "consume" or "peek"`}, Field: "mode"}, true},
		{"a bare ErrInvalid says no more than its status",
			fmt.Errorf("secret detail: %w", policy.ErrInvalid),
			problem{Problem: Problem{problemBase + "invalid-request", "Invalid request", 400, ""}}, true},
		{"not found, named",
			fmt.Errorf("get policy: %w", &policy.NotFoundError{Policy: "p"}),
			problem{Problem: Problem{problemBase + "not-found", "Not found", 404, `policy "p" not found`}}, true},
		{"not found, bare",
			fmt.Errorf("tenant 123: %w", policy.ErrNotFound),
			problem{Problem: Problem{problemBase + "not-found", "Not found", 404, ""}}, true},
		{"a configuration file refused at a line",
			fmt.Errorf("put domain edge: %w", &envoyconf.Error{Line: 7, Reason: "unit must be one of second, …"}),
			problem{Problem: Problem{problemBase + "invalid-configuration", "Invalid configuration", 400, "line 7: unit must be one of second, …"},
				Errors: []fileFault{{Line: 7, Reason: "unit must be one of second, …"}}}, true},
		{"a configuration file refused as a whole",
			&envoyconf.Error{Reason: "the file is empty"},
			problem{Problem: Problem{problemBase + "invalid-configuration", "Invalid configuration", 400, "the file is empty"},
				Errors: []fileFault{{Reason: "the file is empty"}}}, true},
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
			if !reflect.DeepEqual(got, tt.want) || known != tt.known {
				t.Errorf("got %+v, %v; want %+v, %v", got, known, tt.want, tt.known)
			}
		})
	}
}
