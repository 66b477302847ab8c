package main

import (
	"context"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/limit"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

const testPepper = "0123456789abcdef0123456789abcdef"

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"no pepper outside dev":        {map[string]string{}, "TOLLGATE_PEPPER"},
		"short pepper":                 {map[string]string{"TOLLGATE_PEPPER": "short"}, "TOLLGATE_PEPPER"},
		"redis store without url":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_STORE": "redis"}, "REDIS_URL"},
		"unknown store":                {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_STORE": "etcd"}, "TOLLGATE_COUNTER_STORE"},
		"bad database url":             {map[string]string{"TOLLGATE_DEV": "1", "DATABASE_URL": "mysql://x"}, "DATABASE_URL"},
		"bad redis url":                {map[string]string{"TOLLGATE_DEV": "1", "REDIS_URL": "localhost:6379"}, "REDIS_URL"},
		"bad addr":                     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_ADDR": "8080"}, "TOLLGATE_ADDR"},
		"bad proxy":                    {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8,nope"}, "TOLLGATE_TRUSTED_PROXIES"},
		"bad log format":               {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_LOG_FORMAT": "xml"}, "TOLLGATE_LOG_FORMAT"},
		"bad log level":                {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_LOG_LEVEL": "loud"}, "TOLLGATE_LOG_LEVEL"},
		"bad dev flag":                 {map[string]string{"TOLLGATE_DEV": "yes please"}, "TOLLGATE_DEV"},
		"no webhook test sends":        {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_WEBHOOK_TEST_SENDS": "0"}, "TOLLGATE_WEBHOOK_TEST_SENDS"},
		"counter timeout out of range": {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_TIMEOUT": "1h"}, "TOLLGATE_COUNTER_TIMEOUT"},
		"read timeout not a duration":  {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_READ_TIMEOUT": "soon"}, "TOLLGATE_READ_TIMEOUT"},
		"idle timeout too short":       {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_IDLE_TIMEOUT": "10ms"}, "TOLLGATE_IDLE_TIMEOUT"},
		"write timeout below read":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_READ_TIMEOUT": "90s"}, "TOLLGATE_WRITE_TIMEOUT"},
		"audit retention not days":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_AUDIT_RETENTION_DAYS": "90d"}, "TOLLGATE_AUDIT_RETENTION_DAYS"},
		"audit retention zero":         {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_AUDIT_RETENTION_DAYS": "0"}, "TOLLGATE_AUDIT_RETENTION_DAYS"},
		"profiler on the network":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_DEBUG_ADDR": "0.0.0.0:6060"}, "TOLLGATE_DEBUG_ADDR"},
		"profiler without a port":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_DEBUG_ADDR": "127.0.0.1"}, "TOLLGATE_DEBUG_ADDR"},
		"memory store too small":       {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_MEMORY_MAX_KEYS": "10"}, "TOLLGATE_MEMORY_MAX_KEYS"},
		"memory store not a number":    {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_MEMORY_MAX_KEYS": "1M"}, "TOLLGATE_MEMORY_MAX_KEYS"},
		"shutdown timeout zero":        {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SHUTDOWN_TIMEOUT": "0s"}, "TOLLGATE_SHUTDOWN_TIMEOUT"},
		"instance ceiling negative":    {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_INSTANCE_CEILING": "-1"}, "TOLLGATE_INSTANCE_CEILING"},
		"unknown client ip header":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8", "TOLLGATE_CLIENT_IP_HEADER": "x-forwarded-for"}, "TOLLGATE_CLIENT_IP_HEADER"},
		"client ip header, no proxies": {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_CLIENT_IP_HEADER": "cf-connecting-ip"}, "TOLLGATE_TRUSTED_PROXIES"},
		"ipv6 prefix too short":        {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_IPV6_PREFIX": "/16"}, "TOLLGATE_IPV6_PREFIX"},
		"tenant inflight too low":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TENANT_INFLIGHT": "8"}, "TOLLGATE_TENANT_INFLIGHT"},
		"tenant max leases zero":       {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TENANT_MAX_LEASES": "0"}, "TOLLGATE_TENANT_MAX_LEASES"},
		"tenant max reservations zero": {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TENANT_MAX_RESERVATIONS": "0"}, "TOLLGATE_TENANT_MAX_RESERVATIONS"},
		"conns per tenant not a count": {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_CONNS_PER_TENANT": "many"}, "TOLLGATE_CONNS_PER_TENANT"},
		"conns per ip above keyless":   {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_CONNS_PER_IP": "100", "TOLLGATE_CONNS_KEYLESS": "10"}, "TOLLGATE_CONNS_PER_IP"},
		"public url not http":          {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_PUBLIC_URL": "ftp://example.com"}, "TOLLGATE_PUBLIC_URL"},
		"bad webhook private flag":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_WEBHOOK_ALLOW_PRIVATE": "maybe"}, "TOLLGATE_WEBHOOK_ALLOW_PRIVATE"},
		"bad secure cookies flag":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SECURE_COOKIES": "maybe"}, "TOLLGATE_SECURE_COOKIES"},
		"publishable stripe key":       {map[string]string{"TOLLGATE_DEV": "1", "STRIPE_API_KEY": "pk_test_123"}, "STRIPE_API_KEY"},
		"smtp url not a url":           {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": "mail.example.com:25"}, "TOLLGATE_SMTP_URL"},
		"smtp url without a port":      {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": "smtp://mail.example.com"}, "TOLLGATE_SMTP_URL"},
		"smtp url, unknown starttls":   {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": "smtp://mail.example.com:25?starttls=yes"}, "TOLLGATE_SMTP_URL"},
		"smtp credentials in clear":    {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": "smtp://u:p@mail.example.com:25?starttls=off"}, "TOLLGATE_SMTP_URL"},
		"mail from not an address":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_MAIL_FROM": "Tollgate"}, "TOLLGATE_MAIL_FROM"},
		"mail from, two addresses":     {map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_MAIL_FROM": "a@x.test, b@x.test"}, "TOLLGATE_MAIL_FROM"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(envOf(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestTrustedProxiesThatTrustTheInternet: a prefix wide enough that
// anyone could connect from inside it, and so choose their own address in
// X-Forwarded-For, stops start-up with an error naming the variable and
// the entry; the widest real proxy ranges (Cloudflare's, the private
// networks cloud load balancers sit in) start.
func TestTrustedProxiesThatTrustTheInternet(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		entry string
		ok    bool
	}{
		"every IPv4 address":             {"0.0.0.0/0", false},
		"half of IPv4":                   {"128.0.0.0/1", false},
		"a /7":                           {"10.0.0.0/7", false},
		"every IPv6 address":             {"::/0", false},
		"global unicast":                 {"2000::/3", false},
		"an IPv6 /15":                    {"2400::/15", false},
		"IPv4-mapped, every address":     {"::ffff:0:0/96", false},
		"IPv4-mapped, a /7":              {"::ffff:10.0.0.0/103", false},
		"a private /8":                   {"10.0.0.0/8", true},
		"Cloudflare's widest IPv4":       {"104.16.0.0/13", true},
		"Cloudflare's /22":               {"173.245.48.0/20", true},
		"a private /12":                  {"172.16.0.0/12", true},
		"one address":                    {"192.0.2.1", true},
		"Cloudflare's widest IPv6":       {"2400:cb00::/32", true},
		"a CDN's /28":                    {"2600:9000::/28", true},
		"an IPv6 /16":                    {"2a00::/16", true},
		"unique local addresses":         {"fc00::/7", true},
		"IPv4-mapped, a private /8":      {"::ffff:10.0.0.0/104", true},
		"one IPv6 address":               {"2001:db8::1", true},
		"IPv4-compatible zero, not IPv4": {"::/96", true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_TRUSTED_PROXIES": "192.0.2.0/24, " + c.entry}))
			if (err == nil) != c.ok {
				t.Fatalf("TOLLGATE_TRUSTED_PROXIES=%s: %v, want ok %t", c.entry, err, c.ok)
			}
			if err != nil && (!strings.Contains(err.Error(), "TOLLGATE_TRUSTED_PROXIES") || !strings.Contains(err.Error(), c.entry)) {
				t.Errorf("TOLLGATE_TRUSTED_PROXIES=%s: %v, want an error naming the variable and the entry", c.entry, err)
			}
		})
	}
}

func TestConfigDefaultsAndValues(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(envOf(map[string]string{"TOLLGATE_PEPPER": testPepper, "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "REDIS_URL": "redis://127.0.0.1:6379/0", "TOLLGATE_COUNTER_STORE": "redis"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":8080" || c.CounterStore != "redis" || c.CounterTimeout != 50*time.Millisecond || c.LogFormat != "json" ||
		c.ReadTimeout != 30*time.Second || c.WriteTimeout != time.Minute || c.IdleTimeout != time.Minute || c.MemoryMaxKeys != 1_000_000 ||
		c.WebhookTestSends != 10 {
		t.Fatalf("defaults: got %+v", c)
	}
	if len(c.TrustedProxies) != 2 || c.TrustedProxies[1].String() != "192.0.2.1/32" {
		t.Fatalf("trusted proxies: got %v", c.TrustedProxies)
	}
	if c.AuditRetention != 90*24*time.Hour {
		t.Errorf("audit retention: got %v, want 90 days", c.AuditRetention)
	}
	c, err = loadConfig(envOf(map[string]string{"TOLLGATE_PEPPER": testPepper, "TOLLGATE_AUDIT_RETENTION_DAYS": "400"}))
	if err != nil || c.AuditRetention != 400*24*time.Hour {
		t.Errorf("TOLLGATE_AUDIT_RETENTION_DAYS=400: got %v, %v; want 400 days", c.AuditRetention, err)
	}
}

// TestConfigReadsEveryVariable: each variable serve reads lands in its
// field, and each left unset gives its default.
func TestConfigReadsEveryVariable(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(envOf(map[string]string{"TOLLGATE_PEPPER": testPepper}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Addr: ":8080", CounterStore: "postgres", LogFormat: "json", DataDir: ".tollgate", CounterTimeout: 50 * time.Millisecond, ShutdownTimeout: 15 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: time.Minute, AuditRetention: 90 * 24 * time.Hour,
		IPv6Prefix: 64, TenantInflight: 64, TenantMaxLeases: 10_000, TenantMaxReservations: 10_000, MemoryMaxKeys: 1_000_000,
		ConnsPerIP: httpapi.DefaultConnsPerIP, ConnsKeyless: httpapi.DefaultConnsKeyless, ConnsPerTenant: httpapi.DefaultConnsPerTenant,
		WebhookTestSends: httpapi.DefaultWebhookTestsPerMinute, PublicURL: "http://localhost:8080", MailFrom: "Tollgate <no-reply@localhost>",
	}
	if got := withoutSlices(c); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\ngot  %+v\nwant %+v", got, want)
	}

	c, err = loadConfig(envOf(map[string]string{
		"TOLLGATE_PEPPER": testPepper, "TOLLGATE_ADDR": "127.0.0.1:9000", "TOLLGATE_COUNTER_STORE": "memory",
		"TOLLGATE_COUNTER_TIMEOUT": "20ms", "TOLLGATE_DEBUG_ADDR": "127.0.0.1:6060", "TOLLGATE_SHUTDOWN_TIMEOUT": "5s",
		"TOLLGATE_READ_TIMEOUT": "10s", "TOLLGATE_WRITE_TIMEOUT": "20s", "TOLLGATE_IDLE_TIMEOUT": "40s",
		"TOLLGATE_AUDIT_RETENTION_DAYS": "7", "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8", "TOLLGATE_INSTANCE_CEILING": "5000",
		"TOLLGATE_CLIENT_IP_HEADER": "CF-Connecting-IP", "TOLLGATE_IPV6_PREFIX": "/56", "TOLLGATE_TENANT_INFLIGHT": "128",
		"TOLLGATE_TENANT_MAX_LEASES": "50", "TOLLGATE_TENANT_MAX_RESERVATIONS": "70", "TOLLGATE_WEBHOOK_TEST_SENDS": "3", "TOLLGATE_MEMORY_MAX_KEYS": "5000",
		"TOLLGATE_CONNS_PER_IP": "8", "TOLLGATE_CONNS_KEYLESS": "16", "TOLLGATE_CONNS_PER_TENANT": "32",
		"TOLLGATE_PUBLIC_URL": "https://tollgate.example", "TOLLGATE_SECURE_COOKIES": "1", "TOLLGATE_WEBHOOK_ALLOW_PRIVATE": "1",
		"STRIPE_WEBHOOK_SECRET": "whsec_0123456789, whsec_abcdefghij", "STRIPE_API_KEY": "sk_test_123", "STRIPE_API_BASE": "http://127.0.0.1:12111",
		"TOLLGATE_SMTP_URL": "smtps://app:pw@mail.example.com:465", "TOLLGATE_MAIL_FROM": "Tollgate <no-reply@tollgate.example>",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want = Config{
		Addr: "127.0.0.1:9000", CounterStore: "memory", LogFormat: "json", DataDir: ".tollgate", CounterTimeout: 20 * time.Millisecond, DebugAddr: "127.0.0.1:6060",
		ShutdownTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: 40 * time.Second,
		AuditRetention: 7 * 24 * time.Hour, InstanceCeiling: 5000, ClientIPHeader: "cf-connecting-ip", IPv6Prefix: 56,
		TenantInflight: 128, TenantMaxLeases: 50, TenantMaxReservations: 70, WebhookTestSends: 3, MemoryMaxKeys: 5000, ConnsPerIP: 8, ConnsKeyless: 16, ConnsPerTenant: 32,
		PublicURL: "https://tollgate.example", SecureCookies: true, WebhookAllowPrivate: true,
		StripeAPIKey: "sk_test_123", StripeAPIBase: "http://127.0.0.1:12111",
		SMTPURL: "smtps://app:pw@mail.example.com:465", MailFrom: "Tollgate <no-reply@tollgate.example>",
	}
	if got := withoutSlices(c); !reflect.DeepEqual(got, want) {
		t.Errorf("values:\ngot  %+v\nwant %+v", got, want)
	}
	if len(c.TrustedProxies) != 1 || c.TrustedProxies[0].String() != "10.0.0.0/8" {
		t.Errorf("trusted proxies: got %v, want [10.0.0.0/8]", c.TrustedProxies)
	}
	if strings.Join(c.StripeWebhookSecrets, ",") != "whsec_0123456789,whsec_abcdefghij" {
		t.Errorf("stripe webhook secrets: got %q, want [whsec_0123456789 whsec_abcdefghij]", c.StripeWebhookSecrets)
	}
}

// withoutSlices is c without its slices, which the tests compare apart.
func withoutSlices(c Config) Config {
	c.Pepper, c.TrustedProxies, c.StripeWebhookSecrets = nil, nil, nil
	return c
}

// TestDevAddrDefault: TOLLGATE_DEV's server listens on the loopback unless
// TOLLGATE_ADDR names a host; production's listens on every interface,
// where its load balancer, or the Docker port mapping, reaches it. The
// links it makes keep naming localhost.
func TestDevAddrDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		env             map[string]string
		addr, publicURL string
	}{
		{"dev", map[string]string{"TOLLGATE_DEV": "1"}, "127.0.0.1:8080", "http://localhost:8080"},
		{"dev on another port", map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_ADDR": ":9090"}, "127.0.0.1:9090", "http://localhost:9090"},
		{"dev on every interface, asked", map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_ADDR": "0.0.0.0:9090"}, "0.0.0.0:9090", "http://0.0.0.0:9090"},
		{"production", map[string]string{"TOLLGATE_PEPPER": testPepper}, ":8080", "http://localhost:8080"},
		{"production on another port", map[string]string{"TOLLGATE_PEPPER": testPepper, "TOLLGATE_ADDR": ":9090"}, ":9090", "http://localhost:9090"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := loadConfig(envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Addr != tc.addr || c.PublicURL != tc.publicURL {
				t.Errorf("addr, public URL: got %q, %q; want %q, %q", c.Addr, c.PublicURL, tc.addr, tc.publicURL)
			}
		})
	}
}

func TestConfigLogMasksSecrets(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(envOf(map[string]string{"TOLLGATE_PEPPER": testPepper, "DATABASE_URL": "postgres://app:s3cret@db:5432/tollgate", "REDIS_URL": "redis://:hunter2@cache:6379/0"}))
	if err != nil {
		t.Fatal(err)
	}
	shown := c.LogValue().String()
	for _, secret := range []string{"s3cret", "hunter2", testPepper} {
		if strings.Contains(shown, secret) {
			t.Fatalf("start-up log shows a secret: %s", shown)
		}
	}
	if !strings.Contains(shown, "app:xxxxx@db:5432") {
		t.Fatalf("database URL not shown masked: %s", shown)
	}
}

// TestConfigMail: TOLLGATE_SMTP_URL and TOLLGATE_MAIL_FROM are read and
// checked as internal/mail reads them; the start-up log line shows the SMTP
// URL without its password, or that mail goes to the development mailbox;
// an error never shows the password.
func TestConfigMail(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if shown := c.LogValue().String(); c.SMTPURL != "" || !strings.Contains(shown, "smtp_url=unset (development mailbox)") ||
		!strings.Contains(shown, "mail_from=Tollgate <no-reply@localhost>") {
		t.Errorf("unset: SMTPURL %q, log %s", c.SMTPURL, shown)
	}
	for _, u := range []string{"smtp://ann:hunter2@mail.example.com:587", "smtp://127.0.0.1:1025?starttls=off", "smtps://ann:hunter2@mail.example.com:465", "smtp://ann:hunter2@localhost:25?starttls=off"} {
		c, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": u, "TOLLGATE_MAIL_FROM": "ops@tollgate.example"}))
		if err != nil {
			t.Errorf("TOLLGATE_SMTP_URL=%s: %v", u, err)
			continue
		}
		shown := c.LogValue().String()
		if c.SMTPURL != u || c.MailFrom != "ops@tollgate.example" || strings.Contains(shown, "hunter2") || !strings.Contains(shown, "smtp_url=smtp") {
			t.Errorf("TOLLGATE_SMTP_URL=%s: SMTPURL %q, MailFrom %q, log %s", u, c.SMTPURL, c.MailFrom, shown)
		}
	}
	for _, u := range []string{"smtp://ann:hunter2@mail.example.com:x", "smtp://ann:hunter2@mail.example.com:25?starttls=off", "imap://ann:hunter2@mail.example.com:143"} {
		_, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_SMTP_URL": u}))
		if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SMTP_URL") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("TOLLGATE_SMTP_URL=%s: got %v, want an error naming the variable, not the password", u, err)
		}
	}
}

func TestConfigRedisURLForms(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"redis://127.0.0.1:6379/0":                                  true,
		"rediss://:secret@cache:6380":                               true,
		"redis+cluster://10.0.0.1:7000":                             true,
		"redis+cluster://:secret@10.0.0.1:7000?addr=10.0.0.2:7000":  true,
		"rediss+cluster://10.0.0.1:7000?addr=10.0.0.2:7000":         true,
		"cluster://10.0.0.1:7000":                                   false,
		"redis+sentinel://10.0.0.1:26379":                           false,
		"redis+cluster://":                                          false,
		"redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000": true,
		"redis+cluster://:secret@[::1]:7000,[::1]:7001":             true,
		// Configurations that can never connect stop start-up.
		"redis+cluster://h1:p1,h2:p2,h3:p3":             false,
		"redis://:secret@10.0.0.1:7000,10.0.0.2:7000/0": false,
		"redis+cluster://10.0.0.1:7000?addr=h2:p2":      false,
		"redis+cluster://10.0.0.1:99999":                false,
		"redis://cache:0/0":                             false,
	} {
		_, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_STORE": "redis", "REDIS_URL": url}))
		if ok && err != nil {
			t.Errorf("REDIS_URL=%s: %v", url, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "REDIS_URL") || !strings.Contains(err.Error(), "redis+cluster://")) {
			t.Errorf("REDIS_URL=%s: got %v, want an error naming REDIS_URL and both forms", url, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("REDIS_URL=%s: the error shows the password: %v", url, err)
		}
	}
}

// TestMemoryStoreKeepsEveryLiveCounter: the memory store of a single
// instance holds more counters than the L1 damper's 50,000: 60,000 subjects
// each at their limit stay refused (a forgotten counter would admit again).
func TestMemoryStoreKeepsEveryLiveCounter(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_STORE": "memory"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := app.CounterStore(context.Background(), appConfig(cfg), "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	check := func(i int) bool {
		res, err := s.Check(context.Background(), counter.Request{Now: now, Group: "tenant", Items: []counter.Item{{
			Key: "p:" + strconv.Itoa(i), Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Hour), Cost: 1,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	const subjects = 60_000
	for i := range subjects {
		if !check(i) {
			t.Fatalf("subject %d refused on its first check", i)
		}
	}
	for i := range subjects {
		if check(i) {
			t.Fatalf("subject %d admitted twice at a limit of 1: its counter was forgotten", i)
		}
	}
}
