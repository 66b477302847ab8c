package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// The envoy command manages a tenant's envoyproxy/ratelimit files as its own
// key would through /v1/envoy/domains: a file is read by the same
// envoyconf.Service, which refuses what the API refuses and audits every
// change with the actor cli:<os user>. A file refused at a line is reported
// as a compiler would, FILE:LINE: reason. A running server learns of each
// change from the database's change notifications within a second.

const envoySynopsis = "envoy import FILE --tenant TENANT_ID [--domain DOMAIN] | envoy list --tenant TENANT_ID | envoy export DOMAIN --tenant TENANT_ID | envoy delete DOMAIN --tenant TENANT_ID"

// envoyStores are what the command uses: the domains, through the auditing
// Service, and the tenants, to say which tenant does not exist.
type envoyStores struct {
	svc     envoyconf.Service
	tenants *pgstore.Tenants
}

// openEnvoy opens the stores, with the audit entries' actor.
func openEnvoy(ctx context.Context, cfg Config, log *slog.Logger) (envoyStores, func(), error) {
	actor := cliActor()
	return openStore(ctx, cfg, log, func(pool *pgxpool.Pool) envoyStores {
		return envoyStores{
			tenants: pgstore.NewTenants(pool),
			svc:     envoyconf.Service{Store: pgstore.NewEnvoyDomains(pool), Audit: cliAudit(pool, actor, log)},
		}
	})
}

// envoyCmd runs `tollgate envoy import|list|export|delete`.
func envoyCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	if len(args) == 0 {
		return usagef(envoySynopsis, "envoy: want the subcommand import, list, export or delete")
	}
	sub := args[0]
	fs := newFlags("envoy " + sub)
	tenantID := fs.String("tenant", "", "the tenant's ID")
	var domain *string
	switch sub {
	case "import":
		domain = fs.String("domain", "", "the domain to upload the file as; unset: the file's own domain")
	case "list", "export", "delete":
	default:
		return usagef(envoySynopsis, "envoy %s: want the subcommand import, list, export or delete", sub)
	}
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return usagef(envoySynopsis, "envoy %s: %v", sub, err)
	}
	switch {
	case *tenantID == "":
		return usagef(envoySynopsis, "envoy %s: --tenant is required", sub)
	case sub == "list" && len(rest) > 0:
		return usagef(envoySynopsis, "envoy list: unexpected %q", rest[0])
	case sub == "import" && len(rest) != 1:
		return usagef(envoySynopsis, "envoy import: want one FILE")
	case sub != "list" && sub != "import" && len(rest) != 1:
		return usagef(envoySynopsis, "envoy %s: want one DOMAIN", sub)
	}
	what := "envoy " + sub
	var file string
	var src []byte
	if sub == "import" {
		// Read before the database is opened: a mistake costs nothing.
		file = rest[0]
		if src, *domain, err = readEnvoyFile(file, *domain); err != nil {
			return err
		}
	} else if sub != "list" {
		if err := envoyconf.ValidateDomain(rest[0]); err != nil {
			return envoyFault(what, "", err)
		}
	}
	s, done, err := openEnvoy(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer done()
	if _, err := s.tenants.Tenant(ctx, *tenantID); err != nil {
		return notFound(err, "%s: no tenant %s", what, *tenantID)
	}
	switch sub {
	case "import":
		d, err := s.svc.Put(ctx, *tenantID, *domain, src)
		if err != nil {
			return envoyFault(what, file, err)
		}
		log.InfoContext(ctx, "envoy domain put", "tenant_id", *tenantID, "domain", d.Name, "rules", d.Rules)
		return printJSON(cio.stdout, d)
	case "list":
		ds, err := s.svc.List(ctx, *tenantID)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return printDomains(cio.stdout, ds)
	case "export":
		d, err := s.svc.Get(ctx, *tenantID, rest[0])
		if err != nil {
			return envoyFault(what, "", err)
		}
		if _, err := cio.stdout.Write(d.Source); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		return nil
	default:
		if err := s.svc.Delete(ctx, *tenantID, rest[0]); err != nil {
			return envoyFault(what, "", err)
		}
		log.InfoContext(ctx, "envoy domain deleted", "tenant_id", *tenantID, "domain", rest[0])
		return printJSON(cio.stdout, map[string]string{"deleted": rest[0]})
	}
}

// readEnvoyFile reads a file to import and the domain to import it as:
// domain, or else the file's own. It checks the file as the API would
// before anything is stored, so that a refusal names the file's line.
func readEnvoyFile(file, domain string) ([]byte, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, "", fmt.Errorf("envoy import: %w", err)
	}
	defer f.Close()
	// One byte past the bound, so that Parse tells a file that is too
	// large without reading all of it.
	src, err := io.ReadAll(io.LimitReader(f, envoyconf.MaxSource+1))
	if err != nil {
		return nil, "", fmt.Errorf("envoy import: %w", err)
	}
	if domain == "" {
		if domain, err = envoyconf.DomainOf(src); err != nil {
			return nil, "", envoyFault("envoy import", file, err)
		}
	}
	if err := envoyconf.ValidateDomain(domain); err != nil {
		return nil, "", envoyFault("envoy import", file, err)
	}
	if _, err := envoyconf.Parse(domain, src); err != nil {
		return nil, "", envoyFault("envoy import", file, err)
	}
	return src, domain, nil
}

// envoyFault rewords envoyconf's client errors for the command line: a
// file's fault as a compiler would (FILE:LINE: reason, or FILE: reason for
// the file as a whole), the others in the API's words, naming the domain
// when it is at fault.
func envoyFault(what, file string, err error) error {
	if e, ok := errors.AsType[*envoyconf.Error](err); ok && file != "" {
		if e.Line > 0 {
			return fmt.Errorf("%s:%d: %s", file, e.Line, e.Reason)
		}
		return fmt.Errorf("%s: %s", file, e.Reason)
	}
	if ce, ok := errors.AsType[clientFault](err); ok {
		field, reason := ce.ClientFault()
		if field != "" {
			return fmt.Errorf("%s: %s: %s", what, field, reason)
		}
		return fmt.Errorf("%s: %s", what, reason)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// clientFault is an error in words chosen for the client that caused it
// (policy.FieldError, envoyconf.NotFoundError, …), as httpapi shows them.
type clientFault interface {
	error
	ClientFault() (field, reason string)
}

// printDomains prints domains as a table.
func printDomains(w io.Writer, ds []envoyconf.Domain) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tRULES\tUPDATED")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", d.Name, d.Rules, d.UpdatedAt.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// cliAudit writes a change of the command line to the audit log, with the
// actor cli:<os user>; a failure to audit is logged and the change stands.
func cliAudit(pool *pgxpool.Pool, actor string, log *slog.Logger) func(ctx context.Context, tenantID, kind string, detail map[string]any) {
	l := audit.NewLog(pgstore.NewAudit(pool))
	return func(ctx context.Context, tenantID, kind string, detail map[string]any) {
		if err := l.Record(ctx, audit.Entry{TenantID: tenantID, Actor: actor, Kind: kind, Detail: detail}); err != nil {
			log.ErrorContext(ctx, "audit entry lost", "tenant_id", tenantID, "kind", kind, "err", err)
		}
	}
}
