package httpapi

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStrictTransportSecurity: answers that reached Tollgate over HTTPS
// carry Strict-Transport-Security, whether TLS ended here, at a trusted
// proxy that says so in X-Forwarded-Proto, or at a proxy the operator
// declared with TOLLGATE_SECURE_COOKIES. Plain HTTP, and an untrusted
// caller's X-Forwarded-Proto, get none.
func TestStrictTransportSecurity(t *testing.T) {
	t.Parallel()
	_, loopback, _ := net.ParseCIDR("127.0.0.1/32")
	cfg := func(mod func(*Config)) Config {
		c := Config{Logger: slog.New(slog.DiscardHandler), Ready: func(context.Context) error { return nil }}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		tls   bool
		cfg   Config
		proto string
		want  bool
	}{
		{"plain HTTP", false, cfg(nil), "", false},
		{"TLS ended here", true, cfg(nil), "", true},
		{"X-Forwarded-Proto from an untrusted caller", false, cfg(nil), "https", false},
		{"X-Forwarded-Proto https from a trusted proxy", false, cfg(func(c *Config) { c.ClientIP.TrustedProxies = []*net.IPNet{loopback} }), "https", true},
		{"X-Forwarded-Proto http from a trusted proxy", false, cfg(func(c *Config) { c.ClientIP.TrustedProxies = []*net.IPNet{loopback} }), "http", false},
		{"TLS ended by a declared proxy", false, cfg(func(c *Config) { c.SecureTransport = true }), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := New(tc.cfg)
			var srv *httptest.Server
			if tc.tls {
				srv = httptest.NewTLSServer(h)
			} else {
				srv = httptest.NewServer(h)
			}
			defer srv.Close()
			for _, path := range []string{"/", "/healthz", "/admin", "/no-such-page"} {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				if tc.proto != "" {
					req.Header.Set("X-Forwarded-Proto", tc.proto)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := resp.Header.Get("Strict-Transport-Security")
				if tc.want && got != hstsValue {
					t.Errorf("%s: Strict-Transport-Security %q, want %q", path, got, hstsValue)
				}
				if !tc.want && got != "" {
					t.Errorf("%s: Strict-Transport-Security %q over plain HTTP", path, got)
				}
			}
		})
	}
}
