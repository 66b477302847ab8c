package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

func TestParse(t *testing.T) {
	t.Parallel()
	minute := limit.Every(time.Minute)
	tests := []struct {
		name string
		body string
		want Policy
	}{
		{"defaults", `{"limit":10,"window":"1m"}`,
			Policy{Name: "p", Limit: 10, Window: minute, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"every field", `{"limit":8,"window":"15m","algorithm":"sliding_window","scope":"global","fail_mode":"closed","shadow":true,"alert_after":3}`,
			Policy{Name: "p", Limit: 8, Window: limit.Every(15 * time.Minute), Algorithm: limit.SlidingWindow, Scope: ScopeGlobal,
				FailMode: FailClosed, Shadow: true, AlertAfter: 3}},
		{"token bucket", `{"limit":1000000000,"window":"720h","algorithm":"token_bucket"}`,
			Policy{Name: "p", Limit: limit.MaxLimit, Window: limit.Every(720 * time.Hour), Algorithm: limit.TokenBucket,
				Scope: ScopeSubject, FailMode: FailOpen}},
		{"month", `{"limit":1,"window":"month","algorithm":"fixed_window"}`,
			Policy{Name: "p", Limit: 1, Window: limit.Month, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"days", `{"limit":1,"window":"30d"}`,
			Policy{Name: "p", Limit: 1, Window: limit.Every(720 * time.Hour), Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"nulls take defaults", `{"limit":1,"window":"1s","algorithm":null,"scope":null,"fail_mode":null,"shadow":null,"alert_after":null}`,
			Policy{Name: "p", Limit: 1, Window: limit.Every(time.Second), Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"read-only members sent back", `{"name":"p","limit":1,"window":"1m","created_at":"2026-01-01T00:00:00Z","updated_at":"x"}`,
			Policy{Name: "p", Limit: 1, Window: minute, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"concurrency", `{"limit":10,"algorithm":"concurrency","scope":"global","fail_mode":"closed","alert_after":2}`,
			Policy{Name: "p", Limit: 10, Algorithm: limit.Concurrency, Scope: ScopeGlobal, FailMode: FailClosed, AlertAfter: 2}},
		{"concurrency, null window", `{"limit":1,"window":null,"algorithm":"concurrency","shadow":false}`,
			Policy{Name: "p", Limit: 1, Algorithm: limit.Concurrency, Scope: ScopeSubject, FailMode: FailOpen}},
		{"a budget in tokens, released on expiry", `{"limit":100000,"window":"month","unit":"tokens","on_expiry":"release"}`,
			Policy{Name: "p", Limit: 100000, Window: limit.Month, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen,
				Unit: "tokens", ReleaseOnExpiry: true}},
		{"settle on expiry, no unit", `{"limit":1,"window":"1m","unit":"","on_expiry":"settle"}`,
			Policy{Name: "p", Limit: 1, Window: minute, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
		{"concurrency, null unit and on_expiry", `{"limit":1,"algorithm":"concurrency","unit":null,"on_expiry":null}`,
			Policy{Name: "p", Limit: 1, Algorithm: limit.Concurrency, Scope: ScopeSubject, FailMode: FailOpen}},
		{"whitespace", " \n{ \"limit\" : 2 , \"window\" : \"1m\" }\n",
			Policy{Name: "p", Limit: 2, Window: minute, Algorithm: limit.FixedWindow, Scope: ScopeSubject, FailMode: FailOpen}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("p", []byte(tt.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, policy, body string
		field, reason      string // reason: a substring
	}{
		{"empty name", "", `{"limit":1,"window":"1m"}`, "name", "1 to 64 characters"},
		{"long name", strings.Repeat("a", 65), `{"limit":1,"window":"1m"}`, "name", "1 to 64"},
		{"upper-case name", "Sign-in", `{"limit":1,"window":"1m"}`, "name", "a-z"},
		{"name starts with a dot", ".x", `{"limit":1,"window":"1m"}`, "name", "starting with a letter or digit"},
		{"name with a slash", "a/b", `{"limit":1,"window":"1m"}`, "name", "a-z"},
		{"name mismatch", "p", `{"name":"q","limit":1,"window":"1m"}`, "name", "must match the name in the path"},
		{"empty body", "p", ``, "", "must be a JSON object"},
		{"null body", "p", `null`, "", "must be a JSON object"},
		{"array body", "p", `[1]`, "", "must be a JSON object"},
		{"bad JSON", "p", `{"limit":1,`, "", "not valid JSON"},
		{"trailing data", "p", `{"limit":1,"window":"1m"} {}`, "", "not valid JSON"},
		{"too large", "p", `{"limit":1,"window":"1m","x":"` + strings.Repeat("a", MaxBody) + `"}`, "", "at most 16384 bytes"},
		{"unknown field", "p", `{"limit":1,"window":"1m","burst":3}`, "burst", "unknown field"},
		{"missing limit", "p", `{"window":"1m"}`, "limit", "is required"},
		{"null limit", "p", `{"limit":null,"window":"1m"}`, "limit", "is required"},
		{"zero limit", "p", `{"limit":0,"window":"1m"}`, "limit", "from 1 to 1000000000"},
		{"negative limit", "p", `{"limit":-1,"window":"1m"}`, "limit", "from 1 to"},
		{"huge limit", "p", `{"limit":1000000001,"window":"1m"}`, "limit", "from 1 to"},
		{"overflowing limit", "p", `{"limit":99999999999999999999,"window":"1m"}`, "limit", "from 1 to"},
		{"fractional limit", "p", `{"limit":1.5,"window":"1m"}`, "limit", "integer"},
		{"string limit", "p", `{"limit":"10","window":"1m"}`, "limit", "integer"},
		{"missing window", "p", `{"limit":1}`, "window", "is required"},
		{"numeric window", "p", `{"limit":1,"window":60}`, "window", "must be a string"},
		{"short window", "p", `{"limit":1,"window":"500ms"}`, "window", `from "1s" to "720h"`},
		{"long window", "p", `{"limit":1,"window":"721h"}`, "window", "month"},
		{"31 days", "p", `{"limit":1,"window":"31d"}`, "window", `"1d" to "30d"`},
		{"fractional seconds", "p", `{"limit":1,"window":"1.5s"}`, "window", "duration"},
		{"gibberish window", "p", `{"limit":1,"window":"weekly"}`, "window", "duration"},
		{"unknown algorithm", "p", `{"limit":1,"window":"1m","algorithm":"leaky_bucket"}`, "algorithm", `"token_bucket"`},
		{"numeric algorithm", "p", `{"limit":1,"window":"1m","algorithm":1}`, "algorithm", "must be a string"},
		{"month with sliding window", "p", `{"limit":1,"window":"month","algorithm":"sliding_window"}`, "window", `only by algorithm "fixed_window"`},
		{"month with token bucket", "p", `{"limit":1,"window":"month","algorithm":"token_bucket"}`, "window", "fixed_window"},
		{"unknown scope", "p", `{"limit":1,"window":"1m","scope":"ip"}`, "scope", `"subject" or "global"`},
		{"unknown fail mode", "p", `{"limit":1,"window":"1m","fail_mode":"half"}`, "fail_mode", `"open" or "closed"`},
		{"string shadow", "p", `{"limit":1,"window":"1m","shadow":"yes"}`, "shadow", "true or false"},
		{"negative alert_after", "p", `{"limit":1,"window":"1m","alert_after":-1}`, "alert_after", "from 0 to"},
		{"fractional alert_after", "p", `{"limit":1,"window":"1m","alert_after":0.5}`, "alert_after", "integer"},
		{"concurrency with a window", "p", `{"limit":1,"window":"1m","algorithm":"concurrency"}`, "window", `has no window`},
		{"concurrency in shadow", "p", `{"limit":1,"algorithm":"concurrency","shadow":true}`, "shadow", "cannot be shadow"},
		{"concurrency without a limit", "p", `{"algorithm":"concurrency"}`, "limit", "is required"},
		{"concurrency with a unit", "p", `{"limit":1,"algorithm":"concurrency","unit":"jobs"}`, "unit", "holds leases"},
		{"concurrency with on_expiry", "p", `{"limit":1,"algorithm":"concurrency","on_expiry":"settle"}`, "on_expiry", "holds leases"},
		{"upper-case unit", "p", `{"limit":1,"window":"1m","unit":"Tokens"}`, "unit", "a-z"},
		{"long unit", "p", `{"limit":1,"window":"1m","unit":"` + strings.Repeat("u", 17) + `"}`, "unit", "at most 16"},
		{"numeric unit", "p", `{"limit":1,"window":"1m","unit":1}`, "unit", "must be a string"},
		{"unknown on_expiry", "p", `{"limit":1,"window":"1m","on_expiry":"refund"}`, "on_expiry", `"release"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.policy, []byte(tt.body))
			checkFieldError(t, err, tt.field, tt.reason)
		})
	}
}

func checkFieldError(t *testing.T, err error, field, reason string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v does not wrap ErrInvalid", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if fe.Field != field {
		t.Errorf("field: got %q, want %q (reason %q)", fe.Field, field, fe.Reason)
	}
	if !strings.Contains(fe.Reason, reason) {
		t.Errorf("reason: got %q, want it to contain %q", fe.Reason, reason)
	}
}

func TestParseOverride(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	exp := time.Date(2026, 12, 1, 0, 0, 0, 123456000, time.UTC)
	tests := []struct {
		name, pattern, body string
		want                Override
	}{
		{"no expiry", "user-1", `{"limit":5}`, Override{Pattern: "user-1", Limit: 5}},
		{"null expiry", "203.0.113.*", `{"limit":5,"expires_at":null}`, Override{Pattern: "203.0.113.*", Limit: 5}},
		{"expiry in another zone, nanoseconds dropped", "*", `{"limit":5,"expires_at":"2026-12-01T01:00:00.123456789+01:00"}`,
			Override{Pattern: "*", Limit: 5, ExpiresAt: &exp}},
		{"pattern sent back", "a/b*", `{"pattern":"a/b*","limit":5}`, Override{Pattern: "a/b*", Limit: 5}},
		{"any UTF-8", "ünïcødé*", `{"limit":1}`, Override{Pattern: "ünïcødé*", Limit: 1}},
		{"256 bytes", strings.Repeat("a", 256), `{"limit":1}`, Override{Pattern: strings.Repeat("a", 256), Limit: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseOverride(tt.pattern, []byte(tt.body), now)
			if err != nil {
				t.Fatalf("parseOverride: %v", err)
			}
			if got.Pattern != tt.want.Pattern || got.Limit != tt.want.Limit ||
				(got.ExpiresAt == nil) != (tt.want.ExpiresAt == nil) ||
				got.ExpiresAt != nil && !got.ExpiresAt.Equal(*tt.want.ExpiresAt) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if got.ExpiresAt != nil && got.ExpiresAt.Location() != time.UTC {
				t.Errorf("expires_at in %v, want UTC", got.ExpiresAt.Location())
			}
		})
	}
}

func TestParseOverrideErrors(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	tests := []struct {
		name, pattern, body string
		field, reason       string
	}{
		{"empty pattern", "", `{"limit":1}`, "pattern", "1 to 256 bytes"},
		{"long pattern", strings.Repeat("a", 257), `{"limit":1}`, "pattern", "1 to 256 bytes"},
		{"control character", "a\nb", `{"limit":1}`, "pattern", "without control"},
		{"NUL", "a\x00", `{"limit":1}`, "pattern", "without control"},
		{"DEL", "a\x7f", `{"limit":1}`, "pattern", "without control"},
		{"C1 control", "a\u0085", `{"limit":1}`, "pattern", "without control"},
		{"invalid UTF-8", "a\xff", `{"limit":1}`, "pattern", "UTF-8"},
		{"double star", "a**", `{"limit":1}`, "pattern", `write one "*"`},
		{"right-to-left override", "user\u202e1", `{"limit":1}`, "pattern", "bidirectional formatting"},
		{"isolate", "\u2066admin\u2069*", `{"limit":1}`, "pattern", "bidirectional formatting"},
		{"right-to-left mark", "a\u200fb", `{"limit":1}`, "pattern", "bidirectional formatting"},
		{"five stars", "*a*b*c*d*", `{"limit":1}`, "pattern", `at most 4 "*"`},
		{"pattern mismatch", "a", `{"pattern":"b","limit":1}`, "pattern", "must match the pattern in the path"},
		{"bad JSON", "a", `{`, "", "not valid JSON"},
		{"unknown field", "a", `{"limit":1,"expires":"2027-01-01T00:00:00Z"}`, "expires", "unknown field"},
		{"missing limit", "a", `{"expires_at":null}`, "limit", "is required"},
		{"zero limit", "a", `{"limit":0}`, "limit", "from 1 to"},
		{"huge limit", "a", `{"limit":2000000000}`, "limit", "from 1 to"},
		{"not a time", "a", `{"limit":1,"expires_at":"tomorrow"}`, "expires_at", "RFC 3339"},
		{"date only", "a", `{"limit":1,"expires_at":"2027-01-01"}`, "expires_at", "RFC 3339"},
		{"numeric time", "a", `{"limit":1,"expires_at":1893456000}`, "expires_at", "RFC 3339"},
		{"past", "a", `{"limit":1,"expires_at":"2026-11-29T13:59:59Z"}`, "expires_at", "in the future"},
		{"now", "a", `{"limit":1,"expires_at":"2026-11-29T14:00:00Z"}`, "expires_at", "in the future"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseOverride(tt.pattern, []byte(tt.body), now)
			checkFieldError(t, err, tt.field, tt.reason)
		})
	}
}

func TestParseOverrideUsesTheClock(t *testing.T) {
	t.Parallel()
	if _, err := ParseOverride("a", []byte(`{"limit":1,"expires_at":"2000-01-01T00:00:00Z"}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("an expiry in 2000: got %v, want ErrInvalid", err)
	}
	if _, err := ParseOverride("a", []byte(`{"limit":1,"expires_at":"2999-01-01T00:00:00Z"}`)); err != nil {
		t.Errorf("an expiry in 2999: %v", err)
	}
}

func TestFormatWindow(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"1s": "1s", "90s": "1m30s", "60s": "1m", "1m": "1m", "15m": "15m", "60m": "1h", "1h": "1h",
		"90m": "1h30m", "3601s": "1h0m1s", "36h": "36h", "24h": "1d", "720h": "30d", "7d": "7d", "month": "month",
	} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			w, err := limit.ParseWindow(in)
			if err != nil {
				t.Fatal(err)
			}
			got := FormatWindow(w)
			if got != want {
				t.Errorf("got %q, want %q", got, want)
			}
			if back, err := limit.ParseWindow(got); err != nil || back != w {
				t.Errorf("ParseWindow(%q) = %v, %v; want %v", got, back, err, w)
			}
		})
	}
}

func TestMarshalJSONRoundTrips(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 14, 0, 0, 0, time.FixedZone("x", 3600))
	p := Policy{Name: "sign-in", Limit: 8, Window: limit.Every(15 * time.Minute), Algorithm: limit.TokenBucket,
		Scope: ScopeSubject, FailMode: FailClosed, Shadow: true, AlertAfter: 5, Unit: "tokens", ReleaseOnExpiry: true, CreatedAt: at, UpdatedAt: at}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"sign-in","limit":8,"window":"15m","algorithm":"token_bucket","scope":"subject","fail_mode":"closed",` +
		`"shadow":true,"alert_after":5,"unit":"tokens","on_expiry":"release","created_at":"2026-11-29T13:00:00Z","updated_at":"2026-11-29T13:00:00Z"}`
	if string(body) != want {
		t.Errorf("got  %s\nwant %s", body, want)
	}
	// What a client read it may send back.
	back, err := Parse("sign-in", body)
	if err != nil {
		t.Fatal(err)
	}
	p.CreatedAt, p.UpdatedAt = time.Time{}, time.Time{}
	if back != p {
		t.Errorf("round trip: got %+v, want %+v", back, p)
	}

	// A concurrency policy has no window: null, and read back as none.
	c := Policy{Name: "jobs", Limit: 3, Algorithm: limit.Concurrency, Scope: ScopeGlobal, FailMode: FailOpen}
	body, err = json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"name":"jobs","limit":3,"window":null,"algorithm":"concurrency","scope":"global","fail_mode":"open",` +
		`"shadow":false,"alert_after":0,"created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z"}`
	if string(body) != want {
		t.Errorf("concurrency: got  %s\nwant %s", body, want)
	}
	if back, err := Parse("jobs", body); err != nil || back != c {
		t.Errorf("concurrency round trip: got %+v, %v; want %+v", back, err, c)
	}

	o, err := json.Marshal(Override{Pattern: "a*", Limit: 3})
	if err != nil || string(o) != `{"pattern":"a*","limit":3,"expires_at":null}` {
		t.Errorf("override: got %s, %v", o, err)
	}
	o, err = json.Marshal(Override{Pattern: "a", Limit: 3, ExpiresAt: &at})
	if err != nil || string(o) != `{"pattern":"a","limit":3,"expires_at":"2026-11-29T13:00:00Z"}` {
		t.Errorf("override with expiry: got %s, %v", o, err)
	}
}

func TestErrorsText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
		is   error
	}{
		{&FieldError{Field: "limit", Reason: "is required"}, "limit: is required", ErrInvalid},
		{&FieldError{Reason: "body must be a JSON object"}, "body must be a JSON object", ErrInvalid},
		{&NotFoundError{Policy: "p"}, `policy "p" not found`, ErrNotFound},
		{&NotFoundError{Policy: "p", Pattern: "a*"}, `override "a*" of policy "p" not found`, ErrNotFound},
		{ErrTooManyPolicies, "a tenant may hold at most 1000 policies: delete one first", ErrInvalid},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, tt.is) {
			t.Errorf("%v does not wrap %v", tt.err, tt.is)
		}
	}
}
