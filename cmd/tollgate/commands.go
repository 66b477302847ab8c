package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
)

// command is one of tollgate's commands: what it is called, how it reads,
// and what it needs.
type command struct {
	name string
	// synopses are its command lines, one a subcommand; summary says what
	// it does, env what it reads of the environment.
	synopses []string
	summary  string
	env      string
	// config reads the configuration run needs; run runs the command.
	config func(getenv func(string) string) (Config, error)
	run    func(ctx context.Context, cfg Config, log *slog.Logger, args []string, io cliIO) error
	// plain runs a command that needs no configuration (version), in place
	// of config and run.
	plain func(stdout io.Writer, args []string) error
}

// storeEnv is what the commands that open the database read.
const storeEnv = "DATABASE_URL (unset: the embedded PostgreSQL in TOLLGATE_DATA_DIR), TOLLGATE_DEV, TOLLGATE_LOG_FORMAT, TOLLGATE_LOG_LEVEL"

// commands are tollgate's commands, in the order help lists them.
var commands = []command{
	{
		name:     "serve",
		synopses: []string{"serve [--demo]"},
		summary:  "serve the API and the dashboard (the default command); --demo seeds a demo tenant, an admin and a little live traffic",
		env:      "every TOLLGATE_* variable, DATABASE_URL, REDIS_URL and STRIPE_* (see the README); TOLLGATE_PEPPER is required unless TOLLGATE_DEV=1",
		config:   loadConfig,
		run:      serve,
	},
	{
		name:     "migrate",
		synopses: []string{"migrate up|down|version"},
		summary:  "apply every migration, revert the last one, or show the schema version",
		env:      storeEnv,
		config:   loadStoreConfig,
		run:      migrateCmd,
	},
	{
		name: "tenants",
		synopses: []string{
			"tenants create --name NAME [--plan PLAN]",
			"tenants list",
			"tenants disable TENANT_ID [--reason TEXT]",
			"tenants enable TENANT_ID",
		},
		summary: "create a tenant with a live and a test key (printed once, as JSON), list the tenants, or disable and enable one (its keys refused with 403, its console closed; nothing deleted)",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     tenantsCmd,
	},
	{
		name: "keys",
		synopses: []string{
			"keys create --tenant TENANT_ID [--test] [--name NAME] [--expires DURATION|TIME]",
			"keys revoke KEY_ID",
			"keys list --tenant TENANT_ID",
		},
		summary: "create a key (printed once, as JSON), named and expiring when asked (--expires 90d, 12h, 2027-01-31 or RFC 3339), revoke one, or list a tenant's keys with their names and expiries (never the secret)",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     keysCmd,
	},
	{
		name: "plans",
		synopses: []string{
			"plans list",
			"plans set-price PLAN STRIPE_PRICE_ID",
			"plans set PLAN [--ip-per-minute N] [--quota-per-minute N] [--quota-per-hour N] [--monthly-checks N|unlimited]",
		},
		summary: "show the plans, map a Stripe price to a plan, or change a plan's limits",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     plansCmd,
	},
	{
		name: "policies",
		synopses: []string{
			"policies list --tenant TENANT_ID",
			"policies put NAME --tenant TENANT_ID --limit N [--window W] [--algorithm A] [--scope S] [--fail-mode M] [--shadow] [--alert-after N]",
			"policies delete NAME --tenant TENANT_ID",
		},
		summary: "list a tenant's policies, create or replace one (the fields of PUT /v1/policies/NAME; unset ones take the API's defaults), or delete one with its overrides; changes are audited as cli:<os user>",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     policiesCmd,
	},
	{
		name: "overrides",
		synopses: []string{
			"overrides list --tenant TENANT_ID --policy NAME",
			"overrides put PATTERN --tenant TENANT_ID --policy NAME --limit N [--expires-at RFC3339]",
			"overrides delete PATTERN --tenant TENANT_ID --policy NAME",
		},
		summary: "list a policy's overrides, create or replace one (PATTERN is a subject, or * matches any run of characters: quote it), or delete one; changes are audited as cli:<os user>",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     overridesCmd,
	},
	{
		name: "envoy",
		synopses: []string{
			"envoy import FILE --tenant TENANT_ID [--domain DOMAIN]",
			"envoy list --tenant TENANT_ID",
			"envoy export DOMAIN --tenant TENANT_ID",
			"envoy delete DOMAIN --tenant TENANT_ID",
		},
		summary: "upload an envoyproxy/ratelimit configuration file as one of a tenant's domains (the file's own domain unless --domain), refused as PUT /v1/envoy/domains/DOMAIN refuses it and reported as FILE:LINE: reason; list a tenant's domains, print a domain's file as uploaded, or delete one; changes are audited as cli:<os user>",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     envoyCmd,
	},
	{
		name:     "subjects",
		synopses: []string{subjectsSynopsis},
		summary:  "clear a subject's counter of a policy (a concurrency policy's leases), live or with --test the sandbox's, as DELETE /v1/policies/NAME/subjects/SUBJECT does: on the PostgreSQL or Redis counter store the servers use, never the memory store's, which lives in the serving process; audited as cli:<os user>",
		env:      "DATABASE_URL (unset: the embedded PostgreSQL in TOLLGATE_DATA_DIR), TOLLGATE_COUNTER_STORE and REDIS_URL as the servers have them, TOLLGATE_PEPPER (the servers': it keys the subject's counter) or TOLLGATE_DEV=1 (the development pepper), TOLLGATE_LOG_FORMAT, TOLLGATE_LOG_LEVEL",
		config:   loadCounterConfig,
		run:      subjectsCmd,
	},
	{
		name: "admins",
		synopses: []string{
			"admins create --email EMAIL",
			"admins set-password --email EMAIL",
		},
		summary: "create a dashboard admin, or change an admin's password and sign it out everywhere; the password is the first line of stdin",
		env:     storeEnv,
		config:  loadStoreConfig,
		run:     adminsCmd,
	},
	{
		name:     "healthcheck",
		synopses: []string{"healthcheck [--ready]"},
		summary:  "GET this machine's instance's /healthz (or /readyz with --ready) and exit 0 on 200, 1 otherwise: the Docker image's HEALTHCHECK",
		env:      "TOLLGATE_ADDR",
		config:   loadAddrConfig,
		run:      healthcheckCmd,
	},
	{
		name:     "version",
		synopses: []string{"version"},
		summary:  "print Tollgate's version: the module version and the revision it was built from",
		plain:    versionCmd,
	},
	{
		name:     "help",
		synopses: []string{"help [COMMAND]"},
		summary:  "print this help, or a command's",
	},
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return nil
	}
	return &commands[i]
}

// usageText is tollgate's usage: every command line and what it does.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: tollgate [command]\n\ncommands:\n")
	for _, c := range commands {
		for _, s := range c.synopses {
			fmt.Fprintf(&b, "  %s\n", s)
		}
		fmt.Fprintf(&b, "      %s\n", c.summary)
	}
	b.WriteString("\n`tollgate COMMAND --help` says what a command reads of the environment.\n")
	return b.String()
}

// usage is the command's own usage.
func (c *command) usage() string {
	var b strings.Builder
	for i, s := range c.synopses {
		if i == 0 {
			fmt.Fprintf(&b, "usage: tollgate %s\n", s)
		} else {
			fmt.Fprintf(&b, "       tollgate %s\n", s)
		}
	}
	fmt.Fprintf(&b, "\n%s.\n", c.summary)
	if c.env != "" {
		fmt.Fprintf(&b, "\nenvironment: %s.\n", c.env)
	} else {
		b.WriteString("\nenvironment: none.\n")
	}
	return b.String()
}

// help prints tollgate's usage, or with a command's name, that command's.
func help(stdout io.Writer, args []string) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, usageText())
		return nil
	case len(args) == 1 && lookup(args[0]) != nil:
		fmt.Fprint(stdout, lookup(args[0]).usage())
		return nil
	}
	return usagef("help [COMMAND]", "help: no command %q", strings.Join(args, " "))
}

// asksForHelp reports whether a command line asks for help: -h, -help or
// --help before any "--".
func asksForHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// versionCmd prints Tollgate's version.
func versionCmd(stdout io.Writer, args []string) error {
	if len(args) > 0 {
		return usagef("version", "version: unexpected %q", args[0])
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
	return nil
}

// versionLine says which Tollgate bi is: the module's version ("(devel)"
// when built from a checkout), the VCS revision and time it was built from
// (with ", modified" when the tree had changes), and the Go version. A
// binary built without VCS stamping (-buildvcs=false) says "revision
// unknown".
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "tollgate (unknown version: no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	parts := []string{"revision unknown"}
	if rev != "" {
		parts = []string{"revision " + rev}
		if modified {
			parts = append(parts, "modified")
		}
		if at != "" {
			parts = append(parts, at)
		}
	}
	parts = append(parts, bi.GoVersion)
	return fmt.Sprintf("tollgate %s (%s)", version, strings.Join(parts, ", "))
}
