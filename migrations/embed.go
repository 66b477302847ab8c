// Package migrations embeds Tollgate's PostgreSQL schema as golang-migrate
// files. File names are zero-padded so that sqlc's lexical order matches
// migrate's numeric order. A migration that has landed is never edited; a new
// one changes it.
package migrations

import "embed"

// FS holds the *.up.sql and *.down.sql files.
//
//go:embed *.sql
var FS embed.FS
