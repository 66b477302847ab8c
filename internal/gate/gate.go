package gate

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TenantSource resolves API keys, tenants and plans (tenant.Directory).
type TenantSource interface {
	Authenticate(ctx context.Context, bearer string) (tenant.Key, tenant.Tenant, error)
	Plan(ctx context.Context, name string) (tenant.Plan, error)
	MaxIPPerMinute(ctx context.Context) int64
}

// PolicySource returns a tenant's policies (policy.Catalog).
type PolicySource interface {
	For(ctx context.Context, tenantID string) (policy.Set, error)
}

// Config configures a Gate. Store and Local are required; Tenants and
// Policies too, unless the Gate only serves PublicGate.
type Config struct {
	// Store is the shared counter store: the per-IP L2, the quotas, the
	// allotments, the tenants' policies and the leases of concurrency
	// policies (concurrency.go), exact across instances.
	Store counter.Store
	// Local is this instance's in-memory counter store (counter/memory,
	// bounded: DESIGN §3's L1 of 50,000 keys): the instance ceiling, the
	// pre-authentication bucket, the per-IP L1 damper and the counts of
	// keys that failed to authenticate, none of which leave the process.
	// Its clock should be Now. The caller closes it.
	Local    counter.Store
	Tenants  TenantSource
	Policies PolicySource
	Observer admission.Observer // may be nil
	Metrics  *metrics.Metrics
	// StoreName names Store in the metrics' store label: "postgres",
	// "redis" or "memory" (default "unknown").
	StoreName string
	Logger    *slog.Logger
	// Pepper keys the HMACs of subjects and client IPs.
	Pepper []byte
	// InstanceCeiling is the requests per second this instance accepts; 0 is
	// off.
	InstanceCeiling int64
	// BreakerFailures consecutive store failures of one tenant's calls open
	// that tenant's breaker for BreakerOpenFor (defaults 5 and 1 s).
	BreakerFailures int
	BreakerOpenFor  time.Duration
	// TenantInflight is how many units of work one tenant may have in
	// progress on this instance (a check weighs checkWeight, any other
	// request 1; default DefaultTenantInflight), and InflightWait how
	// long a request beyond it waits for its turn before it is refused
	// (default 100 ms).
	TenantInflight int64
	InflightWait   time.Duration
	// TenantMaxLeases bounds the leases of concurrency policies one tenant
	// holds at once, across its policies and subjects, live and test keys
	// together (default DefaultTenantMaxLeases): what a tenant keeps in the
	// store is bounded whatever its subjects.
	TenantMaxLeases int64
	// TenantMaxReservations bounds the live reservations one tenant holds
	// at once, across its policies and subjects, live and test keys
	// together (default DefaultTenantMaxReservations), as TenantMaxLeases
	// bounds its leases.
	TenantMaxReservations int64
	// AuthFailuresPerMinute is how many requests with a key that does not
	// authenticate one client network may send a minute (default 60);
	// beyond it they are refused before the key is looked up.
	AuthFailuresPerMinute int64
	Now                   func() time.Time
}

// The matching budget of each tenant on each instance (matchBudget): 5 % of
// one processor's time, in bursts of up to 2 ms (a few of the heaviest
// checks: a longer burst lets a tenant's flood start with a train of them
// that holds up the next tenant's checks). The heaviest check the
// API allows spends about 0.6 ms matching, so a tenant sending nothing else
// gets some 80 of them a second per instance; a tenant with a few wildcard
// patterns spends microseconds a check and never waits.
const (
	matchShare = 0.05
	matchBurst = 2 * time.Millisecond
	// matchWait is the longest a check waits for its tenant's matching
	// budget before it is refused.
	matchWait = time.Second
	// tryCost estimates a wildcard try before it is measured.
	tryCost = 500 * time.Nanosecond
)

// DefaultTenantInflight is Config.TenantInflight's default: 64 units let one
// tenant keep 64 one-item checks in progress on an instance (tens of
// thousands of checks a second at a store round trip of a few
// milliseconds), two checks of 32 items, or one of the heaviest the API
// allows; what the tenant sends beyond that waits its turn behind its own
// work, not in front of other tenants'.
const DefaultTenantInflight = 64

// DefaultTenantMaxLeases is Config.TenantMaxLeases's default.
const DefaultTenantMaxLeases = 10_000

// Gate runs the admission pipeline. It is safe for concurrent use.
type Gate struct {
	cfg      Config
	advances *advances
	clients  *clientKeyCache
	met      instruments
	// digest is HMAC-SHA-256 under the pepper, domain-separated by kind
	// ("subject", "ip").
	digest   *digest.Digester
	breakers *breakers
	inflight *inflight
	matching *matchBudget
	logMu    sync.Mutex
	lastLog  time.Time
	lastCall time.Time // the last store call failure logged (storeCall)
	// takeAlone makes a batch's checks take their per-IP L1 and advance
	// units one by one, the path batchRequests falls back to (tests);
	// noRefills keeps batches from refilling advances (tests).
	takeAlone, noRefills bool
	// refills counts the refills granted (tests).
	refills atomic.Int64
}

// New returns a Gate, or an error when a required part is missing.
func New(cfg Config) (*Gate, error) {
	if cfg.Store == nil || cfg.Local == nil {
		return nil, errors.New("gate: a shared and a local counter store are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.BreakerOpenFor == 0 {
		cfg.BreakerOpenFor = time.Second
	}
	if cfg.TenantInflight <= 0 {
		cfg.TenantInflight = DefaultTenantInflight
	}
	// One check may weigh up to MaxItems: a budget below that would refuse
	// the largest checks for ever.
	cfg.TenantInflight = max(cfg.TenantInflight, MaxItems)
	if cfg.InflightWait <= 0 {
		cfg.InflightWait = 100 * time.Millisecond
	}
	if cfg.TenantMaxLeases <= 0 {
		cfg.TenantMaxLeases = DefaultTenantMaxLeases
	}
	cfg.TenantMaxLeases = min(cfg.TenantMaxLeases, limit.MaxLimit)
	if cfg.TenantMaxReservations <= 0 {
		cfg.TenantMaxReservations = DefaultTenantMaxReservations
	}
	cfg.TenantMaxReservations = min(cfg.TenantMaxReservations, limit.MaxLimit)
	if cfg.AuthFailuresPerMinute <= 0 {
		cfg.AuthFailuresPerMinute = 60
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StoreName == "" {
		cfg.StoreName = "unknown"
	}
	return &Gate{
		cfg:      cfg,
		met:      newInstruments(cfg.Metrics, cfg.StoreName),
		advances: newAdvances(),
		clients:  newClientKeyCache(),
		digest:   digest.New(cfg.Pepper),
		breakers: newBreakers(cfg.BreakerFailures, cfg.BreakerOpenFor, maxBreakers, cfg.Metrics.BreakerOpen.WithLabelValues(cfg.StoreName)),
		inflight: newInflight(cfg.TenantInflight, cfg.InflightWait),
		matching: newMatchBudget(matchShare, matchBurst),
	}, nil
}

// maxBreakers bounds how many tenants' failing circuits are tracked.
const maxBreakers = 100_000

// Request is one tenant request as the pipeline sees it.
type Request struct {
	// Route names the endpoint ("check", "policies", "usage", …); per-IP
	// counters are kept per route.
	Route string
	// ClientIP is the resolved client address (for IPv6, the network the
	// HTTP layer keys clients by); the zero Addr means it could not be
	// resolved, and every such request of a route shares one bucket.
	ClientIP netip.Addr
	// Bearer is the API key from the Authorization header, without "Bearer ".
	Bearer string
	// Check is the /v1/check body; nil for other routes (a batch's checks
	// and a lease are AdmitBatch's and Acquire's arguments).
	Check *Check
	// Identity is who Identify found the request to be from its headers,
	// before its body was read: the steps Identify took (the instance
	// ceiling, the pre-authentication bucket, the key) are not taken
	// again. The zero Identity means the request has not been identified.
	Identity Identity
}

// Identity is a request's tenant and key as Identify found them from its
// headers. Only Identify makes one; the zero Identity is nobody.
type Identity struct {
	tenant tenant.Tenant
	key    tenant.Key
	// client is the request's client keys, found once.
	client *clientKeys
}

// Known reports whether id was made by Identify.
func (id Identity) Known() bool { return id.key.ID != "" }

// Tenant is the tenant id authenticated.
func (id Identity) Tenant() tenant.Tenant { return id.tenant }

// Key is the API key id was authenticated by.
func (id Identity) Key() tenant.Key { return id.key }

// Check is the body of a /v1/check call.
type Check struct {
	Mode  Mode
	Items []Item
}

// Mode is how a check counts: Consume, or Peek, which answers without
// counting. The gate's callers speak of it without the counter contract.
type Mode = counter.Mode

const (
	Consume = counter.Consume
	Peek    = counter.Peek
	// Charge counts the items' costs after the fact, past their limits if
	// need be (counter.Charger): usage that happened already (Envoy's
	// apply_on_stream_done), which a refusal would only leave uncounted.
	// It is never refused by the policies; the ceilings count it as a
	// settlement (per-IP and quotas, not the allotment). The counter
	// stores' Check never sees it.
	Charge Mode = 2
)

// The counter store's answers the gate passes on, for its callers to tell
// apart (errors.Is): a counter store that could not answer (a Limiter's
// too), a lease or a reservation that is gone, a reservation settled with
// another amount.
var (
	ErrStoreUnavailable = counter.ErrUnavailable
	ErrNoLease          = counter.ErrNoLease
	ErrNoReservation    = counter.ErrNoReservation
	ErrSettled          = counter.ErrSettled
)

// Item is one policy to check for one subject.
type Item struct {
	Policy  string
	Subject string
	Cost    int64
	// Rule, when set, is the policy itself, named Policy, rather than one
	// of the tenant's policies looked up by that name: a rule of an Envoy
	// domain's configuration (internal/policy/envoyconf), whose name cannot
	// be a policy's, so its counters are its own.
	Rule *policy.Policy
}

// Verdict is the pipeline's answer. When Refusal is set a ceiling refused
// and the caller answers 429 (or 402); otherwise Items answer the check.
type Verdict struct {
	Tenant  tenant.Tenant
	Key     tenant.Key
	Refusal *admission.Refusal
	// Allowed is true when no ceiling refused and every enforced policy item
	// allowed.
	Allowed  bool
	Degraded bool
	Items    []ItemVerdict
	// Tightest is the layer or policy closest to refusing (the smallest
	// share of its limit left, then the fewest left), for the RateLimit
	// headers of an allowed answer.
	Tightest Quota
	// Lease answers Acquire's lease, and Reservation Reserve's
	// reservation, when no ceiling refused.
	Lease       *LeaseVerdict
	Reservation *ReservationVerdict
}

// ItemVerdict answers one check item.
type ItemVerdict struct {
	Policy string
	limit.Decision
	// Window is the length of the policy's window at the decision (a
	// calendar month's is that month's).
	Window   time.Duration
	Shadow   bool
	Degraded bool
}

// Quota is one limit as the RateLimit header fields describe it.
type Quota struct {
	Name      string
	Limit     int64
	Remaining int64
	Window    time.Duration
	ResetIn   time.Duration
}
