package limit_test

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/limit"
)

func TestParseWindow(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in   string
		want limit.Window
	}{
		{"1s", limit.Every(time.Second)},
		{"90s", limit.Every(90 * time.Second)},
		{"15m", limit.Every(15 * time.Minute)},
		{"1h", limit.Every(time.Hour)},
		{"720h", limit.Every(720 * time.Hour)},
		{"30d", limit.Every(30 * 24 * time.Hour)},
		{"1d", limit.Every(24 * time.Hour)},
		{"month", limit.Month},
		{"billing", limit.BillingPeriod},
		{"1m30s", limit.Every(90 * time.Second)},
		{"1.5m", limit.Every(90 * time.Second)},
	}
	for _, tc := range valid {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := limit.ParseWindow(tc.in)
			if err != nil {
				t.Fatalf("ParseWindow(%q) error = %v, want nil", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseWindow(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
	invalid := []string{
		"0s", "500ms", "1500ms", "721h", "31d", "0d", "-1d", "d", "abc", "1.5s",
		"-1m", "", "Month", "1 d", "1.5d", "2562047h",
	}
	for _, in := range invalid {
		t.Run("invalid "+in, func(t *testing.T) {
			t.Parallel()
			got, err := limit.ParseWindow(in)
			if !errors.Is(err, limit.ErrInvalid) {
				t.Fatalf("ParseWindow(%q) = %+v, %v; want an error wrapping ErrInvalid", in, got, err)
			}
			if got != (limit.Window{}) {
				t.Errorf("ParseWindow(%q) window = %+v, want the zero Window", in, got)
			}
		})
	}
}

func TestWindowString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		w    limit.Window
		want string
	}{
		{limit.Every(time.Second), "1s"},
		{limit.Every(90 * time.Second), "1m30s"},
		{limit.Every(15 * time.Minute), "15m0s"},
		{limit.Every(time.Hour), "1h0m0s"},
		{limit.Every(36 * time.Hour), "36h0m0s"},
		{limit.Every(24 * time.Hour), "1d"},
		{limit.Every(720 * time.Hour), "30d"},
		{limit.Month, "month"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			if got := tc.w.String(); got != tc.want {
				t.Errorf("%+v.String() = %q, want %q", tc.w, got, tc.want)
			}
			back, err := limit.ParseWindow(tc.w.String())
			if err != nil {
				t.Fatalf("ParseWindow(%q) error = %v, want nil", tc.want, err)
			}
			if back != tc.w {
				t.Errorf("ParseWindow(%q) = %+v, want %+v", tc.want, back, tc.w)
			}
		})
	}
}

func TestWindowMicros(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    limit.Window
		want int64
	}{
		{"second", limit.Every(time.Second), 1_000_000},
		{"thirty days", limit.Every(720 * time.Hour), 2_592_000_000_000},
		{"month", limit.Month, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.w.Micros(); got != tc.want {
				t.Errorf("%+v.Micros() = %d, want %d", tc.w, got, tc.want)
			}
			if got := limit.WindowFromMicros(tc.want); got != tc.w {
				t.Errorf("WindowFromMicros(%d) = %+v, want %+v", tc.want, got, tc.w)
			}
		})
	}
}

func TestWindowBounds(t *testing.T) {
	t.Parallel()
	at := func(year int, month time.Month, day, hour, min, sec, us int) int64 {
		return time.Date(year, month, day, hour, min, sec, us*1000, time.UTC).UnixMicro()
	}
	tests := []struct {
		name            string
		w               limit.Window
		now             int64
		start, end      int64
		wantLengthMicro int64 // end - start, spelled out for the calendar cases
	}{
		{"minute inside", limit.Every(time.Minute), at(2026, 3, 10, 12, 0, 15, 0),
			at(2026, 3, 10, 12, 0, 0, 0), at(2026, 3, 10, 12, 1, 0, 0), 60e6},
		{"minute at its start", limit.Every(time.Minute), at(2026, 3, 10, 12, 1, 0, 0),
			at(2026, 3, 10, 12, 1, 0, 0), at(2026, 3, 10, 12, 2, 0, 0), 60e6},
		{"minute last microsecond", limit.Every(time.Minute), at(2026, 3, 10, 12, 0, 59, 999_999),
			at(2026, 3, 10, 12, 0, 0, 0), at(2026, 3, 10, 12, 1, 0, 0), 60e6},
		// 90 s windows are aligned to the Unix epoch, not to the hour:
		// 2026-03-10T12:00:00Z is 1773144000 s, 19701600 whole windows.
		{"ninety seconds epoch aligned", limit.Every(90 * time.Second), at(2026, 3, 10, 12, 0, 15, 0),
			at(2026, 3, 10, 12, 0, 0, 0), at(2026, 3, 10, 12, 1, 30, 0), 90e6},
		{"ninety seconds second window", limit.Every(90 * time.Second), at(2026, 3, 10, 12, 1, 31, 0),
			at(2026, 3, 10, 12, 1, 30, 0), at(2026, 3, 10, 12, 3, 0, 0), 90e6},
		{"day", limit.Every(24 * time.Hour), at(2026, 3, 10, 23, 59, 59, 0),
			at(2026, 3, 10, 0, 0, 0, 0), at(2026, 3, 11, 0, 0, 0, 0), 86_400e6},
		{"month mid", limit.Month, at(2026, 3, 10, 12, 0, 0, 0),
			at(2026, 3, 1, 0, 0, 0, 0), at(2026, 4, 1, 0, 0, 0, 0), 31 * 86_400e6},
		{"month February leap year", limit.Month, at(2028, 2, 29, 23, 59, 59, 999_999),
			at(2028, 2, 1, 0, 0, 0, 0), at(2028, 3, 1, 0, 0, 0, 0), 29 * 86_400e6},
		{"month February common year", limit.Month, at(2026, 2, 14, 0, 0, 0, 0),
			at(2026, 2, 1, 0, 0, 0, 0), at(2026, 3, 1, 0, 0, 0, 0), 28 * 86_400e6},
		{"month December to January", limit.Month, at(2026, 12, 31, 23, 59, 59, 999_999),
			at(2026, 12, 1, 0, 0, 0, 0), at(2027, 1, 1, 0, 0, 0, 0), 31 * 86_400e6},
		{"month start exactly", limit.Month, at(2027, 1, 1, 0, 0, 0, 0),
			at(2027, 1, 1, 0, 0, 0, 0), at(2027, 2, 1, 0, 0, 0, 0), 31 * 86_400e6},
		{"month April thirty days", limit.Month, at(2026, 4, 30, 12, 0, 0, 0),
			at(2026, 4, 1, 0, 0, 0, 0), at(2026, 5, 1, 0, 0, 0, 0), 30 * 86_400e6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start, end := tc.w.Bounds(tc.now)
			if start != tc.start || end != tc.end {
				t.Errorf("%v.Bounds(%s) = [%s, %s), want [%s, %s)", tc.w, micro(tc.now),
					micro(start), micro(end), micro(tc.start), micro(tc.end))
			}
			if end-start != tc.wantLengthMicro {
				t.Errorf("%v.Bounds(%s) length = %d µs, want %d µs", tc.w, micro(tc.now), end-start, tc.wantLengthMicro)
			}
			if tc.now < start || tc.now >= end {
				t.Errorf("%v.Bounds(%s) = [%s, %s) does not contain it", tc.w, micro(tc.now), micro(start), micro(end))
			}
		})
	}
}

func micro(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }

func TestValidate(t *testing.T) {
	t.Parallel()
	minute := limit.Every(time.Minute)
	tests := []struct {
		name        string
		a           limit.Algorithm
		limit, cost int64
		w           limit.Window
		wantErr     bool
	}{
		{"fixed minute", limit.FixedWindow, 10, 1, minute, false},
		{"sliding minute", limit.SlidingWindow, 10, 1, minute, false},
		{"token bucket minute", limit.TokenBucket, 10, 1, minute, false},
		{"fixed month", limit.FixedWindow, 10, 1, limit.Month, false},
		{"sliding month", limit.SlidingWindow, 10, 1, limit.Month, true},
		{"token bucket month", limit.TokenBucket, 10, 1, limit.Month, true},
		{"month with a length", limit.FixedWindow, 10, 1, limit.Window{Month: true, Length: time.Hour}, true},
		{"zero window", limit.FixedWindow, 10, 1, limit.Window{}, true},
		{"sub-second window", limit.TokenBucket, 10, 1, limit.Every(500 * time.Millisecond), true},
		{"fractional seconds", limit.SlidingWindow, 10, 1, limit.Every(1500 * time.Millisecond), true},
		{"window above thirty days", limit.FixedWindow, 10, 1, limit.Every(720*time.Hour + time.Second), true},
		{"window thirty days", limit.FixedWindow, 10, 1, limit.Every(720 * time.Hour), false},
		{"negative window", limit.FixedWindow, 10, 1, limit.Every(-time.Minute), true},
		{"algorithm zero", 0, 10, 1, minute, true},
		{"concurrency, which no counter counts", limit.Concurrency, 10, 1, minute, true},
		{"limit zero", limit.FixedWindow, 0, 1, minute, true},
		{"limit negative", limit.FixedWindow, -1, 1, minute, true},
		{"limit one", limit.FixedWindow, 1, 1, minute, false},
		{"limit max", limit.TokenBucket, limit.MaxLimit, 1, minute, false},
		{"limit above max", limit.TokenBucket, limit.MaxLimit + 1, 1, minute, true},
		{"cost zero", limit.FixedWindow, 10, 0, minute, true},
		{"cost negative", limit.SlidingWindow, 10, -3, minute, true},
		{"cost above limit", limit.FixedWindow, 10, 11, minute, false},
		{"cost max", limit.FixedWindow, 10, limit.MaxLimit, minute, false},
		{"cost above max", limit.FixedWindow, 10, limit.MaxLimit + 1, minute, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := limit.Validate(tc.a, tc.limit, tc.cost, tc.w)
			if tc.wantErr && !errors.Is(err, limit.ErrInvalid) {
				t.Errorf("Validate(%v, %d, %d, %+v) = %v, want an error wrapping ErrInvalid", tc.a, tc.limit, tc.cost, tc.w, err)
			}
			if !tc.wantErr && err != nil {
				t.Errorf("Validate(%v, %d, %d, %+v) = %v, want nil", tc.a, tc.limit, tc.cost, tc.w, err)
			}
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    limit.Algorithm
		wantErr bool
	}{
		{"fixed_window", limit.FixedWindow, false},
		{"sliding_window", limit.SlidingWindow, false},
		{"token_bucket", limit.TokenBucket, false},
		{"concurrency", limit.Concurrency, false},
		{"gcra", 0, true},
		{"", 0, true},
		{"algorithm(1)", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := limit.ParseAlgorithm(tc.in)
			if tc.wantErr {
				if !errors.Is(err, limit.ErrInvalid) {
					t.Errorf("ParseAlgorithm(%q) = %v, %v; want an error wrapping ErrInvalid", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
			}
		})
	}
}

// FuzzParseWindow checks that ParseWindow never panics, and that every window
// it accepts is valid and reads back from its String.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{
		"1s", "90s", "15m", "1h", "720h", "30d", "1d", "month", "0s", "500ms",
		"721h", "31d", "0d", "abc", "1.5s", "-1m", "+1d", "01d", "1.5m", "1h0m0s",
		"9223372036854775807ns", "2562047h47m16.854775807s", "99999999999999999999d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := limit.ParseWindow(s)
		if err != nil {
			if !errors.Is(err, limit.ErrInvalid) {
				t.Fatalf("ParseWindow(%q) error = %v, want it to wrap ErrInvalid", s, err)
			}
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("ParseWindow(%q) = %+v, whose Validate() = %v, want nil", s, w, err)
		}
		back, err := limit.ParseWindow(w.String())
		if err != nil || back != w {
			t.Fatalf("ParseWindow(%q) = %+v; ParseWindow(%q) = %+v, %v; want %+v, nil", s, w, w.String(), back, err, w)
		}
		if got := limit.WindowFromMicros(w.Micros()); got != w {
			t.Fatalf("WindowFromMicros(%d) = %+v, want %+v", w.Micros(), got, w)
		}
	})
}

// TestBillingPeriodBounds walks anchored months across the cases Stripe's
// billing periods have: an anchor past a short month's end (the 29th to the
// 31st through February, leap year or not), the year's end, and the exact
// instant a period starts.
func TestBillingPeriodBounds(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		anchor, now, start, end string
	}{
		{"2026-01-31T10:00:00Z", "2026-02-15T00:00:00Z", "2026-01-31T10:00:00Z", "2026-02-28T10:00:00Z"},
		{"2026-01-31T10:00:00Z", "2026-02-28T09:59:59Z", "2026-01-31T10:00:00Z", "2026-02-28T10:00:00Z"},
		{"2026-01-31T10:00:00Z", "2026-02-28T10:00:00Z", "2026-02-28T10:00:00Z", "2026-03-31T10:00:00Z"},
		{"2026-01-31T10:00:00Z", "2026-04-30T11:00:00Z", "2026-04-30T10:00:00Z", "2026-05-31T10:00:00Z"},
		{"2025-05-30T00:00:00Z", "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-30T00:00:00Z"},
		{"2025-05-29T00:00:00Z", "2027-02-28T23:00:00Z", "2027-02-28T00:00:00Z", "2027-03-29T00:00:00Z"},
		{"2026-03-15T08:30:15Z", "2026-12-31T23:59:59Z", "2026-12-15T08:30:15Z", "2027-01-15T08:30:15Z"},
		{"2026-03-15T08:30:15Z", "2027-01-02T00:00:00Z", "2026-12-15T08:30:15Z", "2027-01-15T08:30:15Z"},
		{"2026-03-15T08:30:15Z", "2026-12-15T08:30:14Z", "2026-11-15T08:30:15Z", "2026-12-15T08:30:15Z"},
		// An anchor on the 1st at midnight is the calendar month.
		{"2024-07-01T00:00:00Z", "2026-12-07T06:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		w := limit.BillingPeriod.Anchored(at(tc.anchor))
		if err := w.Validate(); err != nil {
			t.Fatalf("anchor %s: %v", tc.anchor, err)
		}
		start, end := w.Bounds(at(tc.now).UnixMicro())
		if start != at(tc.start).UnixMicro() || end != at(tc.end).UnixMicro() {
			t.Errorf("anchor %s, now %s: bounds %s to %s, want %s to %s", tc.anchor, tc.now,
				time.UnixMicro(start).UTC().Format(time.RFC3339), time.UnixMicro(end).UTC().Format(time.RFC3339), tc.start, tc.end)
		}
		if back := limit.WindowFromMicros(w.Micros()); back.Anchor != w.Anchor || !back.Month {
			t.Errorf("anchor %s: WindowFromMicros(Micros()) = %+v", tc.anchor, back)
		}
	}
	if limit.BillingPeriod.Anchored(time.Time{}) != limit.BillingPeriod {
		t.Error("a tenant without an anchor does not count the calendar month")
	}
	if w := limit.Every(time.Hour).Anchored(at(tests[0].anchor)); w != limit.Every(time.Hour) {
		t.Errorf("an hour anchored = %+v", w)
	}
}

// TestBillingPeriodsTile checks, over random anchors and instants, that the
// periods of an anchor tile time: now lies in its period, a period is 28 to
// 31 days long, and the next period starts where it ends.
func TestBillingPeriodsTile(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		anchor := time.Duration(rapid.Int64Range(0, int64(limit.MaxAnchor/time.Second)-1).Draw(rt, "anchor_s")) * time.Second
		w := limit.Window{Month: true, Anchor: anchor}
		if err := w.Validate(); err != nil {
			rt.Fatal(err)
		}
		now := rapid.Int64Range(0, 7_258_118_400_000_000-1).Draw(rt, "now_us") // before 2200
		start, end := w.Bounds(now)
		if now < start || now >= end {
			rt.Fatalf("now %d outside [%d, %d)", now, start, end)
		}
		if d := time.Duration(end-start) * time.Microsecond; d < 28*24*time.Hour || d > 31*24*time.Hour {
			rt.Fatalf("period of %s", d)
		}
		if s, _ := w.Bounds(end); s != end {
			rt.Fatalf("the period after [%d, %d) starts at %d", start, end, s)
		}
		if s, e := w.Bounds(start); s != start || e != end {
			rt.Fatalf("the period at its own start %d is [%d, %d)", start, s, e)
		}
	})
}

func TestAnchorValidation(t *testing.T) {
	t.Parallel()
	bad := []limit.Window{
		{Month: true, Anchor: -time.Second},
		{Month: true, Anchor: limit.MaxAnchor},
		{Month: true, Anchor: time.Millisecond},
		{Length: time.Hour, Anchor: time.Hour},
		{Length: time.Hour, Billing: true},
	}
	for _, w := range bad {
		if err := w.Validate(); !errors.Is(err, limit.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", w, err)
		}
	}
}
