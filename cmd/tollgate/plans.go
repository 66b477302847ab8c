package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
)

// plansCmd runs `tollgate plans list` (a table), `tollgate plans set-price
// PLAN STRIPE_PRICE_ID` and `tollgate plans set PLAN [limits]`; the last two
// print the plan as stored, as one JSON line.
func plansCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	stdout := cio.stdout
	const synopsis = "plans list | plans set-price PLAN STRIPE_PRICE_ID | " +
		"plans set PLAN [--ip-per-minute N] [--quota-per-minute N] [--quota-per-hour N] [--monthly-checks N|unlimited]"
	if len(args) == 0 {
		return usagef(synopsis, "plans: want the subcommand list, set-price or set")
	}
	cmd := args[0]
	var set func(store tenant.Store) (tenant.Plan, error)
	switch cmd {
	case "list":
		rest, err := parseFlags(newFlags("plans list"), args[1:])
		if err != nil {
			return usagef(synopsis, "plans list: %v", err)
		}
		if len(rest) > 0 {
			return usagef(synopsis, "plans list: unexpected %q", rest[0])
		}
	case "set-price":
		var err error
		if set, err = planPriceSetter(ctx, synopsis, args[1:]); err != nil {
			return err
		}
	case "set":
		var err error
		if set, err = planLimitsSetter(ctx, synopsis, args[1:]); err != nil {
			return err
		}
	default:
		return usagef(synopsis, "plans %s: want the subcommand list, set-price or set", cmd)
	}

	store, done, err := openStore(ctx, cfg, log, pgstore.NewTenants)
	if err != nil {
		return err
	}
	defer done()
	if set == nil {
		plans, err := store.Plans(ctx)
		if err != nil {
			return fmt.Errorf("plans list: %w", err)
		}
		return printPlans(stdout, plans)
	}
	p, err := set(store)
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "plan changed", "plan", p.Name, "command", cmd)
	return printJSON(stdout, planJSON(p))
}

// planPriceSetter parses `plans set-price`'s arguments into the change it
// makes.
func planPriceSetter(ctx context.Context, synopsis string, args []string) (func(tenant.Store) (tenant.Plan, error), error) {
	rest, err := parseFlags(newFlags("plans set-price"), args)
	if err != nil {
		return nil, usagef(synopsis, "plans set-price: %v", err)
	}
	if len(rest) != 2 {
		return nil, usagef(synopsis, "plans set-price: want PLAN and STRIPE_PRICE_ID")
	}
	if err := tenant.ValidatePriceID(rest[1]); err != nil {
		return nil, usagef(synopsis, "plans set-price: %v", err)
	}
	return func(store tenant.Store) (tenant.Plan, error) {
		p, err := store.SetPlanPrice(ctx, rest[0], rest[1])
		if err != nil {
			return p, notFound(err, "plans set-price: no plan %q (see tollgate plans list)", rest[0])
		}
		return p, nil
	}, nil
}

// planLimitsSetter parses `plans set`'s flags and plan into the change it
// makes.
func planLimitsSetter(ctx context.Context, synopsis string, args []string) (func(tenant.Store) (tenant.Plan, error), error) {
	fs := newFlags("plans set")
	var l tenant.PlanLimits
	fs.Func("ip-per-minute", "per-IP limit per minute", positiveFlag(&l.IPPerMinute))
	fs.Func("quota-per-minute", "tenant quota per minute", positiveFlag(&l.QuotaPerMinute))
	fs.Func("quota-per-hour", "tenant quota per hour", positiveFlag(&l.QuotaPerHour))
	fs.Func("monthly-checks", "live checks per calendar month, or unlimited", func(s string) error {
		if s == "unlimited" {
			l.MonthlyChecks, l.Unlimited = nil, true
			return nil
		}
		l.Unlimited = false
		return positiveFlag(&l.MonthlyChecks)(s)
	})
	rest, err := parseFlags(fs, args)
	if err != nil {
		return nil, usagef(synopsis, "plans set: %v", err)
	}
	if len(rest) != 1 {
		return nil, usagef(synopsis, "plans set: want one PLAN")
	}
	if fs.NFlag() == 0 {
		return nil, usagef(synopsis, "plans set %s: nothing to change", rest[0])
	}
	return func(store tenant.Store) (tenant.Plan, error) {
		p, err := store.SetPlanLimits(ctx, rest[0], l)
		if err != nil {
			return p, notFound(err, "plans set: no plan %q (see tollgate plans list)", rest[0])
		}
		return p, nil
	}, nil
}

// positiveFlag parses a flag's value, a positive integer, into *dst.
func positiveFlag(dst **int64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("want a positive integer")
		}
		*dst = &v
		return nil
	}
}

// planOut is a plan as the command line prints it.
type planOut struct {
	Name           string `json:"name"`
	IPPerMinute    int64  `json:"ip_per_minute"`
	QuotaPerMinute int64  `json:"quota_per_minute"`
	QuotaPerHour   int64  `json:"quota_per_hour"`
	// MonthlyChecks is null for unlimited.
	MonthlyChecks *int64  `json:"monthly_checks"`
	Purchasable   bool    `json:"purchasable"`
	StripePriceID *string `json:"stripe_price_id"`
}

func planJSON(p tenant.Plan) planOut {
	out := planOut{
		Name:           p.Name,
		IPPerMinute:    p.IPPerMinute,
		QuotaPerMinute: p.QuotaPerMinute,
		QuotaPerHour:   p.QuotaPerHour,
		MonthlyChecks:  p.MonthlyChecks,
		Purchasable:    p.Purchasable,
	}
	if p.StripePriceID != "" {
		out.StripePriceID = &p.StripePriceID
	}
	return out
}

func printPlans(w io.Writer, plans []tenant.Plan) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tIP/MIN\tQUOTA/MIN\tQUOTA/HOUR\tCHECKS/MONTH\tPURCHASABLE\tSTRIPE PRICE")
	for _, p := range plans {
		checks := "unlimited"
		if p.MonthlyChecks != nil {
			checks = strconv.FormatInt(*p.MonthlyChecks, 10)
		}
		price := p.StripePriceID
		if price == "" {
			price = "-"
		}
		purchasable := "no"
		if p.Purchasable {
			purchasable = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Name, p.IPPerMinute, p.QuotaPerMinute, p.QuotaPerHour, checks, purchasable, price)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
