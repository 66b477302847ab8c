// Package typescript holds @tollgate/client, Tollgate's TypeScript client
// (see README.md), and the Go test that runs its tests with Node's own test
// runner against a Tollgate built from this tree on real PostgreSQL.
package typescript
