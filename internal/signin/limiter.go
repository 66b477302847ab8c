// Package signin is what Tollgate's two signed-in sites share of signing
// people in: the operators' dashboard (/admin) and, beside it, the tenants'
// console. It holds the sign-in limiter over Tollgate's own counters, the
// form tokens (CSRF), the safe "next" path after signing in, and the words
// that say how long to wait. Each site names its realm ("admin"), which
// keeps its counters and tokens apart from the other's.
package signin

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/kit/digest"
)

// The sign-in limits (DESIGN §7's sign-in protection, applied to Tollgate's
// own sign-ins).
const (
	// SignInsPerIP is the sign-in attempts one client IP may make per
	// minute (sliding window), whatever their outcome.
	SignInsPerIP = 10
	// FailuresPerAccount is the failed sign-ins one email may have from one
	// client IP (for IPv6, the network the client IP stands for) per 15
	// minutes (fixed window). It is peeked before the password is checked
	// and consumed only when the check fails, so a right password is never
	// refused for failures it did not cause, and the ninth failure from an
	// address within the window is refused before its password is tried.
	// Failures from one address do not lock the account for another: a
	// stranger's guesses cannot lock the account's owner out.
	FailuresPerAccount = 8
	// FailuresPerAccountEverywhere is the failed sign-ins one email may have
	// from all addresses together per 15 minutes, peeked and counted the
	// same way. It stops a guess spread over many addresses, at the price of
	// locking the account for everyone until the window ends: locking its
	// owner out takes failures from at least 13 addresses.
	FailuresPerAccountEverywhere = 100
	failureWindow                = 15 * time.Minute
)

// Limiter counts a realm's sign-ins with the gate's Limiter (the shared
// counter store, else this instance's memory). Keys are HMACs under the
// pepper: neither an IP nor an email is stored.
type Limiter struct {
	limits *gate.Limiter
	// digest is HMAC-SHA-256 under the pepper.
	digest *digest.Digester
	realm  string
}

// NewLimiter returns realm's limiter over limits (nil: none, for tests of
// its keys only).
func NewLimiter(limits *gate.Limiter, pepper []byte, realm string) *Limiter {
	return &Limiter{limits: limits, digest: digest.New(pepper), realm: realm}
}

// Refusal says which limit refused a sign-in and for how long.
type Refusal struct {
	By         string // "ip", "account", "account_everywhere", "signup", "mail" or "invite"
	Message    string
	RetryAfter time.Duration
}

// key is the counter key of value (an address, an email) for one kind of
// limit: 160 bits of its digest. The digest's input, "tollgate <realm>
// sign-in", a zero byte, kind, a zero byte and value, is what the
// dashboard's has always been, so that the counters of a window survive an
// upgrade.
func (l *Limiter) key(kind, value string) string {
	return l.realm + "-signin:" + kind + ":" + l.digest.Hex(20, "tollgate "+l.realm+" sign-in", kind, "\x00", value)
}

// clientKey is the client IP as a key part: an address (IPv4-mapped ones
// as IPv4) or, when Echo's IP extractor keys a client by its network, that
// network's first address; "unknown" for anything else.
func clientKey(ip string) string {
	if p, err := netip.ParsePrefix(ip); err == nil {
		if p.Bits() == p.Addr().BitLen() {
			return p.Addr().Unmap().String()
		}
		return p.Masked().Addr().Unmap().String()
	}
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return "unknown"
}

// ClientDigest is what logs and the audit log show of a client IP: the
// digest the API's per-IP counter keys use for the address (128 bits of its
// HMAC under the pepper), so that the two can be matched, never the address.
func (l *Limiter) ClientDigest(ip string) string {
	return l.digest.Hex(16, "ip", clientKey(ip))
}

// IPRule counts ip's sign-in attempts.
func (l *Limiter) IPRule(ip string) gate.Rule {
	return gate.Rule{Key: l.key("ip", clientKey(ip)), Limit: SignInsPerIP, Window: time.Minute}
}

// AccountRule counts email's failures from ip.
func (l *Limiter) AccountRule(ip, email string) gate.Rule {
	return gate.Rule{Key: l.key("account-ip", email+"\x00"+clientKey(ip)), Limit: FailuresPerAccount, Window: failureWindow, Fixed: true}
}

// EverywhereRule counts email's failures from every address.
func (l *Limiter) EverywhereRule(email string) gate.Rule {
	return gate.Rule{Key: l.key("account", email), Limit: FailuresPerAccountEverywhere, Window: failureWindow, Fixed: true}
}

// Admit counts a sign-in attempt from ip and peeks at email's failures,
// from ip and from everywhere, in one round trip: the IP item is the
// question's ceiling, counted when it allows even in peek mode
// (gate.Limits.Ceilings). It returns the refusal, or nil to go on.
func (l *Limiter) Admit(ctx context.Context, ip, email string) (*Refusal, error) {
	ds, err := l.limits.Check(ctx, gate.Limits{Peek: true, Ceilings: 1, Rules: []gate.Rule{l.IPRule(ip), l.AccountRule(ip, email), l.EverywhereRule(email)}})
	if err != nil {
		return nil, err
	}
	if d := ds[0]; !d.Allowed {
		return &Refusal{By: "ip", RetryAfter: d.RetryAfter,
			Message: fmt.Sprintf("Too many sign-in attempts from your network address: at most %d a minute.", SignInsPerIP)}, nil
	}
	if d := ds[1]; !d.Allowed {
		return &Refusal{By: "account", RetryAfter: d.RetryAfter,
			Message: fmt.Sprintf("Too many failed sign-ins for this account from your network address: at most %d in %d minutes.", FailuresPerAccount, int(failureWindow/time.Minute))}, nil
	}
	if d := ds[2]; !d.Allowed {
		return &Refusal{By: "account_everywhere", RetryAfter: d.RetryAfter,
			Message: fmt.Sprintf("Too many failed sign-ins for this account from everywhere: at most %d in %d minutes, after which it is locked for everyone until the time below.", FailuresPerAccountEverywhere, int(failureWindow/time.Minute))}, nil
	}
	return nil, nil
}

// Failed counts a failed sign-in of email from ip.
func (l *Limiter) Failed(ctx context.Context, ip, email string) error {
	_, err := l.limits.Check(ctx, gate.Limits{Rules: []gate.Rule{l.AccountRule(ip, email), l.EverywhereRule(email)}})
	return err
}

// SignUp counts an account made from ip against perHour accounts a client
// network may make an hour, and returns the refusal past it (nothing
// counted then), or nil.
func (l *Limiter) SignUp(ctx context.Context, ip string, perHour int64) (*Refusal, error) {
	return l.hourly(ctx, "signup", "signup", clientKey(ip), perHour,
		fmt.Sprintf("Too many accounts made from your network address: at most %d an hour.", perHour))
}

// Mail counts a mail of kind ("reset", "confirm") to to (an email, or a
// member's id) against perHour mails of kind to to an hour (fixed window),
// whichever network asks, so that no one can flood an address. It returns
// the refusal (nothing counted then), or nil to send.
func (l *Limiter) Mail(ctx context.Context, kind, to string, perHour int64) (*Refusal, error) {
	return l.hourly(ctx, "mail", "mail-"+kind, to, perHour,
		fmt.Sprintf("Enough of these emails went to this address: at most %d an hour.", perHour))
}

// Invitation counts an invitation tenantID sends against perHour
// invitations a tenant may send an hour (fixed window), and returns the
// refusal past it (nothing counted then), or nil.
func (l *Limiter) Invitation(ctx context.Context, tenantID string, perHour int64) (*Refusal, error) {
	return l.hourly(ctx, "invite", "invite", tenantID, perHour,
		fmt.Sprintf("Too many invitations from this workspace: at most %d an hour.", perHour))
}

// hourly counts one act of value's, keyed by kind, against perHour in a
// fixed hour, and returns the refusal by by, saying message, past it.
func (l *Limiter) hourly(ctx context.Context, by, kind, value string, perHour int64, message string) (*Refusal, error) {
	rule := gate.Rule{Key: l.key(kind, value), Limit: perHour, Window: time.Hour, Fixed: true}
	ds, err := l.limits.Check(ctx, gate.Limits{Rules: []gate.Rule{rule}})
	if err != nil {
		return nil, err
	}
	if d := ds[0]; !d.Allowed {
		return &Refusal{By: by, RetryAfter: d.RetryAfter, Message: message}, nil
	}
	return nil, nil
}

// Attempt counts a request from ip against its sign-in attempts (IPRule),
// for a form that checks a password or a token without an email to count
// failures against. It returns the refusal, or nil to go on.
func (l *Limiter) Attempt(ctx context.Context, ip string) (*Refusal, error) {
	ds, err := l.limits.Check(ctx, gate.Limits{Rules: []gate.Rule{l.IPRule(ip)}})
	if err != nil {
		return nil, err
	}
	if d := ds[0]; !d.Allowed {
		return &Refusal{By: "ip", RetryAfter: d.RetryAfter,
			Message: fmt.Sprintf("Too many attempts from your network address: at most %d a minute.", SignInsPerIP)}, nil
	}
	return nil, nil
}
