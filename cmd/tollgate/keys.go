package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// keysCmd runs `tollgate keys create --tenant ID [--test]`, which prints a
// new key (the only time it is shown), and `tollgate keys revoke KEY_ID`;
// each prints one JSON line.
func keysCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer) error {
	const synopsis = "keys create --tenant TENANT_ID [--test] | keys revoke KEY_ID"
	if len(args) == 0 {
		return usagef(synopsis, "keys: want the subcommand create or revoke")
	}
	switch args[0] {
	case "create":
		fs := newFlags("keys create")
		tenantID := fs.String("tenant", "", "the tenant's ID")
		test := fs.Bool("test", false, "a test-mode key (tg_test_)")
		rest, err := parseFlags(fs, args[1:])
		if err != nil {
			return usagef(synopsis, "keys create: %v", err)
		}
		if len(rest) > 0 {
			return usagef(synopsis, "keys create: unexpected %q", rest[0])
		}
		if *tenantID == "" {
			return usagef(synopsis, "keys create: --tenant is required")
		}
		store, done, err := openTenants(ctx, cfg, log)
		if err != nil {
			return err
		}
		defer done()
		raw, k, err := tenant.NewKey(*test)
		if err != nil {
			return err
		}
		k.TenantID = *tenantID
		if _, err := store.CreateKey(ctx, k); err != nil {
			return notFound(err, "keys create: no tenant %s", *tenantID)
		}
		log.InfoContext(ctx, "key created", "tenant_id", k.TenantID, "key_id", k.ID, "test", k.Test)
		return printJSON(stdout, struct {
			KeyID string `json:"key_id"`
			Key   string `json:"key"`
		}{k.ID, raw})
	case "revoke":
		rest, err := parseFlags(newFlags("keys revoke"), args[1:])
		if err != nil {
			return usagef(synopsis, "keys revoke: %v", err)
		}
		if len(rest) != 1 || rest[0] == "" {
			return usagef(synopsis, "keys revoke: want one KEY_ID")
		}
		store, done, err := openTenants(ctx, cfg, log)
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
	return usagef(synopsis, "keys %s: want the subcommand create or revoke", args[0])
}
