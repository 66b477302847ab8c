package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/pgstore"
)

// adminsCmd runs `tollgate admins create --email EMAIL` and `tollgate admins
// set-password --email EMAIL`, which read the password from the first line
// of stdin and print one JSON line. set-password also signs the admin out
// everywhere.
func adminsCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	stdin, stdout, stderr := cio.stdin, cio.stdout, cio.stderr
	const synopsis = "admins create --email EMAIL | admins set-password --email EMAIL (password on stdin)"
	if len(args) == 0 || (args[0] != "create" && args[0] != "set-password") {
		return usagef(synopsis, "admins: want the subcommand create or set-password")
	}
	sub := args[0]
	fs := newFlags("admins " + sub)
	email := fs.String("email", "", "the admin's email address, which is the sign-in name")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return usagef(synopsis, "admins %s: %v", sub, err)
	}
	if len(rest) > 0 {
		return usagef(synopsis, "admins %s: unexpected %q; the password is read from stdin", sub, rest[0])
	}
	norm, err := admin.NormalizeEmail(*email)
	if err != nil {
		return usagef(synopsis, "admins %s: --email: %v", sub, strings.TrimSuffix(err.Error(), ": "+admin.ErrInvalid.Error()))
	}
	if f, ok := stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintf(stderr, "Password for %s (at least %d characters; it shows as you type: pipe it in to avoid that): ", norm, admin.MinPasswordLen)
		}
	}
	password, err := readPassword(stdin)
	if err != nil {
		return err
	}
	if err := admin.ValidatePassword(password); err != nil {
		return fmt.Errorf("admins %s: %s", sub, strings.TrimSuffix(err.Error(), ": "+admin.ErrInvalid.Error()))
	}
	store, done, err := openStore(ctx, cfg, log, pgstore.NewAdmins)
	if err != nil {
		return err
	}
	defer done()
	var a admin.Admin
	if sub == "create" {
		a, err = admin.Create(ctx, store, nil, norm, password, admin.DefaultArgon2)
		if errors.Is(err, admin.ErrConflict) {
			return fmt.Errorf("admins create: %s already has an account; change its password with `tollgate admins set-password --email %s`", norm, norm)
		}
	} else {
		var hash string
		if hash, err = admin.HashPassword(password, admin.DefaultArgon2); err != nil {
			return fmt.Errorf("admins set-password: %w", err)
		}
		a, err = store.SetPassword(ctx, norm, hash)
		if errors.Is(err, admin.ErrNotFound) {
			return fmt.Errorf("admins set-password: no admin %s; create one with `tollgate admins create --email %s`", norm, norm)
		}
	}
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "admin "+map[string]string{"create": "created", "set-password": "password changed"}[sub], "admin_id", a.ID)
	return printJSON(stdout, struct {
		AdminID string `json:"admin_id"`
		Email   string `json:"email"`
	}{a.ID, a.Email})
}

// readPassword reads the first line of r, without its line ending.
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, admin.MaxPasswordLen+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("no password on stdin: pipe it in, e.g. `printf '%%s\\n' \"$PASSWORD\" | tollgate admins create --email EMAIL`")
	}
	return line, nil
}

// demoAdminEmail is the admin `serve --demo` seeds.
const demoAdminEmail = "admin@example.com"

// seedDemoAdmin gives the demo admin a fresh random password (creating the
// account the first time) and prints where and how to sign in.
func seedDemoAdmin(ctx context.Context, pool *pgxpool.Pool, cfg Config, stdout io.Writer) error {
	password := rand.Text()
	hash, err := admin.HashPassword(password, admin.DefaultArgon2)
	if err != nil {
		return fmt.Errorf("demo admin: %w", err)
	}
	store := pgstore.NewAdmins(pool)
	if _, err := store.SetPassword(ctx, demoAdminEmail, hash); errors.Is(err, admin.ErrNotFound) {
		_, err = store.CreateAdmin(ctx, demoAdminEmail, hash)
		if err != nil {
			return fmt.Errorf("demo admin: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("demo admin: %w", err)
	}
	fmt.Fprintf(stdout, `Dashboard: %s/admin
  email:    %s
  password: %s   (new on every --demo start)

`, strings.TrimRight(cfg.PublicURL, "/"), demoAdminEmail, password)
	return nil
}
