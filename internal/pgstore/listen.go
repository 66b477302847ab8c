package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// changeChannel is the channel on which migration 000004's triggers announce
// changes, as '<kind>:<id>' payloads.
const changeChannel = "tollgate_changes"

// listenTiming is how Listen watches its connection and comes back after
// losing it.
type listenTiming struct {
	// idle is how long Listen waits for a notification before checking
	// that the connection still answers (a server that vanished without a
	// word sends nothing, and would otherwise be waited on forever); ping
	// bounds that check, and connect a connection attempt.
	idle, ping, connect time.Duration
	// Delays between attempts double from minBackoff to maxBackoff, and
	// start again from minBackoff once a connection was made.
	minBackoff, maxBackoff time.Duration
}

var defaultListenTiming = listenTiming{
	idle:       15 * time.Second,
	ping:       5 * time.Second,
	connect:    10 * time.Second,
	minBackoff: 100 * time.Millisecond,
	// A second at most: the caches refresh everything when the listener
	// is back, so that changes missed during an outage are read about a
	// second after the database returns; one connection attempt a second
	// costs the database nothing.
	maxBackoff: time.Second,
}

// Listen receives the change notifications of the database at dsn until ctx
// is cancelled, then returns nil; it returns an error only when dsn is not
// a PostgreSQL URL. It calls onChange(kind, id) for each notification
// ("tenant", tenant ID; "key", key prefix; "plan", plan name; "policy",
// tenant ID; "envoy", tenant ID, of its envoyproxy/ratelimit files), and
// onReconnect each time it has connected and is listening,
// the first time included: notifications sent while it was not listening
// are lost, so the caller refreshes every cache then. It reconnects after any
// failure, with backoff, and notices a dead connection within about 20 s
// even when the server vanished without a word. Both callbacks run on
// Listen's goroutine, one at a time, and should return quickly.
func Listen(ctx context.Context, dsn string, log *slog.Logger, onChange func(kind, id string), onReconnect func()) error {
	return listen(ctx, dsn, log, onChange, onReconnect, defaultListenTiming)
}

func listen(ctx context.Context, dsn string, log *slog.Logger, onChange func(kind, id string), onReconnect func(), tm listenTiming) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the URL, password and all.
		return errors.New("listen for changes: the database URL is not a valid PostgreSQL URL")
	}
	backoff := tm.minBackoff
	for {
		connected, err := listenOnce(ctx, cfg, log, onChange, onReconnect, tm)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = tm.minBackoff
		}
		log.WarnContext(ctx, "change listener disconnected", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, tm.maxBackoff)
	}
}

// listenOnce connects, listens and hands notifications on until the
// connection fails or ctx ends; connected reports whether it got as far as
// listening.
func listenOnce(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger, onChange func(kind, id string), onReconnect func(), tm listenTiming) (connected bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, tm.connect)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		cancel()
		return false, err
	}
	defer func() {
		// A stalled server must not hold up the reconnection.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Close(ctx)
		cancel()
	}()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{changeChannel}.Sanitize())
	cancel()
	if err != nil {
		return false, err
	}
	log.InfoContext(ctx, "change listener connected", "channel", changeChannel)
	onReconnect()
	for {
		wctx, cancel := context.WithTimeout(ctx, tm.idle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			kind, id, ok := strings.Cut(n.Payload, ":")
			if !ok {
				log.WarnContext(ctx, "change notification without a kind", "payload", n.Payload)
				continue
			}
			onChange(kind, id)
			continue
		case ctx.Err() != nil:
			return true, nil
		case !errors.Is(err, context.DeadlineExceeded):
			return true, err
		}
		// Quiet for tm.idle: make sure the server is still there. A read
		// that timed out leaves the connection usable.
		pctx, cancel := context.WithTimeout(ctx, tm.ping)
		err = conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return true, err
		}
	}
}
