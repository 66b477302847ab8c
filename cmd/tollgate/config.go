package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/mail"
)

// ula is IPv6's unique local addresses, the private networks that no one
// on the internet can connect from, however wide.
var ula = netip.MustParsePrefix("fc00::/7")

// tooWideToTrust says why n is too wide to be a list of proxies, or
// returns "". The bounds stop a list that trusts everyone (0.0.0.0/0, ::/0)
// or a large share of the internet, while the widest real proxy ranges
// pass: Cloudflare publishes IPv4 /12 to /22 and IPv6 /29 to /32 (AWS's
// CloudFront a /28), and cloud load balancers sit in the private networks,
// of which 10.0.0.0/8 is the widest. An IPv4 /8 holds 65,536 /24s, as an
// IPv6 /16 holds 65,536 of the /32s registries hand to a provider; a
// prefix wider than that spans many owners' networks. Unique local IPv6
// (fc00::/7) is private whatever its length. An IPv4-mapped prefix
// (::ffff:a.b.c.d/n) holds IPv4 clients, those of a /(n-96).
func tooWideToTrust(n *net.IPNet) string {
	ones, _ := n.Mask.Size()
	a, _ := netip.AddrFromSlice(n.IP)
	switch {
	case a.Is4():
		if ones < 8 {
			return fmt.Sprintf("an IPv4 prefix must be /8 or longer, this is a /%d", ones)
		}
	case a.Is4In6():
		// net.IPNet.Contains matches IPv4 clients against it.
		if ones < 96+8 {
			return fmt.Sprintf("an IPv4-mapped prefix must be /104 (an IPv4 /8) or longer, this is a /%d", ones)
		}
	case ones < 16 && !ula.Contains(a):
		return fmt.Sprintf("an IPv6 prefix must be /16 or longer outside fc00::/7, this is a /%d", ones)
	}
	return ""
}

// Config is every setting Tollgate reads from its environment, read once at
// start, and only by the commands that use it: serve reads all of it
// (loadConfig), the operator commands only the database's and the log's
// (loadStoreConfig). Nothing below cmd/tollgate reads the environment.
type Config struct {
	DatabaseURL           string        // DATABASE_URL; empty: the embedded PostgreSQL
	RedisURL              string        // REDIS_URL: redis:// (one server) or redis+cluster:// (a cluster; seeds in addr or after commas)
	Addr                  string        // TOLLGATE_ADDR; with Dev, no host means 127.0.0.1
	CounterStore          string        // TOLLGATE_COUNTER_STORE: postgres, redis or memory
	CounterTimeout        time.Duration // TOLLGATE_COUNTER_TIMEOUT
	Pepper                []byte        // TOLLGATE_PEPPER
	Dev                   bool          // TOLLGATE_DEV
	TrustedProxies        []*net.IPNet  // TOLLGATE_TRUSTED_PROXIES
	LogFormat             string        // TOLLGATE_LOG_FORMAT: json or text
	LogLevel              slog.Level    // TOLLGATE_LOG_LEVEL
	DataDir               string        // TOLLGATE_DATA_DIR: where the embedded PostgreSQL keeps its data
	ShutdownTimeout       time.Duration // TOLLGATE_SHUTDOWN_TIMEOUT
	InstanceCeiling       int64         // TOLLGATE_INSTANCE_CEILING: requests a second; 0 is off
	ClientIPHeader        string        // TOLLGATE_CLIENT_IP_HEADER
	PublicURL             string        // TOLLGATE_PUBLIC_URL
	SecureCookies         bool          // TOLLGATE_SECURE_COOKIES: dashboard cookies Secure behind a TLS-ending proxy
	IPv6Prefix            int           // TOLLGATE_IPV6_PREFIX: the IPv6 network length clients are keyed by
	TenantInflight        int64         // TOLLGATE_TENANT_INFLIGHT: work units one tenant may have in progress per instance
	TenantMaxLeases       int64         // TOLLGATE_TENANT_MAX_LEASES: leases of concurrency policies one tenant may hold at once
	TenantMaxReservations int64         // TOLLGATE_TENANT_MAX_RESERVATIONS: live reservations one tenant may hold at once
	MemoryMaxKeys         int           // TOLLGATE_MEMORY_MAX_KEYS: counters the memory store holds (TOLLGATE_COUNTER_STORE=memory)
	ConnsPerIP            int           // TOLLGATE_CONNS_PER_IP: connections one address may hold before a request on them shows a key
	ConnsKeyless          int           // TOLLGATE_CONNS_KEYLESS: connections all addresses may hold so
	ConnsPerTenant        int           // TOLLGATE_CONNS_PER_TENANT: connections one tenant may hold once their requests showed its key
	ReadTimeout           time.Duration // TOLLGATE_READ_TIMEOUT: a request's headers and body, from its first byte
	WriteTimeout          time.Duration // TOLLGATE_WRITE_TIMEOUT: from the end of a request's headers to the end of its answer
	IdleTimeout           time.Duration // TOLLGATE_IDLE_TIMEOUT: a kept-alive connection between requests
	AuditRetention        time.Duration // TOLLGATE_AUDIT_RETENTION_DAYS: audit entries older than this are deleted
	DebugAddr             string        // TOLLGATE_DEBUG_ADDR: a loopback address for Go's profiler; empty is off
	GRPCAddr              string        // TOLLGATE_GRPC_ADDR: Envoy's rate limit service (gRPC); empty is off
	GRPCTLSCert           string        // TOLLGATE_GRPC_TLS_CERT: with _KEY, the rate limit service over TLS
	GRPCTLSKey            string        // TOLLGATE_GRPC_TLS_KEY
	// WebhookAllowPrivate lets tenants' webhooks go to http:// URLs and to
	// loopback and private addresses (TOLLGATE_WEBHOOK_ALLOW_PRIVATE): for
	// self-hosters whose receivers are inside, and for tests.
	WebhookAllowPrivate bool
	// WebhookTestSends is how many test events a tenant may send a minute
	// (TOLLGATE_WEBHOOK_TEST_SENDS).
	WebhookTestSends int64

	// Outgoing email (internal/mail).
	SMTPURL  string // TOLLGATE_SMTP_URL: smtp:// or smtps://; empty: the development mailbox
	MailFrom string // TOLLGATE_MAIL_FROM: the sender of every message

	// Billing with Stripe (internal/billing).
	StripeWebhookSecrets []string // STRIPE_WEBHOOK_SECRET: comma-separated whsec_… signing secrets
	StripeAPIKey         string   // STRIPE_API_KEY: sk_… or rk_…
	StripeAPIBase        string   // STRIPE_API_BASE: empty means Stripe's; stripe-mock in tests
}

// clientIPHeaders are the provider headers TOLLGATE_CLIENT_IP_HEADER may name.
var clientIPHeaders = []string{"cf-connecting-ip", "fly-client-ip", "x-real-ip", "true-client-ip", "x-client-ip"}

// devPepper is the pepper of TOLLGATE_DEV=1 without TOLLGATE_PEPPER: fine for
// a laptop, never for data that matters, which is why it needs the flag.
const devPepper = "tollgate-development-pepper-not-for-production"

// minPepper is the shortest TOLLGATE_PEPPER accepted: HMAC-SHA-256 keys
// shorter than its output weaken it.
const minPepper = 32

// urlRules are the URLs the environment names: the schemes each takes (a
// host is always required), and what to say when it is wrong. The value is
// shown in the error unless it may hold a secret.
var urlRules = map[string]struct {
	schemes []string
	want    string
	secret  bool
}{
	"DATABASE_URL": {[]string{"postgres", "postgresql"}, "postgres://user[:password]@host:port/dbname", true},
	// One server, or a Redis Cluster named by seed nodes; the counter
	// store parses the rest and checks the server's mode at start.
	"REDIS_URL": {[]string{"redis", "rediss", "redis+cluster", "rediss+cluster"},
		"redis://[:password@]host:port[/db] for one server or redis+cluster://[:password@]host:port[,host:port…][?addr=host:port&addr=host:port] for a cluster", true},
	"TOLLGATE_PUBLIC_URL": {[]string{"http", "https"}, "http(s)://host[:port]", false},
	"STRIPE_API_BASE":     {[]string{"http", "https"}, "http(s)://host[:port]", false},
}

// checkURL is the one place that checks a URL of the environment: v, the
// value of the variable name, has one of urlRules[name]'s schemes and a
// host. The error names the variable.
func checkURL(name, v string) error {
	r := urlRules[name]
	if u, err := url.Parse(v); err == nil && slices.Contains(r.schemes, u.Scheme) && u.Host != "" {
		return nil
	}
	if r.secret {
		return fmt.Errorf("%s: want %s", name, r.want)
	}
	return fmt.Errorf("%s %q: want %s", name, v, r.want)
}

// loadStoreConfig reads what every command that opens the database needs:
// DATABASE_URL (or where the embedded PostgreSQL keeps its data),
// TOLLGATE_DEV and the log's format and level. An error names the variable
// at fault; nothing falls back silently.
func loadStoreConfig(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL: getenv("DATABASE_URL"),
		DataDir:     cmp.Or(getenv("TOLLGATE_DATA_DIR"), ".tollgate"),
	}
	var err error
	if c.Dev, err = parseBool("TOLLGATE_DEV", getenv("TOLLGATE_DEV")); err != nil {
		return c, err
	}
	if c.DatabaseURL != "" {
		if err := checkURL("DATABASE_URL", c.DatabaseURL); err != nil {
			return c, err
		}
	}
	c.LogFormat = getenv("TOLLGATE_LOG_FORMAT")
	switch c.LogFormat {
	case "":
		c.LogFormat = "json"
		if c.Dev {
			c.LogFormat = "text"
		}
	case "json", "text":
	default:
		return c, fmt.Errorf("TOLLGATE_LOG_FORMAT %q: want json or text", c.LogFormat)
	}
	if v := getenv("TOLLGATE_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			return c, fmt.Errorf("TOLLGATE_LOG_LEVEL %q: want debug, info, warn or error", v)
		}
	}
	return c, nil
}

// loadCounterConfig reads what a command that reaches the counter store
// needs (subjects reset): loadStoreConfig's part, then where the counters
// are and the pepper that keys them, by serve's rules (loadCounters). An
// error names the variable at fault.
func loadCounterConfig(getenv func(string) string) (Config, error) {
	c, err := loadStoreConfig(getenv)
	if err != nil {
		return c, err
	}
	return c, loadCounters(&c, getenv)
}

// loadCounters reads where the counters are and the pepper that keys
// them: TOLLGATE_COUNTER_STORE (postgres, redis or memory), REDIS_URL (the
// counter store's own parse, so that a URL that can never connect stops
// start-up; required for redis) and TOLLGATE_PEPPER (required unless
// TOLLGATE_DEV=1, which gives the development pepper).
func loadCounters(c *Config, getenv func(string) string) error {
	c.RedisURL = getenv("REDIS_URL")
	c.CounterStore = cmp.Or(getenv("TOLLGATE_COUNTER_STORE"), "postgres")
	if c.RedisURL != "" {
		if err := rediscounter.CheckURL(c.RedisURL); err != nil {
			return fmt.Errorf("REDIS_URL: %v; want %s", err, urlRules["REDIS_URL"].want)
		}
	}
	switch c.CounterStore {
	case "postgres", "memory":
	case "redis":
		if c.RedisURL == "" {
			return fmt.Errorf("TOLLGATE_COUNTER_STORE=redis needs REDIS_URL")
		}
	default:
		return fmt.Errorf("TOLLGATE_COUNTER_STORE %q: want postgres, redis or memory", c.CounterStore)
	}
	switch p := getenv("TOLLGATE_PEPPER"); {
	case p == "" && c.Dev:
		c.Pepper = []byte(devPepper)
	case p == "":
		return fmt.Errorf("TOLLGATE_PEPPER is required (at least %d bytes, e.g. `openssl rand -hex 32`); set TOLLGATE_DEV=1 to run with a development pepper", minPepper)
	case len(p) < minPepper:
		return fmt.Errorf("TOLLGATE_PEPPER: %d bytes, want at least %d", len(p), minPepper)
	default:
		c.Pepper = []byte(p)
	}
	return nil
}

// loadConfig reads and validates the whole environment, for serve:
// loadStoreConfig's part, then the rest a group at a time: the counters,
// the server, its clients, the limits, webhooks and billing. An error names
// the variable at fault; nothing falls back silently.
func loadConfig(getenv func(string) string) (Config, error) {
	c, err := loadStoreConfig(getenv)
	if err != nil {
		return c, err
	}
	// The counter store and the pepper first, as every command that
	// counts reads them; a Redis URL that can never connect (one that
	// would only ever fail open) stops start-up.
	for _, load := range []func(*Config, func(string) string) error{
		loadCounters, loadServer, loadClients, loadLimits, loadWebhooks, loadMail, loadStripe,
	} {
		if err := load(&c, getenv); err != nil {
			return c, err
		}
	}
	return c, nil
}

// loadServer reads how the server runs: TOLLGATE_ADDR, TOLLGATE_DEBUG_ADDR,
// the shutdown, read, write and idle timeouts, TOLLGATE_AUDIT_RETENTION_DAYS,
// TOLLGATE_SECURE_COOKIES and TOLLGATE_PUBLIC_URL (by default the address's).
func loadServer(c *Config, getenv func(string) string) error {
	var err error
	c.Addr = cmp.Or(getenv("TOLLGATE_ADDR"), ":8080")
	c.ShutdownTimeout = 15 * time.Second
	c.ReadTimeout = 30 * time.Second
	c.WriteTimeout = 60 * time.Second
	c.IdleTimeout = 60 * time.Second
	c.AuditRetention = 90 * 24 * time.Hour
	if c.SecureCookies, err = parseBool("TOLLGATE_SECURE_COOKIES", getenv("TOLLGATE_SECURE_COOKIES")); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("TOLLGATE_ADDR %q: want host:port or :port", c.Addr)
	}
	if v := getenv("TOLLGATE_DEBUG_ADDR"); v != "" {
		host, _, err := net.SplitHostPort(v)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("TOLLGATE_DEBUG_ADDR %q: want a loopback host:port such as 127.0.0.1:6060 (the profiler must not face the network)", v)
		}
		c.DebugAddr = v
	}
	if err := loadGRPC(c, getenv); err != nil {
		return err
	}
	if v := getenv("TOLLGATE_SHUTDOWN_TIMEOUT"); v != "" {
		if c.ShutdownTimeout, err = time.ParseDuration(v); err != nil || c.ShutdownTimeout <= 0 {
			return fmt.Errorf("TOLLGATE_SHUTDOWN_TIMEOUT %q: want a positive duration", v)
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"TOLLGATE_READ_TIMEOUT", &c.ReadTimeout}, {"TOLLGATE_WRITE_TIMEOUT", &c.WriteTimeout}, {"TOLLGATE_IDLE_TIMEOUT", &c.IdleTimeout}} {
		if v := getenv(d.name); v != "" {
			if *d.v, err = time.ParseDuration(v); err != nil || *d.v < time.Second || *d.v > time.Hour {
				return fmt.Errorf("%s %q: want a duration from 1s to 1h", d.name, v)
			}
		}
	}
	if c.WriteTimeout < c.ReadTimeout {
		// The write deadline runs from the end of the headers, so it covers
		// reading the body too: shorter than the read one, it would cut
		// answers to bodies the read timeout allows.
		return fmt.Errorf("TOLLGATE_WRITE_TIMEOUT %s: want at least TOLLGATE_READ_TIMEOUT (%s)", c.WriteTimeout, c.ReadTimeout)
	}
	if v := getenv("TOLLGATE_AUDIT_RETENTION_DAYS"); v != "" {
		days, err := strconv.Atoi(v)
		if err != nil || days < 1 || days > 36500 {
			return fmt.Errorf("TOLLGATE_AUDIT_RETENTION_DAYS %q: want whole days, 1 to 36500", v)
		}
		c.AuditRetention = time.Duration(days) * 24 * time.Hour
	}
	if strings.HasPrefix(c.Addr, ":") {
		c.PublicURL = cmp.Or(getenv("TOLLGATE_PUBLIC_URL"), "http://localhost"+c.Addr)
	} else {
		c.PublicURL = cmp.Or(getenv("TOLLGATE_PUBLIC_URL"), "http://"+c.Addr)
	}
	if err := checkURL("TOLLGATE_PUBLIC_URL", c.PublicURL); err != nil {
		return err
	}
	// The development pepper is public: a dev server listens on every
	// interface only when TOLLGATE_ADDR names one (0.0.0.0:8080). Production
	// keeps ":8080", every interface, where its load balancer or Docker's
	// port mapping reaches it.
	if host, port, _ := net.SplitHostPort(c.Addr); c.Dev && host == "" {
		c.Addr = net.JoinHostPort("127.0.0.1", port)
	}
	return nil
}

// loadGRPC reads where Envoy's rate limit service listens, and its TLS
// certificate and key.
func loadGRPC(c *Config, getenv func(string) string) error {
	c.GRPCAddr = getenv("TOLLGATE_GRPC_ADDR")
	if c.GRPCAddr != "" {
		if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
			return fmt.Errorf("TOLLGATE_GRPC_ADDR %q: want host:port or :port", c.GRPCAddr)
		}
		if host, port, _ := net.SplitHostPort(c.GRPCAddr); c.Dev && host == "" {
			c.GRPCAddr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	c.GRPCTLSCert, c.GRPCTLSKey = getenv("TOLLGATE_GRPC_TLS_CERT"), getenv("TOLLGATE_GRPC_TLS_KEY")
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		return fmt.Errorf("TOLLGATE_GRPC_TLS_CERT and TOLLGATE_GRPC_TLS_KEY: set both (TLS) or neither (plaintext)")
	}
	if c.GRPCTLSCert != "" && c.GRPCAddr == "" {
		return fmt.Errorf("TOLLGATE_GRPC_TLS_CERT: set TOLLGATE_GRPC_ADDR too, or the certificate serves nothing")
	}
	return nil
}

// loadClients reads how clients are told apart and how many connections
// they may hold: TOLLGATE_TRUSTED_PROXIES, TOLLGATE_CLIENT_IP_HEADER (which
// needs them), TOLLGATE_IPV6_PREFIX and TOLLGATE_CONNS_PER_IP, _KEYLESS and
// _PER_TENANT.
func loadClients(c *Config, getenv func(string) string) error {
	var err error
	for _, entry := range strings.Split(getenv("TOLLGATE_TRUSTED_PROXIES"), ",") {
		s := strings.TrimSpace(entry)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			if ip := net.ParseIP(s); ip != nil && ip.To4() != nil {
				s += "/32"
			} else {
				s += "/128"
			}
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return fmt.Errorf("TOLLGATE_TRUSTED_PROXIES: %q is not an IP or CIDR", s)
		}
		if why := tooWideToTrust(n); why != "" {
			return fmt.Errorf("TOLLGATE_TRUSTED_PROXIES: %q trusts too much of the internet (%s): anyone connecting from inside it could name their own address in a forwarding header and pass every per-address limit", strings.TrimSpace(entry), why)
		}
		c.TrustedProxies = append(c.TrustedProxies, n)
	}
	if v := strings.ToLower(getenv("TOLLGATE_CLIENT_IP_HEADER")); v != "" {
		if !slices.Contains(clientIPHeaders, v) {
			return fmt.Errorf("TOLLGATE_CLIENT_IP_HEADER %q: want one of %s", v, strings.Join(clientIPHeaders, ", "))
		}
		if len(c.TrustedProxies) == 0 {
			return fmt.Errorf("TOLLGATE_CLIENT_IP_HEADER needs TOLLGATE_TRUSTED_PROXIES: the header is believed only from them")
		}
		c.ClientIPHeader = v
	}
	c.IPv6Prefix = 64
	if v := getenv("TOLLGATE_IPV6_PREFIX"); v != "" {
		if c.IPv6Prefix, err = strconv.Atoi(strings.TrimPrefix(v, "/")); err != nil || c.IPv6Prefix < 32 || c.IPv6Prefix > 128 {
			return fmt.Errorf("TOLLGATE_IPV6_PREFIX %q: want a prefix length from 32 to 128 (64 keys clients by /64)", v)
		}
	}
	for _, v := range []struct {
		name string
		to   *int
		def  int
	}{
		{"TOLLGATE_CONNS_PER_IP", &c.ConnsPerIP, httpapi.DefaultConnsPerIP},
		{"TOLLGATE_CONNS_KEYLESS", &c.ConnsKeyless, httpapi.DefaultConnsKeyless},
		{"TOLLGATE_CONNS_PER_TENANT", &c.ConnsPerTenant, httpapi.DefaultConnsPerTenant},
	} {
		*v.to = v.def
		if s := getenv(v.name); s != "" {
			if *v.to, err = strconv.Atoi(s); err != nil || *v.to < 1 || *v.to > 1_000_000 {
				return fmt.Errorf("%s %q: want a number of connections, 1 to 1000000", v.name, s)
			}
		}
	}
	if c.ConnsPerIP > c.ConnsKeyless {
		return fmt.Errorf("TOLLGATE_CONNS_PER_IP %d: want at most TOLLGATE_CONNS_KEYLESS (%d)", c.ConnsPerIP, c.ConnsKeyless)
	}
	return nil
}

// loadLimits reads what bounds the work: TOLLGATE_COUNTER_TIMEOUT,
// TOLLGATE_INSTANCE_CEILING, TOLLGATE_TENANT_INFLIGHT,
// TOLLGATE_TENANT_MAX_LEASES, TOLLGATE_TENANT_MAX_RESERVATIONS and
// TOLLGATE_MEMORY_MAX_KEYS.
func loadLimits(c *Config, getenv func(string) string) error {
	var err error
	c.CounterTimeout = 50 * time.Millisecond
	if v := getenv("TOLLGATE_COUNTER_TIMEOUT"); v != "" {
		if c.CounterTimeout, err = time.ParseDuration(v); err != nil || c.CounterTimeout < time.Millisecond || c.CounterTimeout > 10*time.Second {
			return fmt.Errorf("TOLLGATE_COUNTER_TIMEOUT %q: want a duration from 1ms to 10s", v)
		}
	}
	if v := getenv("TOLLGATE_INSTANCE_CEILING"); v != "" {
		if c.InstanceCeiling, err = strconv.ParseInt(v, 10, 64); err != nil || c.InstanceCeiling < 0 || c.InstanceCeiling > 10_000_000 {
			return fmt.Errorf("TOLLGATE_INSTANCE_CEILING %q: want requests a second, 0 (off) to 10000000", v)
		}
	}
	c.TenantInflight = 64
	if v := getenv("TOLLGATE_TENANT_INFLIGHT"); v != "" {
		if c.TenantInflight, err = strconv.ParseInt(v, 10, 64); err != nil || c.TenantInflight < 32 || c.TenantInflight > 1_000_000 {
			return fmt.Errorf("TOLLGATE_TENANT_INFLIGHT %q: want check items in progress per tenant and instance, 32 to 1000000", v)
		}
	}
	c.TenantMaxLeases = 10_000
	if v := getenv("TOLLGATE_TENANT_MAX_LEASES"); v != "" {
		if c.TenantMaxLeases, err = strconv.ParseInt(v, 10, 64); err != nil || c.TenantMaxLeases < 1 || c.TenantMaxLeases > 10_000_000 {
			return fmt.Errorf("TOLLGATE_TENANT_MAX_LEASES %q: want the leases one tenant may hold at once, 1 to 10000000", v)
		}
	}
	c.TenantMaxReservations = 10_000
	if v := getenv("TOLLGATE_TENANT_MAX_RESERVATIONS"); v != "" {
		if c.TenantMaxReservations, err = strconv.ParseInt(v, 10, 64); err != nil || c.TenantMaxReservations < 1 || c.TenantMaxReservations > 10_000_000 {
			return fmt.Errorf("TOLLGATE_TENANT_MAX_RESERVATIONS %q: want the live reservations one tenant may hold at once, 1 to 10000000", v)
		}
	}
	c.MemoryMaxKeys = 1_000_000
	if v := getenv("TOLLGATE_MEMORY_MAX_KEYS"); v != "" {
		if c.MemoryMaxKeys, err = strconv.Atoi(v); err != nil || c.MemoryMaxKeys < 1000 || c.MemoryMaxKeys > 100_000_000 {
			return fmt.Errorf("TOLLGATE_MEMORY_MAX_KEYS %q: want the counters the memory store holds, 1000 to 100000000", v)
		}
	}
	return nil
}

// loadWebhooks reads what tenants' webhooks may do:
// TOLLGATE_WEBHOOK_ALLOW_PRIVATE and TOLLGATE_WEBHOOK_TEST_SENDS.
func loadWebhooks(c *Config, getenv func(string) string) error {
	var err error
	if c.WebhookAllowPrivate, err = parseBool("TOLLGATE_WEBHOOK_ALLOW_PRIVATE", getenv("TOLLGATE_WEBHOOK_ALLOW_PRIVATE")); err != nil {
		return err
	}
	c.WebhookTestSends = httpapi.DefaultWebhookTestsPerMinute
	if v := getenv("TOLLGATE_WEBHOOK_TEST_SENDS"); v != "" {
		if c.WebhookTestSends, err = strconv.ParseInt(v, 10, 64); err != nil || c.WebhookTestSends < 1 || c.WebhookTestSends > 1_000_000 {
			return fmt.Errorf("TOLLGATE_WEBHOOK_TEST_SENDS %q: want the test events a tenant may send a minute, 1 to 1000000", v)
		}
	}
	return nil
}

// defaultMailFrom is the sender when TOLLGATE_MAIL_FROM is unset.
const defaultMailFrom = "Tollgate <no-reply@localhost>"

// smtpURLForms is what TOLLGATE_SMTP_URL's error asks for.
const smtpURLForms = "smtp://[user:password@]host:port[?starttls=require|off] or smtps://[user:password@]host:port"

// loadMail reads where email goes: TOLLGATE_MAIL_FROM (net/mail's rules)
// and TOLLGATE_SMTP_URL, checked as internal/mail will use it, so that a
// URL that could never send (or would send credentials unencrypted) stops
// start-up. Unset, mail goes to the development mailbox.
func loadMail(c *Config, getenv func(string) string) error {
	c.MailFrom = cmp.Or(getenv("TOLLGATE_MAIL_FROM"), defaultMailFrom)
	if _, err := mail.ParseFrom(c.MailFrom); err != nil {
		return fmt.Errorf("TOLLGATE_MAIL_FROM %q: %v; want an address such as %s", c.MailFrom, err, defaultMailFrom)
	}
	c.SMTPURL = getenv("TOLLGATE_SMTP_URL")
	if c.SMTPURL == "" {
		return nil
	}
	// NewSMTP's errors never show the password.
	if _, err := mail.NewSMTP(c.SMTPURL, c.MailFrom); err != nil {
		return fmt.Errorf("TOLLGATE_SMTP_URL: %v; want %s", err, smtpURLForms)
	}
	return nil
}

// LogValue shows the effective configuration with secrets masked.
func (c Config) LogValue() slog.Value {
	proxies := make([]string, len(c.TrustedProxies))
	for i, n := range c.TrustedProxies {
		proxies[i] = n.String()
	}
	db := maskURL(c.DatabaseURL)
	if db == "" {
		db = "embedded (" + c.DataDir + ")"
	}
	return slog.GroupValue(
		slog.String("database_url", db),
		slog.String("redis_url", maskURL(c.RedisURL)),
		slog.String("addr", c.Addr),
		slog.String("counter_store", c.CounterStore),
		slog.Duration("counter_timeout", c.CounterTimeout),
		slog.String("pepper", fmt.Sprintf("set (%d bytes)", len(c.Pepper))),
		slog.Bool("dev", c.Dev),
		slog.String("trusted_proxies", strings.Join(proxies, ",")),
		slog.Int64("instance_ceiling", c.InstanceCeiling),
		slog.String("client_ip_header", c.ClientIPHeader),
		slog.String("public_url", c.PublicURL),
		slog.Bool("secure_cookies", c.SecureCookies),
		slog.Bool("webhook_allow_private", c.WebhookAllowPrivate),
		slog.Int64("webhook_test_sends", c.WebhookTestSends),
		slog.Int("ipv6_prefix", c.IPv6Prefix),
		slog.Int64("tenant_inflight", c.TenantInflight),
		slog.Int("conns_per_ip", c.ConnsPerIP), slog.Int("conns_keyless", c.ConnsKeyless), slog.Int("conns_per_tenant", c.ConnsPerTenant),
		slog.Int64("tenant_max_leases", c.TenantMaxLeases), slog.Int64("tenant_max_reservations", c.TenantMaxReservations),
		slog.Duration("read_timeout", c.ReadTimeout),
		slog.Duration("write_timeout", c.WriteTimeout),
		slog.Duration("idle_timeout", c.IdleTimeout),
		slog.String("debug_addr", c.DebugAddr),
		slog.String("grpc_addr", c.GRPCAddr), slog.Bool("grpc_tls", c.GRPCTLSCert != ""),
		slog.Duration("audit_retention", c.AuditRetention),
		slog.String("log_format", c.LogFormat),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("smtp_url", cmp.Or(maskURL(c.SMTPURL), "unset (development mailbox)")),
		slog.String("mail_from", c.MailFrom),
		slog.String("stripe_webhook_secret", maskSecrets(c.StripeWebhookSecrets)),
		slog.String("stripe_api_key", maskStripeKey(c.StripeAPIKey)),
		slog.String("stripe_api_base", c.StripeAPIBase),
	)
}

// loadStripe reads the Stripe settings. All are optional: without a webhook
// secret /webhooks/stripe answers 503, without an API key Checkout, the
// portal and usage reporting are off.
func loadStripe(c *Config, getenv func(string) string) error {
	for _, s := range strings.Split(getenv("STRIPE_WEBHOOK_SECRET"), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.HasPrefix(s, "whsec_") || len(s) < 10 || strings.ContainsAny(s, " \t") {
			return fmt.Errorf("STRIPE_WEBHOOK_SECRET: want comma-separated signing secrets whsec_… (the endpoint's, or `stripe listen`'s)")
		}
		c.StripeWebhookSecrets = append(c.StripeWebhookSecrets, s)
	}
	c.StripeAPIKey = strings.TrimSpace(getenv("STRIPE_API_KEY"))
	if k := c.StripeAPIKey; k != "" && !strings.HasPrefix(k, "sk_") && !strings.HasPrefix(k, "rk_") {
		return fmt.Errorf("STRIPE_API_KEY: want a secret (sk_…) or restricted (rk_…) key, not a publishable one")
	}
	c.StripeAPIBase = getenv("STRIPE_API_BASE")
	if v := c.StripeAPIBase; v != "" {
		if err := checkURL("STRIPE_API_BASE", v); err != nil {
			return err
		}
	}
	return nil
}

// maskSecrets says how many webhook secrets are set, not what they are.
func maskSecrets(s []string) string {
	switch len(s) {
	case 0:
		return "unset (webhooks answer 503)"
	case 1:
		return "set (1 secret)"
	}
	return fmt.Sprintf("set (%d secrets)", len(s))
}

// maskStripeKey shows a key's kind and mode (sk_test, rk_live), never the
// secret part.
func maskStripeKey(k string) string {
	if k == "" {
		return "unset (checkout, portal and usage reporting off)"
	}
	parts := strings.SplitN(k, "_", 3)
	if len(parts) == 3 {
		return parts[0] + "_" + parts[1] + "_xxxxx"
	}
	return "set"
}

// secretParams are the parts of a query parameter's name (compared without
// case) that make maskURL hide its value: password, sslpassword, passfile,
// pwd, client_secret, token, auth, sslkey, api_key, credentials. The rule is
// wide on purpose: hiding a harmless value (a key file's path) costs a
// reader little, showing a secret costs everyone.
var secretParams = []string{"pass", "pwd", "secret", "token", "auth", "key", "cred"}

// maskURL hides every password-like part of a connection URL: the
// userinfo's password and the value of each query parameter whose name
// contains one of secretParams. A value that is not a URL with a scheme (a
// key=value DSN, say) is hidden whole, since its secrets cannot be told
// apart; the empty string stays empty.
func maskURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return "xxxxx"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "xxxxx"
		} else {
			for name, vs := range q {
				if isSecretParam(name) {
					for i := range vs {
						vs[i] = "xxxxx"
					}
				}
			}
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

func isSecretParam(name string) bool {
	name = strings.ToLower(name)
	for _, p := range secretParams {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

func parseBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: want 1 or 0", name, v)
	}
	return b, nil
}
