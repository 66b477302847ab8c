package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"log/slog"
	"strings"
	"testing"
)

func TestStripeConfig(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		env  map[string]string
		want string // a variable the error names; "" for none
	}{
		"all unset":                  {map[string]string{}, ""},
		"two secrets":                {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_aaaaaaaa, whsec_bbbbbbbb"}, ""},
		"a secret that is not one":   {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_aaaaaaaa,sk_test_oops"}, "STRIPE_WEBHOOK_SECRET"},
		"a publishable key":          {map[string]string{"STRIPE_API_KEY": "pk_test_123"}, "STRIPE_API_KEY"},
		"a restricted key":           {map[string]string{"STRIPE_API_KEY": "rk_live_123"}, ""},
		"stripe-mock":                {map[string]string{"STRIPE_API_KEY": "sk_test_123", "STRIPE_API_BASE": "http://127.0.0.1:12111"}, ""},
		"an API base that is no URL": {map[string]string{"STRIPE_API_BASE": "localhost:12111"}, "STRIPE_API_BASE"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"TOLLGATE_PEPPER": testPepper}
			for k, v := range c.env {
				env[k] = v
			}
			_, err := loadConfig(envOf(env))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error naming %s", err, c.want)
			}
		})
	}
}

func TestStripeSecretsMaskedInLog(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(envOf(map[string]string{
		"TOLLGATE_PEPPER":       testPepper,
		"STRIPE_WEBHOOK_SECRET": "whsec_topsecret1,whsec_topsecret2",
		"STRIPE_API_KEY":        "sk_test_supersecretkey",
		"STRIPE_API_BASE":       "http://127.0.0.1:12111",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.StripeWebhookSecrets) != 2 || c.StripeAPIKey != "sk_test_supersecretkey" {
		t.Fatalf("config %+v", c)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("tollgate starting", "config", c)
	out := buf.String()
	for _, secret := range []string{"topsecret", "supersecretkey"} {
		if strings.Contains(out, secret) {
			t.Errorf("start-up log shows a secret: %s", out)
		}
	}
	for _, want := range []string{"stripe_webhook_secret=\"set (2 secrets)\"", "stripe_api_key=sk_test_xxxxx", "stripe_api_base=http://127.0.0.1:12111"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log lacks %s: %s", want, out)
		}
	}
}

// TestBillingKeyUnderTheDevPepperIsSecret: the development pepper is in the
// source, so billing links signed with a key derived from it could be forged
// for any tenant; under it the key is random, per process.
func TestBillingKeyUnderTheDevPepperIsSecret(t *testing.T) {
	t.Parallel()
	m := hmac.New(sha256.New, []byte(devPepper))
	m.Write([]byte("tollgate billing links"))
	public := m.Sum(nil)
	a, b := billingKey([]byte(devPepper)), billingKey([]byte(devPepper))
	if bytes.Equal(a, public) || bytes.Equal(a, b) || len(a) < 32 {
		t.Errorf("billing key under the dev pepper: %x, then %x; want 32 random bytes each time", a, b)
	}
	if k1, k2 := billingKey([]byte(testPepper)), billingKey([]byte(testPepper)); !bytes.Equal(k1, k2) || bytes.Equal(k1, []byte(testPepper)) {
		t.Errorf("billing key under a real pepper: %x then %x; want one key, derived", k1, k2)
	}
}
