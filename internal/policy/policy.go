// Package policy holds a tenant's rate-limit policies and their per-subject
// overrides: the model, the parsing and validation of the JSON a tenant sends
// (DESIGN §2), the override precedence rules (Set), an in-memory cache of
// each tenant's policies (Catalog) in front of the Loader, and the Service
// that changes them through the Store; pgstore implements both.
//
// policy imports internal/limit, internal/kit/cache and the standard library
// only: no driver, no HTTP framework.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/limit"
)

// Sentinels; adapters translate their own errors into these.
var (
	// ErrInvalid is bad input from a client. Errors that wrap it and carry
	// text meant for the client are *FieldError.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound is a tenant, policy or override that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is a change that collides with another one.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable is a store that could not be reached or did not
	// answer in time: nothing was decided, and the client may retry.
	ErrUnavailable = errors.New("policy store unavailable")
)

// FieldError is a client's mistake in one field of its request, with a
// reason that is safe to show to that client. It unwraps to ErrInvalid.
type FieldError struct {
	// Field is the JSON member ("limit", "window", …) or path parameter
	// ("name", "pattern") at fault; empty when the request body as a whole is.
	Field string
	// Reason says what is wrong in words meant for the client.
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ClientFault returns the field at fault and the reason, the words meant
// for the client (the one client-safe error shape: httpapi shows them).
func (e *FieldError) ClientFault() (field, reason string) { return e.Field, e.Reason }

// NotFoundError names the policy or override that does not exist, in words
// safe to show to the client that asked for it. It unwraps to ErrNotFound.
type NotFoundError struct {
	Policy string
	// Pattern is empty when the policy itself is missing.
	Pattern string
}

func (e *NotFoundError) Error() string {
	if e.Pattern != "" {
		return fmt.Sprintf("override %q of policy %q not found", e.Pattern, e.Policy)
	}
	return fmt.Sprintf("policy %q not found", e.Policy)
}

// Unwrap returns ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ClientFault returns no field and the error's text, which names only what
// the client asked for.
func (e *NotFoundError) ClientFault() (field, reason string) { return "", e.Error() }

// Bounds on what a tenant may store, so that every input and every cached
// Set stays bounded.
const (
	// MaxPolicies is the number of policies one tenant may hold.
	MaxPolicies = 1000
	// MaxOverrides is the number of unexpired overrides one tenant may hold
	// over all its policies: every instance keeps them in memory, so the
	// bound is the tenant's, not each policy's.
	MaxOverrides = 10_000
	// MaxWildcards is the number of unexpired overrides with a "*" one policy
	// may hold. Exact overrides cost one map lookup per check whatever their
	// number; wildcard patterns may each be tried, so their number bounds a
	// check's cost.
	MaxWildcards = 32
	// MaxStars is the number of "*" one pattern may hold.
	MaxStars = 4
	// MaxBody is the largest request body Parse and ParseOverride read, in
	// bytes.
	MaxBody = 16 << 10
	// MaxAlertAfter bounds alert_after like limit.MaxLimit bounds a limit.
	MaxAlertAfter = limit.MaxLimit
	maxNameLen    = 64
	maxPatternLen = 256
)

// Errors a Store returns when a bound would be exceeded; both unwrap to
// ErrInvalid.
var (
	ErrTooManyPolicies  = &FieldError{Reason: fmt.Sprintf("a tenant may hold at most %d policies: delete one first", MaxPolicies)}
	ErrTooManyOverrides = &FieldError{Field: "pattern",
		Reason: fmt.Sprintf("a tenant may hold at most %d overrides over all its policies: delete one first", MaxOverrides)}
	// ErrTooManyWildcards refuses a wildcard override beyond MaxWildcards.
	ErrTooManyWildcards = &FieldError{Field: "pattern",
		Reason: fmt.Sprintf(`a policy may hold at most %d overrides with a "*": delete one first, or use exact subjects, which have no such bound`, MaxWildcards)}
	// ErrGlobalOverride refuses an override of a policy whose scope is
	// global: such a policy has one counter and no subject to match.
	ErrGlobalOverride = &FieldError{Field: "pattern",
		Reason: `the policy has scope "global": overrides apply to policies with scope "subject"`}
)

// Scope says what one counter of a policy counts.
type Scope string

// The scopes.
const (
	// ScopeSubject keeps one counter per subject named in a check.
	ScopeSubject Scope = "subject"
	// ScopeGlobal keeps one keyless counter for the whole policy: a ceiling
	// nothing in a request can influence.
	ScopeGlobal Scope = "global"
)

// FailMode says what a check answers when the counter store is unreachable.
type FailMode string

// The fail modes.
const (
	FailOpen   FailMode = "open"
	FailClosed FailMode = "closed"
)

// Policy is one named limit of a tenant.
type Policy struct {
	Name  string
	Limit int64
	// Window is the zero Window for a policy of algorithm limit.Concurrency,
	// which has none.
	Window    limit.Window
	Algorithm limit.Algorithm
	Scope     Scope
	FailMode  FailMode
	// Shadow policies always allow but count and report what they would
	// have decided.
	Shadow bool
	// AlertAfter raises an alert after this many refusals of one subject in
	// 24 hours; 0 means never.
	AlertAfter int64
	// Unit names what the policy counts ("tokens", "cents"), for display
	// only: 0 to 16 characters of a-z and "_", "" for none. A concurrency
	// policy has none.
	Unit string
	// ReleaseOnExpiry says what a reservation of the policy's budget
	// (POST /v1/reservations) that nobody settles comes to at its expiry:
	// given back whole (JSON "on_expiry": "release"), rather than kept at
	// its full amount ("settle", the default). A concurrency policy, which
	// holds leases rather than reservations, leaves it false.
	ReleaseOnExpiry bool
	// CreatedAt and UpdatedAt are set by the Store.
	CreatedAt, UpdatedAt time.Time
}

// Override replaces a policy's limit for the subjects its pattern matches.
type Override struct {
	// Pattern is an exact subject or a pattern in which each "*" stands for
	// any run of bytes, "/" included.
	Pattern string
	Limit   int64
	// ExpiresAt is when the override stops applying; nil means never.
	ExpiresAt *time.Time
}

// Active reports whether o still applies at instant now.
func (o Override) Active(now time.Time) bool {
	return o.ExpiresAt == nil || now.Before(*o.ExpiresAt)
}

// policyFields are the members Parse reads. The read-only members of the
// answer (name, created_at, updated_at) are accepted too, so that a client
// may send back what it read: name must then match the path, and the
// timestamps are ignored.
var policyFields = []string{"limit", "window", "algorithm", "scope", "fail_mode", "shadow", "alert_after",
	"unit", "on_expiry", "name", "created_at", "updated_at"}

// Budget reports whether p is a budget (issue 40): a windowed policy
// (any algorithm but concurrency) that names the unit it counts. The usage
// report, the dashboard and the budget.threshold webhooks show budgets
// alone: a policy without a unit counts requests, whatever reserves of it.
func (p Policy) Budget() bool {
	return p.Algorithm != limit.Concurrency && p.Unit != ""
}

// maxUnitLen bounds a policy's unit, a display name.
const maxUnitLen = 16

// The values of a policy's "on_expiry".
const (
	onExpirySettle  = "settle"
	onExpiryRelease = "release"
)

// Parse reads the JSON body of a request that creates or replaces the policy
// called name:
//
//	{"limit":10,"window":"1m","algorithm":"fixed_window","scope":"subject",
//	 "fail_mode":"open","shadow":false,"alert_after":0,"unit":"",
//	 "on_expiry":"settle"}
//
// limit and window are required; the rest default as shown. A policy of
// algorithm "concurrency" (at most limit leases in flight) has no window,
// no unit and no on_expiry (it holds leases, not reservations), and cannot
// be shadow. Every error is a *FieldError (so it wraps
// ErrInvalid). CreatedAt and UpdatedAt are zero.
func Parse(name string, body []byte) (Policy, error) {
	if err := ValidateName(name); err != nil {
		return Policy{}, err
	}
	f, err := decodeObject(body, policyFields)
	if err != nil {
		return Policy{}, err
	}
	p := Default(name)
	if err := f.readOnly("name", name, "must match the name in the path"); err != nil {
		return Policy{}, err
	}
	if p.Limit, err = f.integer("limit", 1, limit.MaxLimit, true); err != nil {
		return Policy{}, err
	}
	if a, ok, err := f.str("algorithm", false); err != nil {
		return Policy{}, err
	} else if ok {
		if p.Algorithm, err = limit.ParseAlgorithm(a); err != nil {
			return Policy{}, &FieldError{Field: "algorithm", Reason: `must be "fixed_window", "sliding_window", "token_bucket" or "concurrency"`}
		}
	}
	concurrency := p.Algorithm == limit.Concurrency
	w, ok, err := f.str("window", !concurrency)
	if err != nil {
		return Policy{}, err
	}
	switch {
	case ok && concurrency:
		return Policy{}, &FieldError{Field: "window",
			Reason: `a policy of algorithm "concurrency" has no window: it bounds the leases in flight, and a lease ends when it is released or its ttl runs out`}
	case ok:
		if p.Window, err = limit.ParseWindow(w); err != nil {
			return Policy{}, &FieldError{Field: "window",
				Reason: `must be a duration from "1s" to "720h" (such as "1m" or "15m"), "1d" to "30d", "month", or "billing" (the tenant's billing period)`}
		}
	}
	if s, ok, err := f.str("scope", false); err != nil {
		return Policy{}, err
	} else if ok {
		if p.Scope = Scope(s); p.Scope != ScopeSubject && p.Scope != ScopeGlobal {
			return Policy{}, &FieldError{Field: "scope", Reason: `must be "subject" or "global"`}
		}
	}
	if m, ok, err := f.str("fail_mode", false); err != nil {
		return Policy{}, err
	} else if ok {
		if p.FailMode = FailMode(m); p.FailMode != FailOpen && p.FailMode != FailClosed {
			return Policy{}, &FieldError{Field: "fail_mode", Reason: `must be "open" or "closed"`}
		}
	}
	if raw, ok := f.get("shadow"); ok {
		if err := json.Unmarshal(raw, &p.Shadow); err != nil {
			return Policy{}, &FieldError{Field: "shadow", Reason: "must be true or false"}
		}
	}
	if p.AlertAfter, err = f.integer("alert_after", 0, MaxAlertAfter, false); err != nil {
		return Policy{}, err
	}
	if err := parseBudget(f, &p, concurrency); err != nil {
		return Policy{}, err
	}
	if concurrency {
		if p.Shadow {
			// A shadow lease would have to be handed out beyond the limit
			// and still be told apart from a real one by every holder.
			return Policy{}, &FieldError{Field: "shadow", Reason: `a policy of algorithm "concurrency" cannot be shadow`}
		}
		return p, nil
	}
	// A calendar month has no constant length, which a sliding window and a
	// token bucket need.
	if p.Window.Month && p.Algorithm != limit.FixedWindow {
		return Policy{}, &FieldError{Field: "window", Reason: `"month" and "billing" are counted only by algorithm "fixed_window"`}
	}
	if err := limit.Validate(p.Algorithm, p.Limit, 1, p.Window); err != nil {
		// Unreachable while the checks above mirror limit.Validate; kept so
		// that a Policy Parse accepts is always one the counters accept.
		return Policy{}, &FieldError{Reason: "limit, window and algorithm do not combine"}
	}
	return p, nil
}

// parseBudget reads the members that describe a policy as a budget of
// reservations, unit and on_expiry, into p; a concurrency policy, whose
// leases are no budget, takes neither.
func parseBudget(f fields, p *Policy, concurrency bool) error {
	for _, name := range []string{"unit", "on_expiry"} {
		if _, ok := f.get(name); ok && concurrency {
			return &FieldError{Field: name, Reason: `a policy of algorithm "concurrency" holds leases, not a budget of reservations: it takes no unit or on_expiry`}
		}
	}
	u, _, err := f.str("unit", false)
	if err != nil {
		return err
	}
	if !validUnit(u) {
		return &FieldError{Field: "unit", Reason: `must be at most 16 characters of a-z and "_", such as "tokens" or "cents"`}
	}
	p.Unit = u
	switch e, _, err := f.str("on_expiry", false); {
	case err != nil:
		return err
	case e == "" || e == onExpirySettle:
	case e == onExpiryRelease:
		p.ReleaseOnExpiry = true
	default:
		return &FieldError{Field: "on_expiry", Reason: `must be "settle" (an unsettled reservation stays charged in full) or "release" (it is given back)`}
	}
	return nil
}

// validUnit reports whether u can be a policy's unit: 0 to maxUnitLen
// characters of a-z and "_".
func validUnit(u string) bool {
	if len(u) > maxUnitLen {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

// ValidateName reports, as a *FieldError for "name", whether name can name a
// policy: 1 to 64 characters of a-z, 0-9, ".", "_" and "-", the first a
// letter or digit.
func ValidateName(name string) error {
	ok := len(name) >= 1 && len(name) <= maxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return &FieldError{Field: "name",
			Reason: `must be 1 to 64 characters of a-z, 0-9, ".", "_" and "-", starting with a letter or digit`}
	}
	return nil
}

// ValidatePattern reports, as a *FieldError for "pattern", whether pattern
// can be an override's pattern: 1 to 256 bytes of UTF-8 without control or
// bidirectional formatting characters (which would make a pattern read
// differently on the dashboard from what it matches), at most MaxStars "*",
// and no "**" (which matches what "*" matches).
func ValidatePattern(pattern string) error {
	if len(pattern) < 1 || len(pattern) > maxPatternLen || !utf8.ValidString(pattern) ||
		strings.ContainsFunc(pattern, hidden) {
		return &FieldError{Field: "pattern",
			Reason: "must be 1 to 256 bytes of UTF-8 without control or bidirectional formatting characters: a subject, or a pattern in which * matches any run of characters"}
	}
	if strings.Count(pattern, "*") > MaxStars {
		return &FieldError{Field: "pattern", Reason: fmt.Sprintf(`at most %d "*" per pattern`, MaxStars)}
	}
	if strings.Contains(pattern, "**") {
		// Rejected rather than folded so that the longest-pattern rule
		// cannot be gamed by padding and every stored pattern is the one
		// the client sent.
		return &FieldError{Field: "pattern", Reason: `"**" matches what "*" matches: write one "*"`}
	}
	return nil
}

// hidden reports whether r is a character a reader would not see as written:
// a control character, or one that reorders text around it (U+202E and its
// kin, U+2066 to U+2069, the marks U+200E, U+200F and U+061C).
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// overrideFields are the members ParseOverride reads; pattern, if sent, must
// match the path (see policyFields).
var overrideFields = []string{"limit", "expires_at", "pattern"}

// ParseOverride reads the JSON body of a request that creates or replaces
// the override with the given pattern:
//
//	{"limit":100,"expires_at":"2026-12-01T00:00:00Z"}
//
// limit is required; expires_at is an RFC 3339 time in the future, or null
// (the default) for an override that never expires. ExpiresAt is returned in
// UTC, truncated to the microsecond the Store keeps. Every error is a
// *FieldError.
func ParseOverride(pattern string, body []byte) (Override, error) {
	return parseOverride(pattern, body, time.Now())
}

func parseOverride(pattern string, body []byte, now time.Time) (Override, error) {
	if err := ValidatePattern(pattern); err != nil {
		return Override{}, err
	}
	f, err := decodeObject(body, overrideFields)
	if err != nil {
		return Override{}, err
	}
	if err := f.readOnly("pattern", pattern, "must match the pattern in the path"); err != nil {
		return Override{}, err
	}
	o := Override{Pattern: pattern}
	if o.Limit, err = f.integer("limit", 1, limit.MaxLimit, true); err != nil {
		return Override{}, err
	}
	s, ok, err := f.str("expires_at", false)
	if err != nil {
		return Override{}, &FieldError{Field: "expires_at", Reason: `must be an RFC 3339 time such as "2026-12-01T00:00:00Z", or null`}
	}
	if ok {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return Override{}, &FieldError{Field: "expires_at", Reason: `must be an RFC 3339 time such as "2026-12-01T00:00:00Z", or null`}
		}
		t = t.UTC().Truncate(time.Microsecond)
		if !t.After(now) {
			return Override{}, &FieldError{Field: "expires_at", Reason: "must be in the future"}
		}
		o.ExpiresAt = &t
	}
	return o, nil
}

// Concurrent reports whether p is a concurrency policy, which bounds the
// leases in flight instead of counting requests in a window.
func (p Policy) Concurrent() bool { return p.Algorithm == limit.Concurrency }

// Default is the policy named name before a body says otherwise: a fixed
// window, per subject, failing open.
func Default(name string) Policy {
	return Policy{Name: name, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}
}

// MarshalJSON writes p in the shape Parse reads, plus name, created_at and
// updated_at; the window in its shortest form ("1m", "1h30m", "7d",
// "month"), null for a concurrency policy, which has no unit or on_expiry
// either (they are left out, so that what a client reads it may send back).
func (p Policy) MarshalJSON() ([]byte, error) {
	var window, unit, onExpiry *string
	if p.Algorithm != limit.Concurrency {
		w, e := FormatWindow(p.Window), onExpirySettle
		if p.ReleaseOnExpiry {
			e = onExpiryRelease
		}
		window, unit, onExpiry = &w, &p.Unit, &e
	}
	return json.Marshal(struct {
		Name       string    `json:"name"`
		Limit      int64     `json:"limit"`
		Window     *string   `json:"window"`
		Algorithm  string    `json:"algorithm"`
		Scope      Scope     `json:"scope"`
		FailMode   FailMode  `json:"fail_mode"`
		Shadow     bool      `json:"shadow"`
		AlertAfter int64     `json:"alert_after"`
		Unit       *string   `json:"unit,omitempty"`
		OnExpiry   *string   `json:"on_expiry,omitempty"`
		CreatedAt  time.Time `json:"created_at"`
		UpdatedAt  time.Time `json:"updated_at"`
	}{p.Name, p.Limit, window, p.Algorithm.String(), p.Scope, p.FailMode, p.Shadow, p.AlertAfter,
		unit, onExpiry, p.CreatedAt.UTC(), p.UpdatedAt.UTC()})
}

// MarshalJSON writes o as {"pattern","limit","expires_at"}, expires_at null
// when the override never expires.
func (o Override) MarshalJSON() ([]byte, error) {
	var exp *time.Time
	if o.ExpiresAt != nil {
		t := o.ExpiresAt.UTC()
		exp = &t
	}
	return json.Marshal(struct {
		Pattern   string     `json:"pattern"`
		Limit     int64      `json:"limit"`
		ExpiresAt *time.Time `json:"expires_at"`
	}{o.Pattern, o.Limit, exp})
}

// FormatWindow returns w in the shortest form limit.ParseWindow reads: "1m"
// rather than limit.Window.String's "1m0s", "7d" for whole days, "month".
func FormatWindow(w limit.Window) string {
	s := w.String()
	if w.Month || strings.HasSuffix(s, "d") {
		return s
	}
	// Windows are whole seconds, so Duration.String ends in "s" with no
	// fraction: drop the zero seconds and then the zero minutes.
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// fields is a decoded JSON object, member by member.
type fields map[string]json.RawMessage

// decodeObject reads body as one JSON object of at most MaxBody bytes whose
// members are all in known.
func decodeObject(body []byte, known []string) (fields, error) {
	if len(body) > MaxBody {
		return nil, &FieldError{Reason: "body must be at most " + strconv.Itoa(MaxBody) + " bytes"}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, &FieldError{Reason: "body must be a JSON object"}
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, &FieldError{Reason: fmt.Sprintf("body is not valid JSON (at byte %d): %s", se.Offset, se.Error())}
		}
		return nil, &FieldError{Reason: "body must be a JSON object"}
	}
	if f == nil {
		// The literal null.
		return nil, &FieldError{Reason: "body must be a JSON object"}
	}
	names := make([]string, 0, len(f))
	for k := range f {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) {
			return nil, &FieldError{Field: k, Reason: "unknown field"}
		}
	}
	return f, nil
}

// get returns a member that is present and not null.
func (f fields) get(name string) (json.RawMessage, bool) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// integer reads a whole number from lo to hi; an absent or null member is 0,
// or an error when required.
func (f fields) integer(name string, lo, hi int64, required bool) (int64, error) {
	raw, ok := f.get(name)
	if !ok {
		if required {
			return 0, &FieldError{Field: name, Reason: "is required"}
		}
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < lo || n > hi {
		return 0, &FieldError{Field: name, Reason: fmt.Sprintf("must be an integer from %d to %d", lo, hi)}
	}
	return n, nil
}

// str reads a string member; ok is false when it is absent or null.
func (f fields) str(name string, required bool) (s string, ok bool, err error) {
	raw, ok := f.get(name)
	if !ok {
		if required {
			return "", false, &FieldError{Field: name, Reason: "is required"}
		}
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, &FieldError{Field: name, Reason: "must be a string"}
	}
	return s, true, nil
}

// readOnly checks that a read-only member, when sent, repeats the path's value.
func (f fields) readOnly(name, want, reason string) error {
	if _, ok := f[name]; !ok {
		return nil
	}
	if s, ok, err := f.str(name, false); err != nil || !ok || s != want {
		return &FieldError{Field: name, Reason: reason}
	}
	return nil
}
