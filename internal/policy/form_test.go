package policy_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

func TestParseForm(t *testing.T) {
	t.Parallel()
	minute := limit.Every(time.Minute)
	tests := []struct {
		name      string
		form      url.Values
		want      policy.Policy
		wantField string // non-empty: a *FieldError naming it
	}{
		{"defaults for empty fields", url.Values{"limit": {" 10 "}, "window": {"1m"}, "alert_after": {""}},
			policy.Policy{Name: "p", Limit: 10, Window: minute, Algorithm: limit.FixedWindow, Scope: policy.ScopeSubject, FailMode: policy.FailOpen}, ""},
		{"every field", url.Values{"limit": {"8"}, "window": {"15m"}, "algorithm": {"sliding_window"}, "scope": {"global"},
			"fail_mode": {"closed"}, "shadow": {"on"}, "alert_after": {"3"}, "unit": {"tokens"}, "on_expiry": {"release"}},
			policy.Policy{Name: "p", Limit: 8, Window: limit.Every(15 * time.Minute), Algorithm: limit.SlidingWindow, Scope: policy.ScopeGlobal,
				FailMode: policy.FailClosed, Shadow: true, AlertAfter: 3, Unit: "tokens", ReleaseOnExpiry: true}, ""},
		{"concurrency's window none", url.Values{"limit": {"5"}, "window": {"none"}, "algorithm": {"concurrency"}},
			policy.Policy{Name: "p", Limit: 5, Algorithm: limit.Concurrency, Scope: policy.ScopeSubject, FailMode: policy.FailOpen}, ""},
		{"a limit that is no number", url.Values{"limit": {"ten"}, "window": {"1m"}}, policy.Policy{}, "limit"},
		{"a limit too large", url.Values{"limit": {"99999999999999999999"}, "window": {"1m"}}, policy.Policy{}, "limit"},
		{"no window", url.Values{"limit": {"1"}}, policy.Policy{}, "window"},
		{"a bad on_expiry", url.Values{"limit": {"1"}, "window": {"1m"}, "on_expiry": {"never"}}, policy.Policy{}, "on_expiry"},
		{"a concurrency policy's unit", url.Values{"limit": {"1"}, "algorithm": {"concurrency"}, "unit": {"tokens"}}, policy.Policy{}, "unit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := policy.ParseForm("p", tc.form.Get)
			if tc.wantField != "" {
				var fe *policy.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField || !errors.Is(err, policy.ErrInvalid) {
					t.Fatalf("err = %v, want a FieldError of %s", err, tc.wantField)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseOverrideForm(t *testing.T) {
	t.Parallel()
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	tests := []struct {
		name      string
		form      url.Values
		want      policy.Override
		wantField string
	}{
		{"no expiry", url.Values{"limit": {"50"}}, policy.Override{Pattern: "user:*", Limit: 50}, ""},
		{"datetime-local, taken as UTC", url.Values{"limit": {"50"}, "expires_at": {"2099-12-01T00:00"}},
			policy.Override{Pattern: "user:*", Limit: 50, ExpiresAt: at("2099-12-01T00:00:00Z")}, ""},
		{"datetime-local with seconds", url.Values{"limit": {"50"}, "expires_at": {"2099-12-01T00:00:30"}},
			policy.Override{Pattern: "user:*", Limit: 50, ExpiresAt: at("2099-12-01T00:00:30Z")}, ""},
		{"a limit that is no number", url.Values{"limit": {"lots"}}, policy.Override{}, "limit"},
		{"an expiry that is no time", url.Values{"limit": {"5"}, "expires_at": {"tomorrow"}}, policy.Override{}, "expires_at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := policy.ParseOverrideForm("user:*", tc.form.Get)
			if tc.wantField != "" {
				var fe *policy.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField {
					t.Fatalf("err = %v, want a FieldError of %s", err, tc.wantField)
				}
				return
			}
			if err != nil || got.Pattern != tc.want.Pattern || got.Limit != tc.want.Limit ||
				(got.ExpiresAt == nil) != (tc.want.ExpiresAt == nil) || (got.ExpiresAt != nil && !got.ExpiresAt.Equal(*tc.want.ExpiresAt)) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
