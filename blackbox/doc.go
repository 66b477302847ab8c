// Package blackbox tests Tollgate from the outside: it builds the binary,
// starts instances on one PostgreSQL, creates tenants with the CLI and talks
// to the REST API over real HTTP, as a tenant's servers would. It has no code
// of its own; the tests are in blackbox_test.go.
package blackbox
