package stripemocktest

import (
	"net/http"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

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
