package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/kit/pglocal"
)

// database returns the URL of Tollgate's database: DATABASE_URL, or the
// embedded PostgreSQL in cfg.DataDir: the one already running there (a
// `tollgate serve` beside this command, say), else one started from the
// machine's binaries. stop releases the embedded server, stopping it when
// this process started it and no other uses it (a no-op without one).
func database(ctx context.Context, cfg Config, log *slog.Logger) (dsn string, stop func(), err error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() {}, nil
	}
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pgdata"))
	if err != nil {
		return "", nil, fmt.Errorf("embedded postgres: %w", err)
	}
	log.InfoContext(ctx, "DATABASE_URL not set: using the embedded PostgreSQL, the running one or a new one", "data_dir", dir)
	opts := pglocal.Options{Logf: func(format string, args ...any) {
		log.DebugContext(ctx, "embedded postgres: "+fmt.Sprintf(format, args...))
	}}
	cl, err := pglocal.Open(ctx, dir, opts)
	if errors.Is(err, pglocal.ErrUnreachable) {
		// Root in a project under a closed folder (/root is 0700): keep the
		// data where the postgres user can reach it, one folder per project.
		sum := sha256.Sum256([]byte(dir))
		alt := filepath.Join("/var/tmp", "tollgate-"+hex.EncodeToString(sum[:6]), "pgdata")
		log.WarnContext(ctx, "embedded postgres: the project folder is closed to the postgres user; keeping the data elsewhere", "data_dir", alt, "reason", err)
		dir = alt
		cl, err = pglocal.Open(ctx, dir, opts)
	}
	if err != nil {
		return "", nil, fmt.Errorf("embedded postgres: %w", err)
	}
	stop = func() {
		if err := cl.Stop(); err != nil {
			log.Error("embedded postgres: stop", "err", err)
			return
		}
		log.Info("embedded postgres released")
	}
	dsn, err = ensureDatabase(ctx, cl.URL(), "tollgate")
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("embedded postgres: %w", err)
	}
	log.InfoContext(ctx, "using the embedded PostgreSQL", "database_url", maskURL(dsn), "data_dir", dir)
	return dsn, stop, nil
}

// ensureDatabase creates database name on the server at maint (a
// maintenance-database URL) when missing, and returns its URL.
func ensureDatabase(ctx context.Context, maint, name string) (string, error) {
	conn, err := pgx.Connect(ctx, maint)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			// Another process sharing the server may have created it
			// first.
			if qerr := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); qerr != nil || !exists {
				return "", err
			}
		}
	}
	u, err := url.Parse(maint)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
