package traffic_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/pgtest"
	"github.com/tollgate/tollgate/internal/traffic"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRecorderCountsDegradedAnswersPerMinute(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.NewTraffic(pool)
	r := traffic.NewRecorder(store, nil)
	ctx := context.Background()
	m := time.Date(2026, 11, 2, 3, 4, 0, 0, time.UTC)
	for _, e := range []admission.Event{
		{At: m.Add(time.Second), Degraded: true},
		{At: m.Add(59 * time.Second), Degraded: true},
		{At: m.Add(61 * time.Second), Degraded: true},
		{At: m.Add(2 * time.Second)}, // answered by the shared store: not counted
	} {
		r.Observe(ctx, e)
	}
	r.Flush(ctx)
	r.Observe(ctx, admission.Event{At: m, Degraded: true})
	r.Flush(ctx)
	got, err := store.DegradedMinutes(ctx, m, m.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (traffic.Degraded{Minute: m, Answers: 3}) || got[1] != (traffic.Degraded{Minute: m.Add(time.Minute), Answers: 1}) {
		t.Fatalf("degraded minutes %v", got)
	}
}
