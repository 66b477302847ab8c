// Package pgstore is Tollgate's system of record in PostgreSQL: migrations,
// change notifications (Listen), and the Store implementations of the
// domain packages, one type per thing stored: Tenants (tenants, keys,
// plans), Policies, Admins (admins, sessions), Members (the console's
// members, sessions and mailed tokens), Audit (audit log, refusals,
// alerts), Usage, Traffic (usage and degraded minutes read for operators)
// and Billing (Stripe events, billing accounts, usage reports). Errors of
// pgx become the domain's sentinels in one place (errors.go, dbErr), and
// values cross between Go and PostgreSQL types in another (conv.go:
// UUIDs, and instants read back in UTC). Nothing outside cmd/tollgate
// imports it.
package pgstore
