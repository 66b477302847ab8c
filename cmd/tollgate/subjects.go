package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// `tollgate subjects reset` unlocks a subject as DELETE
// /v1/policies/{name}/subjects/{subject} does, without the tenant's key:
// it builds a gate on the counter store the servers count in and calls its
// Reset, which reads the policy from the database, keys the subject's
// counter with the pepper and clears it (for a concurrency policy, drops
// its leases). It reaches the counters where a command can: PostgreSQL's
// are in the database (DATABASE_URL), Redis's at REDIS_URL. The memory
// store's live in the serving process alone, so there the command refuses
// and says what can reset them. The pepper must be the servers': another
// keys another counter, one no server counts on, so the command looks for
// the servers' refusals of the counter it cleared in the audit log and
// says when it finds none.

const subjectsSynopsis = "subjects reset SUBJECT --tenant TENANT_ID --policy NAME [--test]"

// cliCounterTimeout bounds the command's calls of the counter store: one
// call, not the hot path, so it may wait for a busy store far longer than
// a check does (TOLLGATE_COUNTER_TIMEOUT is the servers').
const cliCounterTimeout = 5 * time.Second

// subjectsCmd runs `tollgate subjects reset SUBJECT --tenant TENANT_ID
// --policy NAME [--test]`, which prints one JSON line naming the counter it
// cleared, and audits the reset as cli:<os user>.
func subjectsCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	if len(args) == 0 || args[0] != "reset" {
		return usagef(subjectsSynopsis, "subjects: want the subcommand reset")
	}
	fs := newFlags("subjects reset")
	tenantID := fs.String("tenant", "", "the tenant's ID")
	name := fs.String("policy", "", "the policy whose counter of the subject to clear")
	test := fs.Bool("test", false, "the sandbox's counter (test keys' checks), not the live one")
	rest, err := parseFlags(fs, args[1:])
	switch {
	case err != nil:
		return usagef(subjectsSynopsis, "subjects reset: %v", err)
	case len(rest) != 1:
		return usagef(subjectsSynopsis, "subjects reset: want one SUBJECT (quote one with spaces)")
	case *tenantID == "":
		return usagef(subjectsSynopsis, "subjects reset: --tenant is required")
	case *name == "":
		return usagef(subjectsSynopsis, "subjects reset: --policy is required")
	}
	subject := rest[0]
	if cfg.CounterStore == "memory" {
		return errMemoryReset(*name)
	}

	dsn, stopDB, err := database(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	if err := pgstore.Migrate(dsn); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if _, err := pgstore.NewTenants(pool).Tenant(ctx, *tenantID); err != nil {
		return notFound(err, "subjects reset: no tenant %s", *tenantID)
	}
	key, err := resetCounter(ctx, cfg, log, pool, dsn, *tenantID, *test, *name, subject)
	if err != nil {
		return err
	}
	auditLog := audit.NewLog(pgstore.NewAudit(pool))
	err = auditLog.Record(ctx, audit.Entry{
		TenantID: *tenantID, Actor: cliActor(), Kind: audit.KindCounterReset,
		Detail: map[string]any{"policy": *name, "subject_key": key, "sandbox": *test},
	})
	if err != nil {
		// The reset is done; only its record is missing, which is said.
		log.ErrorContext(ctx, "audit entry lost", "tenant_id", *tenantID, "kind", audit.KindCounterReset, "err", err)
	}
	log.InfoContext(ctx, "subject reset", "tenant_id", *tenantID, "policy", *name, "sandbox", *test, "counter_store", cfg.CounterStore)
	// The servers' refusal entries name the counters they refused: one of
	// this very counter confirms that the command keyed the subject as
	// they do (the same pepper, store and --test). None is said, since a
	// counter keyed otherwise is one no server counts on.
	last, err := lastRefusal(ctx, auditLog, *tenantID, key)
	if err != nil {
		return fmt.Errorf("subjects reset: the counter was cleared, but the audit log could not be read to confirm it was the servers': %w", err)
	}
	out := struct {
		TenantID     string  `json:"tenant_id"`
		Policy       string  `json:"policy"`
		SubjectKey   string  `json:"subject_key"`
		Sandbox      bool    `json:"sandbox"`
		CounterStore string  `json:"counter_store"`
		LastRefused  *string `json:"last_refused_at"` // null: no refusal of it on record
	}{TenantID: *tenantID, Policy: *name, SubjectKey: key, Sandbox: *test, CounterStore: cfg.CounterStore}
	if last != nil {
		at := last.UTC().Format(time.RFC3339)
		out.LastRefused = &at
	} else {
		fmt.Fprintf(cio.stderr, "tollgate: subjects reset: the audit log holds no refusal of this counter (%s) among the tenant's latest %d: "+
			"if the servers still refuse the subject, this command's TOLLGATE_PEPPER, TOLLGATE_COUNTER_STORE or --test is not theirs, and it cleared a counter they do not use\n",
			key, audit.MaxListLimit)
	}
	return printJSON(cio.stdout, out)
}

// errMemoryReset is the refusal to reset a counter of the memory store,
// which only the serving instance reaches, with the two ways that do.
func errMemoryReset(policy string) error {
	return fmt.Errorf("subjects reset: TOLLGATE_COUNTER_STORE=memory keeps the counters in the memory of the serving instance, "+
		"which no other process reaches: nothing was reset. Unlock the subject on that instance's dashboard "+
		"(the tenant's page, Unlock a subject), or call DELETE /v1/policies/%s/subjects/SUBJECT (SUBJECT path-escaped) with one of the tenant's keys (a live key for the live counter, a test key for the sandbox's)",
		url.PathEscape(policy))
}

// resetCounter clears the counter of subject under the policy name of
// tenantID (its sandbox's with test) in the configured counter store, as
// the servers key it, and returns the counter's key.
func resetCounter(ctx context.Context, cfg Config, log *slog.Logger, pool *pgxpool.Pool, dsn, tenantID string, test bool, name, subject string) (string, error) {
	store, err := cliCounters(ctx, cfg, dsn, log)
	if err != nil {
		return "", err
	}
	defer store.Close()
	local := memory.New(memory.Config{MaxKeys: 1000})
	defer local.Close()
	g, err := gate.New(gate.Config{
		Store: store, Local: local, StoreName: cfg.CounterStore, Logger: log, Pepper: cfg.Pepper,
		Tenants:  tenant.NewDirectory(tenant.DirectoryConfig{Store: pgstore.NewTenants(pool), Logger: log}),
		Policies: policy.NewCatalog(pgstore.NewPolicies(pool), policy.CatalogConfig{}),
	})
	if err != nil {
		return "", err
	}
	key, err := g.Reset(ctx, tenantID, test, name, subject)
	var fe *policy.FieldError
	switch {
	case errors.As(err, &fe) && fe.Field == "subject":
		return "", fmt.Errorf("subjects reset: SUBJECT: %s", fe.Reason)
	case errors.Is(err, gate.ErrStoreUnavailable), errors.Is(err, gate.ErrBusy), errors.Is(err, gate.ErrUnavailable):
		return "", fmt.Errorf("subjects reset: the %s counter store did not answer within %s, and nothing was reset: %w", cfg.CounterStore, cliCounterTimeout, err)
	case err != nil:
		return "", policyFault("subjects reset", err)
	}
	return key, nil
}

// lastRefusal returns when the servers last recorded a refusal of the
// counter key of tenantID (the first refusal of each window is an audit
// entry naming its key), among the tenant's latest audit.MaxListLimit
// refusal entries; nil when there is none.
func lastRefusal(ctx context.Context, l *audit.Log, tenantID, key string) (*time.Time, error) {
	es, err := l.List(ctx, audit.Filter{TenantID: tenantID, Kind: audit.KindRefusal, Limit: audit.MaxListLimit})
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if k, _ := e.Detail["key"].(string); k == key {
			return &e.At, nil
		}
	}
	return nil, nil
}

// cliCounters opens the counter store the servers count in, for one call:
// PostgreSQL's in the database, Redis at REDIS_URL, which must answer (and
// be of the URL's mode) before anything is done.
func cliCounters(ctx context.Context, cfg Config, dsn string, log *slog.Logger) (counter.Store, error) {
	if cfg.CounterStore == "redis" {
		s, err := rediscounter.New(rediscounter.Config{URL: cfg.RedisURL, Timeout: cliCounterTimeout, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		vctx, cancel := context.WithTimeout(ctx, cliCounterTimeout)
		err = s.Verify(vctx)
		cancel()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("REDIS_URL: %w; nothing was reset", err)
		}
		return s, nil
	}
	s, err := pgcounter.New(ctx, pgcounter.Config{DSN: dsn, MaxConns: 3, Timeout: cliCounterTimeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("counter store: %w", err)
	}
	return s, nil
}
