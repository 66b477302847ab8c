// Command tollgate runs Tollgate, the multi-tenant rate-limit and quota
// service, and its operator commands. This package is wiring only: it reads
// the environment into a Config; serve hands it to internal/app, which
// builds the service and serves it.
//
// Help, usage and version need no environment at all; each command reads
// only the configuration it uses (commands.go).
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

// run is main without the process: tests call it with their own arguments,
// environment and output.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "help", "-h", "-help", "--help":
		return help(stdout, args)
	}
	c := lookup(name)
	if c == nil {
		// The error first and one hint: the whole usage would bury it.
		return usageError{fmt.Sprintf("unknown command %q\nrun 'tollgate help' for the commands", name)}
	}
	if asksForHelp(args) {
		fmt.Fprint(stdout, c.usage())
		return nil
	}
	if c.run == nil {
		return c.plain(stdout, args)
	}
	cfg, err := c.config(getenv)
	if err != nil {
		return err
	}
	return c.run(ctx, cfg, newLogger(cfg, stderr), args, cliIO{stdin: os.Stdin, stdout: stdout, stderr: stderr})
}

// cliIO is a command's standard streams.
type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
