package rls

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// invalid is an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// validate checks a request's shape before anything is looked up: a
// malformed one is answered with a status, never counted.
func validate(in *rlsv3.RateLimitRequest) error {
	d := in.GetDescriptors()
	switch {
	case in.GetDomain() == "":
		return invalid("domain is required")
	case len(in.GetDomain()) > MaxText || !utf8.ValidString(in.GetDomain()):
		return invalid("domain: at most %d bytes of UTF-8", MaxText)
	case len(d) == 0:
		return invalid("at least one descriptor is required")
	case len(d) > MaxDescriptors:
		return invalid("%d descriptors: at most %d a request", len(d), MaxDescriptors)
	}
	for i, desc := range d {
		es := desc.GetEntries()
		if len(es) == 0 {
			return invalid("descriptors[%d]: at least one entry is required", i)
		}
		if len(es) > MaxEntries {
			return invalid("descriptors[%d]: %d entries, at most %d", i, len(es), MaxEntries)
		}
		for j, e := range es {
			if e.GetKey() == "" {
				return invalid("descriptors[%d].entries[%d]: key is required", i, j)
			}
			if len(e.GetKey()) > MaxText || len(e.GetValue()) > MaxText {
				return invalid("descriptors[%d].entries[%d]: key and value at most %d bytes each", i, j, MaxText)
			}
		}
		if desc.GetLimit() != nil {
			return invalid("descriptors[%d]: a descriptor's own limit (RateLimitOverride) is not supported: limits live in the tenant's policies or its uploaded configuration", i)
		}
	}
	return nil
}

// plan is how a request's descriptors are answered: each by an item of
// the check, or by a status of its own.
type plan struct {
	domain string
	mode   gate.Mode
	items  []gate.Item
	// item is each descriptor's index in items; -1 when it has none.
	item []int
	// fixed is the status of each descriptor without an item.
	fixed []*rlsv3.RateLimitResponse_DescriptorStatus
	// rules are the rules of the items, for their units; nil for a
	// native item.
	rules []*envoyconf.Rule
	// denied is a descriptor a rule of requests_per_unit 0 refuses.
	denied bool
}

// ok is the status of a descriptor nothing limits.
func ok() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

// plan maps in's descriptors to the items of one check of tenantID.
func (s *Service) plan(ctx context.Context, tenantID string, in *rlsv3.RateLimitRequest) (*plan, error) {
	ds := in.GetDescriptors()
	p := &plan{domain: in.GetDomain(), item: make([]int, len(ds)), fixed: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	costs := make([]uint64, 0, len(ds))
	cost := func(d *ratelimitv3.RateLimitDescriptor) uint64 {
		if h := d.GetHitsAddend(); h != nil {
			return h.GetValue()
		}
		return uint64(max(in.GetHitsAddend(), 1))
	}
	// A descriptor carrying the ChargeKey entry counts hits after the fact:
	// the entry is no part of what it names.
	entries := make([][]*ratelimitv3.RateLimitDescriptor_Entry, len(ds))
	charged := make([]bool, len(ds))
	for i, d := range ds {
		for _, e := range d.GetEntries() {
			if e.GetKey() == ChargeKey {
				charged[i] = true
				continue
			}
			entries[i] = append(entries[i], e)
		}
	}
	var itemCharged []bool
	var conf *envoyconf.Config
	if s.cfg.Domains != nil {
		var err error
		if conf, err = s.cfg.Domains(ctx, tenantID, in.GetDomain()); err != nil {
			return nil, s.statusOf(err)
		}
	}
	if conf != nil {
		named := make([][]envoyconf.Entry, len(ds))
		for i := range ds {
			for _, e := range entries[i] {
				named[i] = append(named[i], envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()})
			}
		}
		for i, m := range conf.MatchAll(named) {
			p.item[i] = -1
			switch r := m.Rule; {
			case m.Unlimited:
				// As envoyproxy/ratelimit answers an unlimited rule.
				p.fixed[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			case r == nil:
				p.fixed[i] = ok()
			case r.Deny:
				p.denied = true
				p.fixed[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
					CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, Unit: unitOf(r.Policy.Window.Length, r.Policy.Window.Month)}}
			default:
				p.item[i] = len(p.items)
				p.items = append(p.items, gate.Item{Policy: r.Policy.Name, Subject: m.Subject, Rule: &r.Policy})
				p.rules = append(p.rules, r)
				costs = append(costs, cost(ds[i]))
				itemCharged = append(itemCharged, charged[i])
			}
		}
	} else {
		for i, d := range ds {
			p.item[i] = -1
			es := entries[i]
			if len(es) == 0 || es[0].GetKey() != "policy" {
				p.fixed[i] = ok()
				continue
			}
			values := make([]string, 0, len(es)-1)
			for _, e := range es[1:] {
				values = append(values, e.GetValue())
			}
			p.item[i] = len(p.items)
			p.items = append(p.items, gate.Item{Policy: es[0].GetValue(), Subject: strings.Join(values, "|")})
			p.rules = append(p.rules, nil)
			costs = append(costs, cost(d))
			itemCharged = append(itemCharged, charged[i])
		}
	}
	if err := p.setCosts(costs); err != nil {
		return nil, err
	}
	return p, p.setCharge(itemCharged)
}

// ChargeKey is the descriptor entry that makes a request a charge
// (gate.Charge): its hits are counted past the limit if need be, as usage
// that happened already. Envoy adds it to the rate limit it applies on
// stream done (apply_on_stream_done, hits_addend from the response) with a
// generic_key action; the entry names nothing, and is left out of the
// descriptor's subject and of its match in an uploaded configuration.
const ChargeKey = "tollgate.charge"

// setCharge makes a counting check a charge when its items' descriptors
// carry ChargeKey (charged[k] for item k): all of them, or none, as a
// request is counted whole.
func (p *plan) setCharge(charged []bool) error {
	n := 0
	for _, c := range charged {
		if c {
			n++
		}
	}
	switch {
	case n == 0:
		return nil
	case n < len(charged):
		return invalid("%d of %d counting descriptors carry %q: a request is a charge whole, or not at all", n, len(charged), ChargeKey)
	case p.mode == gate.Consume:
		p.mode = gate.Charge
	}
	// A charge of hits_addend 0 counts nothing: it is answered as a peek.
	return nil
}

// descriptor is the index of the descriptor of the check's item k.
func (p *plan) descriptor(k int) int {
	for i, at := range p.item {
		if at == k {
			return i
		}
	}
	return k
}

// setCosts gives each item its cost: hits_addend. A request whose items
// all have 0 peeks (answers without counting); 0 beside other costs
// cannot be one check.
func (p *plan) setCosts(costs []uint64) error {
	zeros := 0
	for _, c := range costs {
		if c == 0 {
			zeros++
		}
	}
	switch {
	case zeros == len(costs):
		p.mode = gate.Peek
		for i := range p.items {
			p.items[i].Cost = 1
		}
		return nil
	case zeros > 0:
		return invalid("a hits_addend of 0 (answer without counting) beside descriptors that count: Tollgate counts a request all or nothing")
	}
	p.mode = gate.Consume
	for i, c := range costs {
		if c > uint64(gate.MaxCost) {
			return invalid("hits_addend %d: at most %d", c, gate.MaxCost)
		}
		p.items[i].Cost = int64(c)
	}
	return nil
}

// answer is the response for v, the verdict of the plan's check (the zero
// Verdict when the plan was denied before any check).
func (p *plan) answer(v gate.Verdict, now time.Time) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(p.item))}
	if p.denied {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i, at := range p.item {
		if at < 0 {
			out.Statuses[i] = p.fixed[i]
			continue
		}
		if p.denied || at >= len(v.Items) {
			// Not checked: another descriptor refused the request first.
			out.Statuses[i] = ok()
			continue
		}
		it := v.Items[at]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: it.Policy, RequestsPerUnit: clamp(it.Limit), Unit: unitOfItem(it, p.rules[at])},
			LimitRemaining:     clamp(it.Remaining),
			DurationUntilReset: durationpb.New(max(0, it.ResetAt.Sub(now))),
		}
		if r := p.rules[at]; r != nil && r.Name != "" {
			st.CurrentLimit.Name = r.Name
		}
		if !it.Allowed && !it.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		out.Statuses[i] = st
	}
	if !p.denied {
		out.ResponseHeadersToAdd = headers(v)
	}
	return out
}

// refused answers a request a ceiling refused: every descriptor over the
// limit, the ceiling named in the headers.
func refused(v gate.Verdict, n int) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, ResponseHeadersToAdd: headers(v)}
	r := v.Refusal
	for range max(n, 1) {
		out.Statuses = append(out.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: r.Layer, RequestsPerUnit: clamp(r.Limit), Unit: unitOf(r.Window, false)},
			DurationUntilReset: durationpb.New(r.RetryAfter),
		})
	}
	return out
}

// headers are the response headers Envoy adds to its answer: the RateLimit
// fields by gate's rule, Retry-After on a refusal, and
// x-tollgate-degraded when a fail mode decided.
func headers(v gate.Verdict) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	if rl := v.RateLimit(); rl.Policy != "" {
		hs = append(hs, &corev3.HeaderValue{Key: "ratelimit-policy", Value: rl.Policy}, &corev3.HeaderValue{Key: "ratelimit", Value: rl.Fields})
		if rl.RetryAfter > 0 {
			hs = append(hs, &corev3.HeaderValue{Key: "retry-after", Value: fmt.Sprint(rl.RetryAfter)})
		}
	}
	if v.Degraded || v.Refusal != nil && v.Refusal.Degraded {
		hs = append(hs, &corev3.HeaderValue{Key: "x-tollgate-degraded", Value: "true"})
	}
	return hs
}

// unitOfItem is the unit of an item's policy: its rule's, or, for a
// native policy, the window its verdict reports (a calendar month's is
// that month's length, which no unit is).
func unitOfItem(it gate.ItemVerdict, r *envoyconf.Rule) rlsv3.RateLimitResponse_RateLimit_Unit {
	if r != nil {
		return unitOf(r.Policy.Window.Length, r.Policy.Window.Month)
	}
	return unitOf(it.Window, false)
}

// unitOf is Envoy's unit for a window that is exactly one; UNKNOWN for
// any other (Envoy's x-ratelimit headers need a unit: Tollgate's own
// RateLimit fields carry the exact window).
func unitOf(length time.Duration, month bool) rlsv3.RateLimitResponse_RateLimit_Unit {
	if month {
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	}
	switch length {
	case time.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// clamp is n as a uint32 field holds it.
func clamp(n int64) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }
