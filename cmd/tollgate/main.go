// Command tollgate runs Tollgate, the multi-tenant rate-limit and quota
// service, and its operator commands. This package is wiring only: it reads
// the environment into a Config, builds the services and serves them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usageText = `usage: tollgate [command]

commands:
  serve [--demo]          serve the API (the default); --demo seeds a demo tenant and traffic
  migrate up|down|version apply, revert one, or show the schema version
  tenants create --name NAME [--plan PLAN]
                          create a tenant with a live and a test key (printed once, as JSON)
  keys create --tenant TENANT_ID [--test]
                          create a key (printed once, as JSON)
  keys revoke KEY_ID      revoke a key
  plans list              show the plans
  plans set-price PLAN STRIPE_PRICE_ID
                          map a Stripe price to a plan
  plans set PLAN [--ip-per-minute N] [--quota-per-minute N] [--quota-per-hour N] [--monthly-checks N|unlimited]
                          change a plan's limits
  admins create --email EMAIL
                          create a dashboard admin; the password is the first line of stdin
  admins set-password --email EMAIL
                          change an admin's password (stdin) and sign it out everywhere
`

// run is main without the process: tests call it with their own arguments,
// environment and output.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	switch cmd {
	case "serve":
		return serve(ctx, cfg, log, args, stdout)
	case "migrate":
		return migrateCmd(ctx, cfg, log, args, stdout)
	case "tenants":
		return tenantsCmd(ctx, cfg, log, args, stdout)
	case "keys":
		return keysCmd(ctx, cfg, log, args, stdout)
	case "plans":
		return plansCmd(ctx, cfg, log, args, stdout)
	case "admins":
		return adminsCmd(ctx, cfg, log, args, os.Stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return nil
	}
	fmt.Fprint(stderr, usageText)
	return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
