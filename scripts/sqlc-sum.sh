#!/usr/bin/env bash
# sqlc's stamp: one SHA-256 over everything sqlc's output depends on (its
# version in go.mod, sqlc.yaml, the migrations it reads as the schema, the
# queries) and over the output itself. `make generate` writes it;
# `make check-generated` runs `go tool sqlc diff` only when the stamp no
# longer matches, because that compiles sqlc with its C parser (libpg_query):
# about three minutes on a 2-core machine with an empty Go build cache.
#
#   scripts/sqlc-sum.sh write   record the stamp (after sqlc generate)
#   scripts/sqlc-sum.sh check   exit 0 when inputs and output are those stamped
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=internal/pgstore/sqlc.sum

sum() {
	{
		grep -E '^[[:space:]]*github.com/sqlc-dev/sqlc v' go.mod
		find sqlc.yaml migrations sql internal/pgstore/sqlcgen -type f -print0 |
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
