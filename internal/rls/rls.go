// Package rls is Envoy's rate limit service: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit) that Envoy
// and everything built on it (Istio, Contour, Gloo, Emissary) call from
// their rate limit filter, answered by Tollgate's admission pipeline.
//
// The tenant is the API key in the call's metadata (authorization: Bearer
// tg_live_…, which Envoy's grpc_service.initial_metadata sets). A request's
// descriptors become the items of one check (ShouldRateLimit), in one of two
// ways:
//
//   - in a domain the tenant uploaded a configuration for (envoyproxy/
//     ratelimit's YAML, internal/policy/envoyconf), each descriptor is
//     matched as envoyproxy/ratelimit matches it, and a rule that applies
//     is checked as an inline policy under the descriptor's subject;
//   - in any other domain, a descriptor whose first entry is
//     ("policy", NAME) is a check of the tenant's policy NAME, the values
//     of its other entries, joined by "|", being the subject.
//
// Everything else is answered OK and counts nothing, as envoyproxy/
// ratelimit answers a descriptor no rule matches. The check is all or
// nothing across the request's descriptors, as every Tollgate check is:
// nothing is counted for a request that is refused (envoyproxy/ratelimit
// counts every descriptor of a request even when one of them refuses it).
//
// rls imports the gate, the policy model and envoyconf, go-control-plane's
// generated types and grpc; no storage, no HTTP.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Route names the service's checks for the per-IP layer and the observers.
const Route = "envoy-rls"

// Bounds of one request, beside the gRPC message's (MaxMessage).
const (
	// MaxDescriptors is a check's items: one descriptor, one item.
	MaxDescriptors = gate.MaxItems
	// MaxEntries bounds a descriptor's entries.
	MaxEntries = envoyconf.MaxDepth
	// MaxText bounds a key or a value, and a domain.
	MaxText = envoyconf.MaxText
	// MaxMessage bounds a request message, in bytes: far above what
	// MaxDescriptors descriptors of MaxEntries entries of MaxText bytes
	// take.
	MaxMessage = 256 << 10
)

// Gate is the admission pipeline (gate.Gate).
type Gate interface {
	Identify(ctx context.Context, req gate.Request) (gate.Identity, gate.Verdict, error)
	Admit(ctx context.Context, req gate.Request) (gate.Verdict, error)
}

// Domains returns a tenant's configuration of an Envoy domain, or nil (and
// no error) when the tenant uploaded none for it.
type Domains func(ctx context.Context, tenantID, domain string) (*envoyconf.Config, error)

// Config configures a Service. Gate is required; without Domains every
// domain is native.
type Config struct {
	Gate    Gate
	Domains Domains
	Log     *slog.Logger
	// IPv6Prefix is the network an IPv6 caller is keyed by in the per-IP
	// layer, as the HTTP layer keys its clients (default 64).
	IPv6Prefix int
	// Now is the clock for durations until reset; default time.Now.
	Now func() time.Time
}

// Service answers ShouldRateLimit.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg Config
}

// New returns a Service for cfg.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.IPv6Prefix <= 0 || cfg.IPv6Prefix > 128 {
		cfg.IPv6Prefix = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

// Register adds the service to g.
func (s *Service) Register(g grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit answers one request of Envoy's rate limit filter.
func (s *Service) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	bearer, err := bearerOf(ctx)
	if err != nil {
		return nil, err
	}
	req := gate.Request{Route: Route, ClientIP: s.callerOf(ctx), Bearer: bearer}
	id, v, err := s.cfg.Gate.Identify(ctx, req)
	if err != nil {
		return nil, s.statusOf(err)
	}
	if v.Refusal != nil {
		return refused(v, len(in.GetDescriptors())), nil
	}
	req.Identity = id
	if err := validate(in); err != nil {
		return nil, err
	}
	plan, err := s.plan(ctx, id.Tenant().ID, in)
	if err != nil {
		return nil, err
	}
	if plan.denied {
		// A rule of requests_per_unit 0: refused, and nothing counted.
		return plan.answer(gate.Verdict{}, s.cfg.Now()), nil
	}
	if len(plan.items) > 0 {
		req.Check = &gate.Check{Mode: plan.mode, Items: plan.items}
	}
	// Without items the call still passes the ceilings (its tenant's
	// quotas count it), as any other request of the API does.
	v, err = s.cfg.Gate.Admit(ctx, req)
	if err != nil {
		var fe *policy.FieldError
		if errors.As(err, &fe) {
			field, reason := fe.ClientFault()
			return nil, status.Error(codes.InvalidArgument, plan.describe(field, reason))
		}
		return nil, s.statusOf(err)
	}
	if v.Refusal != nil {
		return refused(v, len(in.GetDescriptors())), nil
	}
	return plan.answer(v, s.cfg.Now()), nil
}

// bearerOf reads the API key from the call's metadata.
func bearerOf(ctx context.Context) (string, error) {
	// ValueFromIncomingContext copies the one entry, not the whole map as
	// FromIncomingContext does (2 % of the service's CPU a call).
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated, `no API key: send "authorization: Bearer <key>" in the call's metadata (Envoy: grpc_service.initial_metadata)`)
	}
	if len(vals) > 1 {
		return "", status.Error(codes.Unauthenticated, "more than one authorization entry in the call's metadata")
	}
	key, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || key == "" {
		return "", status.Error(codes.Unauthenticated, `the authorization metadata must be "Bearer <key>"`)
	}
	return key, nil
}

// callerOf is the address of the call's peer (Envoy), an IPv6 one cut to
// its network; the zero Addr when it has none.
func (s *Service) callerOf(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	return addrOf(p.Addr, s.cfg.IPv6Prefix)
}

// statusOf is the gRPC status of the pipeline's error.
func (s *Service) statusOf(err error) error {
	var fe *policy.FieldError
	switch {
	case errors.Is(err, tenant.ErrUnauthorized):
		return status.Error(codes.Unauthenticated, "the API key is missing, unknown, expired or revoked")
	case errors.Is(err, tenant.ErrDisabled):
		return status.Error(codes.PermissionDenied, "this workspace is disabled by the operator: every key of it is refused until it is enabled again")
	case errors.As(err, &fe):
		field, reason := fe.ClientFault()
		if field != "" {
			reason = field + ": " + reason
		}
		return status.Error(codes.InvalidArgument, reason)
	case errors.Is(err, gate.ErrInvalid):
		return status.Error(codes.InvalidArgument, "invalid request")
	case errors.Is(err, gate.ErrBusy):
		return status.Error(codes.ResourceExhausted, "the tenant's work in progress is at its bound on this instance: retry in a second")
	case errors.Is(err, gate.ErrUnavailable), errors.Is(err, gate.ErrStoreUnavailable), errors.Is(err, policy.ErrUnavailable):
		return status.Error(codes.Unavailable, "the tenant's configuration cannot be read now: retry")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	s.cfg.Log.Error("rate limit service", "err", err)
	return status.Error(codes.Internal, "internal error")
}

// describe words a field error of the check's items for the descriptors
// they came from: items[k] is descriptors[i].
func (p *plan) describe(field, reason string) string {
	var k int
	if rest, ok := strings.CutPrefix(field, "items["); ok {
		if _, err := fmt.Sscanf(rest, "%d]", &k); err == nil {
			field = fmt.Sprintf("descriptors[%d]%s", p.descriptor(k), rest[strings.IndexByte(rest, ']')+1:])
		}
	}
	if field == "" {
		return reason
	}
	return field + ": " + reason
}
