package usage_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

// The Recorder's tests below run over the real PostgreSQL store; where the
// store must fail, the link to the database is cut for real.

var base = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// checks is a count of live checks allowed in minute m (minutes after base).
func checks(tenant string, m int) rowKey {
	return rowKey{tenant, base.Add(time.Duration(m) * time.Minute), true, true, admission.OutcomeAllowed}
}

func TestRecorderFailedFlushKeepsCounts(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()
	for i := range 10 {
		r.Observe(ctx, admission.Event{At: base.Add(time.Duration(i) * time.Second), TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	}
	proxy.Cut()
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush with the database cut off: got nil error")
	}
	r.Observe(ctx, admission.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	if got := r.Pending(); got != 2 {
		t.Errorf("Pending() after a failed flush = %d, want 2 (a row failed, a row new)", got)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{checks(tenant, 0): 11}
	if got := stored(t, direct); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() after a good flush = %d, want 0", got)
	}
}

func TestRecorderFlushLostAfterCommitCountsOnce(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()
	for range 10 {
		r.Observe(ctx, admission.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	}
	if err := pgtest.FlushLosingTheAnswer(t, direct, proxy, func() error { return r.Flush(ctx) }); err == nil {
		t.Fatal("Flush with the answer lost: got nil error")
	}
	// The flush is in the table all the same.
	if got, want := stored(t, direct), (map[rowKey]int64{checks(tenant, 0): 10}); !maps.Equal(got, want) {
		t.Fatalf("usage_minutes after the lost answer = %v, want %v", got, want)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	r.Observe(ctx, admission.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	// The report, too, counts the flush once while it waits to be sent
	// again.
	rep, err := r.Usage(ctx, tenant, base)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ChecksUsed != 11 {
		t.Errorf("ChecksUsed before the flush is sent again = %d, want 11", rep.ChecksUsed)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(t, direct), (map[rowKey]int64{checks(tenant, 0): 11}); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestRecorderPendingStaysBounded(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenants := []string{pgtest.Tenant(t, direct, "starter"), pgtest.Tenant(t, direct, "starter"), pgtest.Tenant(t, direct, "starter")}
	const maxPending = 50
	r := newRecorder(t, pool, usage.Config{MaxPending: maxPending})
	ctx := context.Background()
	proxy.Cut()
	// 200 minutes of 3 tenants: 600 rows against a cap of 50, with a
	// failing flush every 20 minutes.
	for m := range 200 {
		for _, tenant := range tenants {
			r.Observe(ctx, admission.Event{At: base.Add(time.Duration(m) * time.Minute), TenantID: tenant, Checked: true, Outcome: admission.OutcomeAllowed})
		}
		// New rows, and a failed flush of as many at most.
		if got := r.Pending(); got > 2*maxPending {
			t.Fatalf("Pending() = %d after minute %d, want at most %d", got, m, 2*maxPending)
		}
		if m%20 == 19 {
			if err := r.Flush(ctx); err == nil {
				t.Fatalf("Flush after minute %d with the database cut off: got nil error", m)
			}
		}
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := stored(t, direct)
	// What was kept is the first failed flush and the newest minutes.
	for m := 200 - maxPending/3 + 1; m < 200; m++ {
		for _, tenant := range tenants {
			k := rowKey{tenant, base.Add(time.Duration(m) * time.Minute), false, true, admission.OutcomeAllowed}
			if got[k] != 1 {
				t.Errorf("row %+v = %d, want it kept, 1", k, got[k])
			}
		}
	}
	var total int64
	for _, n := range got {
		total += n
	}
	if total > 2*maxPending {
		t.Errorf("flushed %d events, want at most %d", total, 2*maxPending)
	}
}

func TestRecorderAtTheCapTheOldestMinuteGoes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a, b, c, d, e := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, usage.Config{MaxPending: 3})
	ctx := context.Background()
	observe := func(tenant string, minute int) {
		r.Observe(ctx, admission.Event{At: base.Add(time.Duration(minute) * time.Minute), TenantID: tenant, Checked: true, Outcome: admission.OutcomeAllowed})
	}
	observe(a, 10)
	observe(b, 10)
	observe(c, 10)
	// Older than all held: dropped itself.
	observe(d, 5)
	// A new row of a held minute at the cap: there is no older minute to drop.
	observe(d, 10)
	if got := r.Pending(); got != 3 {
		t.Fatalf("Pending() = %d, want 3", got)
	}
	// Newer: the oldest minute goes.
	observe(e, 20)
	observe(a, 20)
	if got := r.Pending(); got != 2 {
		t.Fatalf("Pending() = %d, want 2", got)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{
		{e, base.Add(20 * time.Minute), false, true, admission.OutcomeAllowed}: 1,
		{a, base.Add(20 * time.Minute), false, true, admission.OutcomeAllowed}: 1,
	}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestRecorderObserveIgnoresEventsWithoutTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	r := newRecorder(t, pool, usage.Config{})
	r.Observe(context.Background(), admission.Event{At: base, Outcome: admission.LayerInstance})
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() = %d, want 0", got)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, pool); len(got) != 0 {
		t.Errorf("usage_minutes = %v, want no rows", got)
	}
}

func TestRecorderObserveEmptyOutcomeAndZeroTime(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, usage.Config{Now: func() time.Time { return base.Add(90 * time.Second) }})
	r.Observe(context.Background(), admission.Event{TenantID: tenant, Live: true, Checked: true})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{checks(tenant, 1): 1}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestNewRecorderNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := usage.NewRecorder(usage.Config{}); err == nil {
		t.Error("NewRecorder without a store: got nil error")
	}
}

// TestRecorderNewCellRaceLosesNothing: goroutines released together all
// count one new cell, minute after minute, so that several wait for the
// mutex to make its count while others already add to it.
func TestRecorderNewCellRaceLosesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()
	const goroutines, minutes, each = 16, 100, 20
	for m := range minutes {
		at := base.Add(time.Duration(m) * time.Minute)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				for range each {
					r.Observe(ctx, admission.Event{At: at, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := stored(t, pool)
	for m := range minutes {
		k := rowKey{tenant, base.Add(time.Duration(m) * time.Minute), true, true, admission.OutcomeAllowed}
		if got[k] != goroutines*each {
			t.Fatalf("minute %d: %d counted, want %d", m, got[k], goroutines*each)
		}
	}
}
