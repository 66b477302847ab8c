package usageview_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// TestMain holds the machine's test lock: see internal/testkit/solo.
func TestMain(m *testing.M) { solo.Main(m) }
