#!/usr/bin/env bash
# Installs what Tollgate's commands need from the machine when it is missing:
#   scripts/deps.sh postgres redis chromium
# Debian/Ubuntu packages through apt-get (as root, or with sudo). Elsewhere it
# says what to install and stops.
set -euo pipefail

have_postgres() {
  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
# The Redis Cluster tests need redis-cli too (Debian's redis-tools, which
# redis-server brings).
have_redis() { command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; }
have_chromium() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }

missing=()
for want in "$@"; do
  case "$want" in
    postgres) have_postgres || missing+=(postgresql) ;;
    redis) have_redis || missing+=(redis-server redis-tools) ;;
    chromium) have_chromium || missing+=(chromium) ;;
    *) echo "deps.sh: unknown dependency $want" >&2; exit 2 ;;
  esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "Tollgate needs: ${missing[*]} (install them with your package manager)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${missing[*]} with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts a packaged server on install; Tollgate starts its own and
# needs none running.
