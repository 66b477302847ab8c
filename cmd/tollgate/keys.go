package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
)

// keysCmd runs `tollgate keys create --tenant ID [--test] [--name NAME]
// [--expires WHEN]`, which prints a new key (the only time it is shown), and `tollgate keys revoke KEY_ID`,
// each one JSON line; and `tollgate keys list --tenant ID`, a table of the
// tenant's keys without their secrets.
func keysCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	const synopsis = "keys create --tenant TENANT_ID [--test] [--name NAME] [--expires DURATION|TIME] | keys revoke KEY_ID | keys list --tenant TENANT_ID"
	if len(args) == 0 {
		return usagef(synopsis, "keys: want the subcommand create, revoke or list")
	}
	switch args[0] {
	case "list":
		return keysList(ctx, cfg, log, args[1:], cio.stdout, synopsis)
	case "create":
		return keysCreate(ctx, cfg, log, args[1:], cio.stdout, synopsis)
	case "revoke":
		return keysRevoke(ctx, cfg, log, args[1:], cio.stdout, synopsis)
	}
	return usagef(synopsis, "keys %s: want the subcommand create, revoke or list", args[0])
}

// keysList runs `tollgate keys list`.
func keysList(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer, synopsis string) error {
	fs := newFlags("keys list")
	tenantID := fs.String("tenant", "", "the tenant's ID")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return usagef(synopsis, "keys list: %v", err)
	}
	if len(rest) > 0 {
		return usagef(synopsis, "keys list: unexpected %q", rest[0])
	}
	if *tenantID == "" {
		return usagef(synopsis, "keys list: --tenant is required")
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	if _, err := store.Tenant(ctx, *tenantID); err != nil {
		return notFound(err, "keys list: no tenant %s", *tenantID)
	}
	keys, err := store.Keys(ctx, *tenantID)
	if err != nil {
		return fmt.Errorf("keys list: %w", err)
	}
	return printKeys(stdout, keys)
}

// keysCreate runs `tollgate keys create`.
func keysCreate(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer, synopsis string) error {
	fs := newFlags("keys create")
	tenantID := fs.String("tenant", "", "the tenant's ID")
	test := fs.Bool("test", false, "a test-mode key (tg_test_)")
	name := fs.String("name", "", "what the key is for")
	expires := fs.String("expires", "", "when the key stops working: a duration from now (90d, 12h) or a time (2027-01-31, RFC 3339)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return usagef(synopsis, "keys create: %v", err)
	}
	if len(rest) > 0 {
		return usagef(synopsis, "keys create: unexpected %q", rest[0])
	}
	if *tenantID == "" {
		return usagef(synopsis, "keys create: --tenant is required")
	}
	if err := tenant.ValidateKeyName(*name); err != nil {
		return usagef(synopsis, "keys create: --%v", err)
	}
	expiresAt, err := tenant.ParseKeyExpiry(*expires, time.Now())
	if err != nil {
		return usagef(synopsis, "keys create: --expires: %v", err)
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	raw, k, err := tenant.NewKey(*test)
	if err != nil {
		return err
	}
	k.TenantID, k.Name, k.ExpiresAt = *tenantID, *name, expiresAt
	if _, err := store.CreateKey(ctx, k); err != nil {
		return notFound(err, "keys create: no tenant %s", *tenantID)
	}
	log.InfoContext(ctx, "key created", "tenant_id", k.TenantID, "key_id", k.ID, "test", k.Test, "name", k.Name)
	out := struct {
		KeyID     string  `json:"key_id"`
		Key       string  `json:"key"`
		Name      string  `json:"name"`
		ExpiresAt *string `json:"expires_at"` // null: never
	}{KeyID: k.ID, Key: raw, Name: k.Name}
	if expiresAt != nil {
		at := expiresAt.UTC().Format(time.RFC3339)
		out.ExpiresAt = &at
	}
	return printJSON(stdout, out)
}

// keysRevoke runs `tollgate keys revoke`.
func keysRevoke(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer, synopsis string) error {
	rest, err := parseFlags(newFlags("keys revoke"), args)
	if err != nil {
		return usagef(synopsis, "keys revoke: %v", err)
	}
	if len(rest) != 1 || rest[0] == "" {
		return usagef(synopsis, "keys revoke: want one KEY_ID")
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	k, err := store.RevokeKey(ctx, rest[0])
	if err != nil {
		return notFound(err, "keys revoke: no key %s", rest[0])
	}
	log.InfoContext(ctx, "key revoked", "tenant_id", k.TenantID, "key_id", k.ID)
	return printJSON(stdout, struct {
		KeyID     string `json:"key_id"`
		RevokedAt string `json:"revoked_at"`
	}{k.ID, k.RevokedAt.UTC().Format(time.RFC3339Nano)})
}

// printKeys prints keys as a table: id, name, mode, what the key begins with
// (its secret part is never kept), creation, expiry, last use and
// revocation.
func printKeys(w io.Writer, keys []tenant.Key) error {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tNAME\tMODE\tKEY\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	for _, k := range keys {
		mode := "live"
		if k.Test {
			mode = "test"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\ttg_%s_%s_…\t%s\t%s\t%s\t%s\n", k.ID, cmp.Or(k.Name, "-"), mode, mode, k.Prefix,
			at(&k.CreatedAt), at(k.ExpiresAt), at(k.LastUsedAt), at(k.RevokedAt))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
