package pgstore

import (
	"context"
	"log/slog"
	"time"
)

// ListenQuick is Listen with timings short enough for tests: a silent
// connection is checked after 200 ms and retried within 100 ms.
func ListenQuick(ctx context.Context, dsn string, log *slog.Logger, onChange func(kind, id string), onReconnect func()) error {
	return listen(ctx, dsn, log, onChange, onReconnect, listenTiming{
		idle:       200 * time.Millisecond,
		ping:       200 * time.Millisecond,
		connect:    2 * time.Second,
		minBackoff: 10 * time.Millisecond,
		maxBackoff: 100 * time.Millisecond,
	})
}
