package webhooks

import (
	"context"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// RotationGrace is how long the secret an endpoint had before a rotation
// still signs its deliveries, so that a tenant can move its receivers over.
const RotationGrace = 24 * time.Hour

// Service is what the tenant API and the dashboard call: endpoints checked
// and their secrets made and sealed before they reach the Store, whose
// other methods it passes on. Safe for concurrent use.
type Service struct {
	Store
	Sealer *Sealer
	// AllowPrivate accepts http:// URLs and addresses on loopback and
	// private networks (TOLLGATE_WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	// budgetSeen holds the keys of the budget thresholds written
	// (BudgetLevel), under budgetMu.
	budgetMu   sync.Mutex
	budgetSeen map[string]struct{}
}

// Created is a new endpoint and its signing secret, which is shown this
// once.
type Created struct {
	Endpoint
	Secret string `json:"secret"`
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Create registers an endpoint for tenantID: ErrInvalid (a *FieldError)
// for a URL or event list it may not have, ErrTooMany past MaxEndpoints.
func (s *Service) Create(ctx context.Context, tenantID, rawURL string, events []string) (Created, error) {
	u, err := CheckURL(rawURL, s.AllowPrivate)
	if err != nil {
		return Created{}, err
	}
	evs, err := checkEvents(events)
	if err != nil {
		return Created{}, err
	}
	sealed, shown := s.Sealer.newSecret()
	e, err := s.CreateEndpoint(ctx, tenantID, u, evs, sealed, MaxEndpoints)
	if err != nil {
		return Created{}, err
	}
	return Created{Endpoint: e, Secret: shown}, nil
}

// Rotate gives the endpoint a new secret, shown this once; the old one
// signs too for RotationGrace.
func (s *Service) Rotate(ctx context.Context, tenantID, id string) (Created, error) {
	sealed, shown := s.Sealer.newSecret()
	e, err := s.RotateSecret(ctx, tenantID, id, sealed, s.now().Add(RotationGrace))
	if err != nil {
		return Created{}, err
	}
	return Created{Endpoint: e, Secret: shown}, nil
}

// CheckURL returns the endpoint URL u as stored, or a *FieldError: at most
// MaxURLLength bytes, absolute, https (or http when allowPrivate), a host,
// no user or password, not an address literal that delivery would refuse,
// and no IPv4 address written other than as a dotted quad. Names are
// checked when a delivery connects, after DNS.
func CheckURL(raw string, allowPrivate bool) (string, error) {
	bad := func(reason string) (string, error) { return "", &FieldError{Field: "url", Reason: reason} }
	if len(raw) > MaxURLLength {
		return bad("must be at most 2048 bytes")
	}
	if !utf8.ValidString(raw) || strings.ContainsAny(raw, " \t\r\n") {
		return bad("must be a URL without spaces")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return bad("must be an absolute URL such as https://example.com/hooks")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	default:
		return bad("must use https")
	}
	if u.User != nil {
		return bad("must not carry a user name or password")
	}
	if u.Fragment != "" {
		return bad("must not have a fragment")
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := refusedAddr(ip, allowPrivate); why != "" {
			return bad("must not point at a " + why + " address")
		}
	} else if endsInNumber(host) {
		// A resolver (inet_aton: 127.1, 2130706433, 0x7f000001, 0177.0.0.1)
		// or a browser may read it as an IPv4 address; what it would reach
		// is not worth guessing.
		return bad("must name its host by a name or by a dotted-quad IPv4 address such as 192.0.2.1")
	} else if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		if !allowPrivate {
			return bad("must not point at a loopback address")
		}
	}
	return u.String(), nil
}

// endsInNumber reports whether host's last label (after one trailing dot)
// is a number, decimal or 0x hexadecimal: the WHATWG URL standard's test for
// a host to be read as an IPv4 address. No top-level domain is one.
func endsInNumber(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	digits := "0123456789"
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		last, digits = last[2:], "0123456789abcdefABCDEF"
		if last == "" {
			return true
		}
	}
	return last != "" && strings.Trim(last, digits) == ""
}

// checkEvents returns events sorted without repeats, or a *FieldError for
// a list that is empty or names a type not in EventTypes.
func checkEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, &FieldError{Field: "events", Reason: "must name at least one of " + strings.Join(EventTypes, ", ")}
	}
	if len(events) > 2*len(EventTypes) {
		return nil, &FieldError{Field: "events", Reason: "has too many entries"}
	}
	out := make([]string, 0, len(events))
	for _, ev := range events {
		if !slices.Contains(EventTypes, ev) {
			return nil, &FieldError{Field: "events", Reason: "must name only " + strings.Join(EventTypes, ", ")}
		}
		if !slices.Contains(out, ev) {
			out = append(out, ev)
		}
	}
	slices.Sort(out)
	return out, nil
}
