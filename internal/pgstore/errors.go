package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// dbErrors says which of one domain's sentinels stand for what PostgreSQL
// answers.
type dbErrors struct {
	// domain lists the domain's sentinels: an error that wraps one was
	// translated already (inside a transaction) and passes as it is.
	domain []error
	// noRows stands for a query that found no row; nil keeps pgx's text.
	noRows error
	// code returns what a PostgreSQL error (a SQLSTATE, a constraint)
	// stands for, or nil when it stands for no sentinel.
	code func(pe *pgconn.PgError) error
	// unavailable, when set, stands for an error that is no answer of the
	// server's (a connection refused, cut or timed out): the domain's
	// "retry later", which a client sees as 503, not as a fault of ours.
	unavailable error
}

// dbErr is the one place where an error of pgx becomes one of the domain's
// (STYLE: adapters translate at the edge): a domain error passes, no rows
// and the SQLSTATEs m knows become m's sentinels, ctx's errors stay
// errors.Is-able, and anything else keeps its text but not its pgx type.
func dbErr(err error, m dbErrors) error {
	if err == nil {
		return nil
	}
	for _, d := range m.domain {
		if errors.Is(err, d) {
			return err
		}
	}
	if m.noRows != nil && errors.Is(err, pgx.ErrNoRows) {
		return m.noRows
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && m.code != nil {
		if s := m.code(pe); s != nil {
			return s
		}
	}
	if m.unavailable != nil && !errors.Is(err, context.Canceled) && !isAnswer(err) {
		return fmt.Errorf("%w: %v", m.unavailable, err)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("%w: %v", c, err)
		}
	}
	return fmt.Errorf("%v", err)
}

// isAnswer reports whether err came from the server (a PostgreSQL error)
// rather than from reaching it.
func isAnswer(err error) bool {
	_, ok := errors.AsType[*pgconn.PgError](err)
	return ok
}

// SQLSTATEs the stores translate.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
	checkViolation      = "23514"
	notNullViolation    = "23502"
	stringTooLong       = "22001"
)

// tenantErrors: no rows is ErrNotFound, a unique violation ErrConflict, a
// foreign key to plans an unknown plan (ErrInvalid), a foreign key to
// tenants ErrNotFound, any other constraint ErrInvalid.
var tenantErrors = dbErrors{
	domain: []error{tenant.ErrNotFound, tenant.ErrConflict, tenant.ErrInvalid},
	noRows: tenant.ErrNotFound,
	code: func(pe *pgconn.PgError) error {
		switch pe.Code {
		case uniqueViolation:
			return tenant.ErrConflict
		case foreignKeyViolation:
			switch pe.ConstraintName {
			case "tenants_plan_fkey":
				return &tenant.FieldError{Field: "plan", Reason: "no such plan"}
			case "api_keys_tenant_id_fkey":
				return fmt.Errorf("tenant: %w", tenant.ErrNotFound)
			}
			return &tenant.FieldError{Field: pe.ConstraintName, Reason: "refers to nothing"}
		case checkViolation, stringTooLong, notNullViolation:
			// The domain's validation should have refused it first.
			return &tenant.FieldError{Field: pe.ConstraintName, Reason: "out of range"}
		}
		return nil
	},
}

// billingErrors: no rows is ErrNotFound, a Stripe customer already on
// another tenant ErrConflict.
var billingErrors = dbErrors{
	domain: []error{billing.ErrNotFound, billing.ErrConflict},
	noRows: billing.ErrNotFound,
	code: func(pe *pgconn.PgError) error {
		if pe.Code == uniqueViolation && pe.ConstraintName == "tenants_stripe_customer_id_key" {
			return billing.ErrConflict
		}
		return nil
	},
}

// auditErrors, of the usage, audit and alert statements: a tenant deleted
// under an entry being recorded is ErrInvalid.
var auditErrors = dbErrors{
	domain: []error{audit.ErrInvalid},
	code: func(pe *pgconn.PgError) error {
		if pe.Code == foreignKeyViolation {
			return fmt.Errorf("tenant: %w", audit.ErrInvalid)
		}
		return nil
	},
}

// adminErrors: no rows is ErrNotFound, a unique violation ErrConflict (of
// the email), a check ErrInvalid.
var adminErrors = dbErrors{
	domain: []error{admin.ErrNotFound, admin.ErrConflict, admin.ErrInvalid},
	noRows: admin.ErrNotFound,
	code: func(pe *pgconn.PgError) error {
		switch pe.Code {
		case uniqueViolation:
			return fmt.Errorf("email: %w", admin.ErrConflict)
		case checkViolation, stringTooLong:
			return fmt.Errorf("%s: %w", pe.ConstraintName, admin.ErrInvalid)
		}
		return nil
	},
}

// policyErrors, of a policy write: a duplicate key is ErrConflict, a
// foreign key to a row deleted meanwhile (the tenant, the policy)
// ErrNotFound. No rows is the caller's to tell (a policy, an override).
var policyErrors = dbErrors{
	domain:      []error{policy.ErrInvalid, policy.ErrNotFound, policy.ErrConflict, policy.ErrUnavailable},
	unavailable: policy.ErrUnavailable,
	code: func(pe *pgconn.PgError) error {
		switch pe.Code {
		case uniqueViolation:
			return fmt.Errorf("%s: %w", pe.ConstraintName, policy.ErrConflict)
		case foreignKeyViolation:
			return fmt.Errorf("%s: %w", pe.ConstraintName, policy.ErrNotFound)
		}
		return nil
	},
}

// webhookErrors, of the outbound webhooks' statements: a connection that
// fails is webhooks.ErrUnavailable, a missing row webhooks.ErrNotFound.
var webhookErrors = dbErrors{
	domain:      []error{webhooks.ErrNotFound, webhooks.ErrTooMany, webhooks.ErrConflict, webhooks.ErrInvalid},
	noRows:      webhooks.ErrNotFound,
	unavailable: webhooks.ErrUnavailable,
}
