package stripemocktest

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// TestMain holds the machine's test lock (internal/testkit/solo), then
// stops stripe-mock. Main itself takes no lock: stripemocktest stands
// beside the adapter it stands in for, below the test kits.
func TestMain(m *testing.M) {
	code := solo.Run(m)
	Stop()
	os.Exit(code)
}

func TestURLServesTheStripeAPI(t *testing.T) {
	u := URL(t)
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("URL %q is not on loopback", u)
	}
	if again := URL(t); again != u {
		t.Errorf("second URL %q, want the same stripe-mock %q", again, u)
	}
	req, _ := http.NewRequest("GET", u+"/v1/prices/price_x", nil)
	req.Header.Set("Authorization", "Bearer sk_test_123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/prices/price_x: %d", resp.StatusCode)
	}
}
