// Package pgstore is Tollgate's system of record in PostgreSQL: the pool,
// migrate-on-start, and the Store implementations of the domain packages.
// It turns pgx errors into the domain packages' sentinels; nothing outside
// cmd/tollgate imports it.
package pgstore
