package main

import (
	"bytes"
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
