package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
)

// The policies and overrides commands change a tenant's policies as its own
// key would through PUT /v1/policies: the flags are turned into the API's
// JSON body and read by the same policy.Parse and policy.ParseOverride, and
// every change goes through policy.Service, which audits it with the actor
// cli:<os user>. A running server learns of each change from the
// database's change notifications within a second.

const (
	policiesSynopsis  = "policies list --tenant TENANT_ID | policies put NAME --tenant TENANT_ID --limit N [--window W] [--algorithm A] [--scope S] [--fail-mode M] [--shadow] [--alert-after N] | policies delete NAME --tenant TENANT_ID"
	overridesSynopsis = "overrides list --tenant TENANT_ID --policy NAME | overrides put PATTERN --tenant TENANT_ID --policy NAME --limit N [--expires-at RFC3339] | overrides delete PATTERN --tenant TENANT_ID --policy NAME"
)

// policyStores are what the two commands use: the policies, through the
// auditing Service, and the tenants, to say which tenant does not exist.
type policyStores struct {
	svc     policy.Service
	tenants *pgstore.Tenants
}

// openPolicies opens the stores, with the audit entries' actor.
func openPolicies(ctx context.Context, cfg Config, log *slog.Logger) (policyStores, func(), error) {
	actor := cliActor()
	return openStore(ctx, cfg, log, func(pool *pgxpool.Pool) policyStores {
		return policyStores{
			tenants: pgstore.NewTenants(pool),
			svc:     policy.Service{Store: pgstore.NewPolicies(pool), Audit: cliAudit(pool, actor, log)},
		}
	})
}

// cliActor names who runs the command in the audit log: cli:<os user>.
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

// tenantExists turns a missing tenant into an error that names it.
func (s policyStores) tenantExists(ctx context.Context, what, id string) error {
	if _, err := s.tenants.Tenant(ctx, id); err != nil {
		return notFound(err, "%s: no tenant %s", what, id)
	}
	return nil
}

// policyFault rewords the policy package's client errors for the command
// line: the field as its flag, and the reason in the API's words.
func policyFault(what string, err error) error {
	var fe *policy.FieldError
	var nf *policy.NotFoundError
	switch {
	case errors.As(err, &fe) && fe.Field != "":
		return fmt.Errorf("%s: %s: %s", what, flagOf(fe.Field), fe.Reason)
	case errors.As(err, &fe):
		return fmt.Errorf("%s: %s", what, fe.Reason)
	case errors.As(err, &nf):
		return fmt.Errorf("%s: %s", what, nf.Error())
	}
	return fmt.Errorf("%s: %w", what, err)
}

// flagOf is the flag that sets the API's member field.
func flagOf(field string) string {
	switch field {
	case "name", "pattern":
		return field
	case "fail_mode":
		return "--fail-mode"
	case "alert_after":
		return "--alert-after"
	case "expires_at":
		return "--expires-at"
	}
	return "--" + field
}

// setFlags returns the flags of fs that the command line set, as the
// API's members: integers as numbers (anything else as typed, for the
// parser to refuse), --shadow as a boolean.
func setFlags(fs *flag.FlagSet) []byte {
	m := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		member := map[string]string{"fail-mode": "fail_mode", "alert-after": "alert_after", "expires-at": "expires_at"}[f.Name]
		if member == "" {
			member = f.Name
		}
		switch f.Name {
		case "tenant", "policy":
			return
		case "shadow":
			m[member] = f.Value.String() == "true"
		case "limit", "alert-after":
			if n, err := strconv.ParseInt(f.Value.String(), 10, 64); err == nil {
				m[member] = n
				return
			}
			m[member] = f.Value.String()
		default:
			m[member] = f.Value.String()
		}
	})
	b, _ := json.Marshal(m)
	return b
}

// policiesCmd runs `tollgate policies list|put|delete`.
func policiesCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	if len(args) == 0 {
		return usagef(policiesSynopsis, "policies: want the subcommand list, put or delete")
	}
	sub := args[0]
	fs := newFlags("policies " + sub)
	tenantID := fs.String("tenant", "", "the tenant's ID")
	switch sub {
	case "put":
		fs.String("limit", "", "the limit")
		fs.String("window", "", `the window: "1m", "15m", "1h", "1d", "month"; none for concurrency`)
		fs.String("algorithm", "", "fixed_window (default), sliding_window, token_bucket or concurrency")
		fs.String("scope", "", "subject (default) or global")
		fs.String("fail-mode", "", "open (default) or closed")
		fs.Bool("shadow", false, "count and report, never refuse")
		fs.String("alert-after", "", "alert after this many refusals of one subject in 24 hours; 0: never")
	case "list", "delete":
	default:
		return usagef(policiesSynopsis, "policies %s: want the subcommand list, put or delete", sub)
	}
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return usagef(policiesSynopsis, "policies %s: %v", sub, err)
	}
	if *tenantID == "" {
		return usagef(policiesSynopsis, "policies %s: --tenant is required", sub)
	}
	switch {
	case sub == "list" && len(rest) > 0:
		return usagef(policiesSynopsis, "policies list: unexpected %q", rest[0])
	case sub != "list" && len(rest) != 1:
		return usagef(policiesSynopsis, "policies %s: want one policy NAME", sub)
	}
	what := "policies " + sub
	var p policy.Policy
	if sub == "put" {
		// Read before the database is opened: a mistake costs nothing.
		if p, err = policy.Parse(rest[0], setFlags(fs)); err != nil {
			return policyFault(what, err)
		}
	}
	s, done, err := openPolicies(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer done()
	if err := s.tenantExists(ctx, what, *tenantID); err != nil {
		return err
	}
	switch sub {
	case "list":
		ps, err := s.svc.ListPolicies(ctx, *tenantID)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return printPolicies(cio.stdout, ps)
	case "put":
		if p, err = s.svc.PutPolicy(ctx, *tenantID, p); err != nil {
			return policyFault(what, err)
		}
		log.InfoContext(ctx, "policy put", "tenant_id", *tenantID, "policy", p.Name)
		return printJSON(cio.stdout, p)
	default:
		if err := s.svc.DeletePolicy(ctx, *tenantID, rest[0]); err != nil {
			return policyFault(what, err)
		}
		log.InfoContext(ctx, "policy deleted", "tenant_id", *tenantID, "policy", rest[0])
		return printJSON(cio.stdout, map[string]string{"deleted": rest[0]})
	}
}

// overridesCmd runs `tollgate overrides list|put|delete`.
func overridesCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	if len(args) == 0 {
		return usagef(overridesSynopsis, "overrides: want the subcommand list, put or delete")
	}
	sub := args[0]
	fs := newFlags("overrides " + sub)
	tenantID := fs.String("tenant", "", "the tenant's ID")
	name := fs.String("policy", "", "the policy's name")
	switch sub {
	case "put":
		fs.String("limit", "", "the limit for the subjects the pattern matches")
		fs.String("expires-at", "", "when it stops applying, RFC 3339 (such as 2026-12-01T00:00:00Z); unset: never")
	case "list", "delete":
	default:
		return usagef(overridesSynopsis, "overrides %s: want the subcommand list, put or delete", sub)
	}
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return usagef(overridesSynopsis, "overrides %s: %v", sub, err)
	}
	switch {
	case *tenantID == "":
		return usagef(overridesSynopsis, "overrides %s: --tenant is required", sub)
	case *name == "":
		return usagef(overridesSynopsis, "overrides %s: --policy is required", sub)
	case sub == "list" && len(rest) > 0:
		return usagef(overridesSynopsis, "overrides list: unexpected %q", rest[0])
	case sub != "list" && len(rest) != 1:
		return usagef(overridesSynopsis, "overrides %s: want one PATTERN (quote it: the shell expands *)", sub)
	}
	what := "overrides " + sub
	if err := policy.ValidateName(*name); err != nil {
		return policyFault(what, err)
	}
	var o policy.Override
	switch sub {
	case "put":
		if o, err = policy.ParseOverride(rest[0], setFlags(fs)); err != nil {
			return policyFault(what, err)
		}
	case "delete":
		if err := policy.ValidatePattern(rest[0]); err != nil {
			return policyFault(what, err)
		}
	}
	s, done, err := openPolicies(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer done()
	if err := s.tenantExists(ctx, what, *tenantID); err != nil {
		return err
	}
	switch sub {
	case "list":
		if _, err := s.svc.GetPolicy(ctx, *tenantID, *name); err != nil {
			return policyFault(what, err)
		}
		os, err := s.svc.ListOverrides(ctx, *tenantID, *name)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return printOverrides(cio.stdout, os)
	case "put":
		if o, err = s.svc.PutOverride(ctx, *tenantID, *name, o); err != nil {
			return policyFault(what, err)
		}
		log.InfoContext(ctx, "override put", "tenant_id", *tenantID, "policy", *name)
		return printJSON(cio.stdout, o)
	default:
		if err := s.svc.DeleteOverride(ctx, *tenantID, *name, rest[0]); err != nil {
			return policyFault(what, err)
		}
		log.InfoContext(ctx, "override deleted", "tenant_id", *tenantID, "policy", *name)
		return printJSON(cio.stdout, map[string]string{"deleted": rest[0]})
	}
}

// printPolicies prints policies as a table.
func printPolicies(w io.Writer, ps []policy.Policy) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLIMIT\tWINDOW\tALGORITHM\tSCOPE\tFAIL MODE\tSHADOW\tALERT AFTER")
	for _, p := range ps {
		window := "-"
		if p.Algorithm != limit.Concurrency {
			window = policy.FormatWindow(p.Window)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%t\t%d\n", p.Name, p.Limit, window, p.Algorithm, p.Scope, p.FailMode, p.Shadow, p.AlertAfter)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// printOverrides prints overrides as a table.
func printOverrides(w io.Writer, os []policy.Override) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATTERN\tLIMIT\tEXPIRES")
	for _, o := range os {
		exp := "never"
		if o.ExpiresAt != nil {
			exp = o.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", o.Pattern, o.Limit, exp)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
