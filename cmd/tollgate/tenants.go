package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
)

// tenantsCmd runs `tollgate tenants create --name NAME [--plan PLAN]`,
// which creates a tenant with one live and one test key and prints them, the
// only time the keys are shown, as one JSON line; and `tollgate tenants
// list`, a table of the tenants.
func tenantsCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	stdout := cio.stdout
	const synopsis = "tenants create --name NAME [--plan starter|pro|growth|enterprise|enterprise_dedicated] | tenants list | tenants disable TENANT_ID [--reason TEXT] | tenants enable TENANT_ID"
	switch {
	case len(args) > 0 && args[0] == "list":
		return tenantsList(ctx, cfg, log, args[1:], stdout, synopsis)
	case len(args) > 0 && (args[0] == "disable" || args[0] == "enable"):
		return tenantsSetDisabled(ctx, cfg, log, args[0] == "disable", args[1:], stdout, synopsis)
	case len(args) == 0 || args[0] != "create":
		return usagef(synopsis, "tenants: want the subcommand create, list, disable or enable")
	}
	fs := newFlags("tenants create")
	name := fs.String("name", "", "the tenant's name")
	plan := fs.String("plan", tenant.PlanStarter, "the plan")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return usagef(synopsis, "tenants create: %v", err)
	}
	if len(rest) > 0 {
		return usagef(synopsis, "tenants create: unexpected %q", rest[0])
	}
	if err := tenant.ValidateName(*name); err != nil {
		return usagef(synopsis, "tenants create: --%v", err)
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	plans, err := store.Plans(ctx)
	if err != nil {
		return fmt.Errorf("tenants create: %w", err)
	}
	var fe *tenant.FieldError
	if err := tenant.ValidatePlan(plans, *plan); errors.As(err, &fe) {
		return fmt.Errorf("tenants create: --plan %s", fe.Reason)
	}
	c, err := tenant.Create(ctx, store, *name, *plan)
	if err != nil {
		return fmt.Errorf("tenants create: %w", err)
	}
	log.InfoContext(ctx, "tenant created", "tenant_id", c.Tenant.ID, "plan", c.Tenant.Plan, "live_key_id", c.LiveKey.ID, "test_key_id", c.TestKey.ID)
	return printJSON(stdout, struct {
		TenantID string `json:"tenant_id"`
		LiveKey  string `json:"live_key"`
		TestKey  string `json:"test_key"`
	}{c.Tenant.ID, c.Live, c.Test})
}

// tenantsList prints every tenant as a table: id, name, plan, the plan that
// applies (held to starter by billing), billing status and creation time.
func tenantsList(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer, synopsis string) error {
	rest, err := parseFlags(newFlags("tenants list"), args)
	if err != nil {
		return usagef(synopsis, "tenants list: %v", err)
	}
	if len(rest) > 0 {
		return usagef(synopsis, "tenants list: unexpected %q", rest[0])
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	ts, err := store.Tenants(ctx)
	if err != nil {
		return fmt.Errorf("tenants list: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT ID\tNAME\tPLAN\tEFFECTIVE PLAN\tBILLING STATUS\tCREATED\tDISABLED")
	for _, t := range ts {
		disabled := "-"
		if t.DisabledAt != nil {
			disabled = t.DisabledAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Plan, tenant.EffectivePlanName(t.Plan, t.BillingStatus),
			cmp.Or(t.BillingStatus, "-"), t.CreatedAt.UTC().Format(time.RFC3339), disabled)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// tenantsSetDisabled runs `tollgate tenants disable` and `tollgate tenants
// enable`: the tenant's keys are refused (403) on every serving instance
// within seconds, by the database's change notification, or work again;
// the change is audited with the actor cli:<os user>. It prints the
// tenant's state as one JSON line.
func tenantsSetDisabled(ctx context.Context, cfg Config, log *slog.Logger, disable bool, args []string, stdout io.Writer, synopsis string) error {
	verb, kind := "enable", audit.KindTenantEnabled
	if disable {
		verb, kind = "disable", audit.KindTenantDisabled
	}
	fs := newFlags("tenants " + verb)
	var reason *string
	if disable {
		reason = fs.String("reason", "", "why, for operators (audit log, dashboard)")
	} else {
		reason = new(string)
	}
	rest, err := parseFlags(fs, args)
	if err != nil {
		return usagef(synopsis, "tenants %s: %v", verb, err)
	}
	if len(rest) != 1 || rest[0] == "" {
		return usagef(synopsis, "tenants %s: want one TENANT_ID", verb)
	}
	*reason = strings.TrimSpace(*reason)
	if err := tenant.ValidateDisabledReason(*reason); err != nil {
		return usagef(synopsis, "tenants %s: --%v", verb, err)
	}
	type stores struct {
		tenants *pgstore.Tenants
		audit   func(ctx context.Context, tenantID, kind string, detail map[string]any)
	}
	actor := cliActor()
	st, done, err := openStore(ctx, cfg, log, func(pool *pgxpool.Pool) stores {
		return stores{pgstore.NewTenants(pool), cliAudit(pool, actor, log)}
	})
	if err != nil {
		return err
	}
	defer done()
	t, err := st.tenants.SetTenantDisabled(ctx, rest[0], disable, *reason)
	if err != nil {
		return notFound(err, "tenants %s: no tenant %s", verb, rest[0])
	}
	detail := map[string]any{}
	if disable {
		detail["reason"] = *reason
	}
	st.audit(ctx, t.ID, kind, detail)
	log.InfoContext(ctx, "tenant "+verb+"d", "tenant_id", t.ID)
	out := struct {
		TenantID   string  `json:"tenant_id"`
		DisabledAt *string `json:"disabled_at"`
		Reason     string  `json:"reason"`
	}{TenantID: t.ID, Reason: t.DisabledReason}
	if t.DisabledAt != nil {
		at := t.DisabledAt.UTC().Format(time.RFC3339Nano)
		out.DisabledAt = &at
	}
	return printJSON(stdout, out)
}

// openStore opens a store (made by newStore: pgstore.NewTenants,
// pgstore.NewAdmins) on the database serve would use, migrated; done closes
// it.
func openStore[S any](ctx context.Context, cfg Config, log *slog.Logger, newStore func(*pgxpool.Pool) S) (store S, done func(), err error) {
	dsn, stopDB, err := database(ctx, cfg, log)
	if err != nil {
		return store, nil, err
	}
	if err := pgstore.Migrate(dsn); err != nil {
		stopDB()
		return store, nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		stopDB()
		return store, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return newStore(pool), func() { pool.Close(); stopDB() }, nil
}

// usageError is a command line Tollgate cannot read; main exits 2 on it.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// usagef says what is wrong with the command line and how it should read.
func usagef(synopsis, format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...) + " (usage: tollgate " + synopsis + ")"}
}

// newFlags returns a flag set that reports errors to its caller only.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args with fs, flags and positional arguments in any
// order, and returns the positional ones.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		if args[0] == "--" {
			return append(rest, args[1:]...), nil
		}
		rest, args = append(rest, args[0]), args[1:]
	}
}

// printJSON writes v to w as one line of JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// notFound rewords a store's ErrNotFound for the command line.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, tenant.ErrNotFound) {
		return fmt.Errorf(format, args...)
	}
	return err
}
