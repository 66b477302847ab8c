package pgstore

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/tollgate/tollgate/migrations"
)

// Migrator applies Tollgate's embedded migrations to one database. Several
// instances may migrate at once: golang-migrate holds an advisory lock.
type Migrator struct {
	m *migrate.Migrate
}

// NewMigrator opens a migrator on the database at dsn, a postgres:// URL.
func NewMigrator(dsn string) (*Migrator, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("migrate: database URL must be postgres://…")
	}
	u.Scheme = "pgx5"
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return &Migrator{m: m}, nil
}

// Up applies every migration not yet applied.
func (m *Migrator) Up() error {
	if err := m.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down reverts the newest migration; at version 0 it does nothing.
func (m *Migrator) Down() error {
	if v, _, err := m.Version(); err == nil && v == 0 {
		return nil
	}
	if err := m.m.Steps(-1); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// Version returns the applied version and whether a failed migration left the
// schema dirty; version 0 means none applied.
func (m *Migrator) Version() (uint, bool, error) {
	v, dirty, err := m.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrate version: %w", err)
	}
	return v, dirty, nil
}

// Close releases the migrator's connection.
func (m *Migrator) Close() error {
	srcErr, dbErr := m.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Migrate applies every migration to the database at dsn.
func Migrate(dsn string) error {
	m, err := NewMigrator(dsn)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up()
}
