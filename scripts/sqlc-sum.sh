#!/usr/bin/env bash
# sqlc's stamp: one SHA-256 over everything sqlc's outputs depend on (its
# version in go.mod, sqlc.yaml, the migrations it reads as the schema, each
# output's queries) and over the outputs themselves. `make generate` writes
# it; `make check-generated` runs `go tool sqlc diff` only when the stamp no
# longer matches, because that compiles sqlc with its C parser (libpg_query):
# about three minutes on a 2-core machine with an empty Go build cache.
#
#   scripts/sqlc-sum.sh write   record the stamp (after sqlc generate)
#   scripts/sqlc-sum.sh check   exit 0 when inputs and output are those stamped
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=sqlc.sum

# The folders sqlc reads and writes, as sqlc.yaml names them (schema,
# queries, out), so that a new output is stamped without editing this file.
dirs=$(sed -nE 's/^[[:space:]]*-?[[:space:]]*(schema|queries|out):[[:space:]]*([^[:space:]#]+).*/\2/p' sqlc.yaml | LC_ALL=C sort -u)

sum() {
	{
		grep -E '^[[:space:]]*github.com/sqlc-dev/sqlc v' go.mod
		# shellcheck disable=SC2086 # dirs holds paths without spaces
		find sqlc.yaml $dirs -type f -print0 |
			LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -d' ' -f1
}

case "${1:-}" in
write) sum >"$stamp" ;;
check) [ -f "$stamp" ] && [ "$(sum)" = "$(cat "$stamp")" ] ;;
*)
	echo "usage: $0 write|check" >&2
	exit 2
	;;
esac
