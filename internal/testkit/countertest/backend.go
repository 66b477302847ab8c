// Package countertest is the conformance suite every counter.Store backend
// passes: the same answers as internal/limit (through Model) on the same
// request streams, peek that never counts but ceilings, all-or-nothing
// requests and their two tiers (ceilings, then policies), advisory items
// that never block a tier and count only when it is kept, window roll-over,
// exact admission counts under concurrency and across independent store
// instances, and ErrUnavailable within the deadline when the server is gone.
//
// Only tests import countertest.
package countertest

import (
	"testing"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
)

// Backend is what a backend's test file hands to Run.
type Backend struct {
	// Shared makes a namespace (a database, a key prefix) that is new and
	// isolated from every other, and returns a function that opens a store on
	// it. Each call of that function opens an independent instance with
	// connections of its own, as a separate server of Tollgate would; a
	// backend without a server (memory) returns the same store every time.
	// The suite closes every store it opens.
	Shared func(t *testing.T) func() counter.Store
	// Breakable, when set, opens a store whose connections to its server pass
	// through p, so the suite can cut and stall the link. Stores with no
	// server leave it nil.
	Breakable func(t *testing.T, link func(upstream string) *faultnet.Proxy) counter.Store
	// Patient says the store waits past its deadline for a server that
	// keeps answering, late (its calls wait on locks and, on a starved
	// CPU, on the processor): the suite then holds it to answering through
	// a link slower than the deadline (LateIsNotDown). A store without it
	// gives up at its deadline, whatever the server.
	Patient bool
}
