package envoyconf_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestMain holds the machine's test lock (see internal/testkit/solo) and
// gives the Catalog's and the Service's tests their databases.
func TestMain(m *testing.M) { pgtest.Main(m) }
