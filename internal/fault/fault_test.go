package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/policy"
)

func TestOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		err                 error
		field, reason, want string
		ok                  bool
	}{
		{"nil", nil, "", "", "", false},
		{"the service's own", errors.New("connection refused"), "", "", "", false},
		{"a field error, wrapped", fmt.Errorf("put policy p: %w", &policy.FieldError{Field: "limit", Reason: "must be at least 1"}),
			"limit", "must be at least 1", "Not saved: limit must be at least 1.", true},
		{"a fault of the request as a whole", &policy.NotFoundError{Policy: "p"},
			"", (&policy.NotFoundError{Policy: "p"}).Error(), "Not saved: " + (&policy.NotFoundError{Policy: "p"}).Error() + ".", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			field, reason, ok := fault.Of(tc.err)
			if field != tc.field || reason != tc.reason || ok != tc.ok {
				t.Fatalf("Of = %q, %q, %v; want %q, %q, %v", field, reason, ok, tc.field, tc.reason, tc.ok)
			}
			if ok {
				if got := fault.NotSaved(field, reason); got != tc.want {
					t.Fatalf("NotSaved = %q, want %q", got, tc.want)
				}
			}
		})
	}
}
