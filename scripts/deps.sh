#!/usr/bin/env bash
# Installs what Tollgate's commands need from the machine when it is missing:
#   scripts/deps.sh postgres redis chromium redocly node nginx caddy
# Debian/Ubuntu packages through apt-get (as root, or with sudo). Elsewhere it
# says what to install and stops.
#
# redocly is Redocly CLI, which lints the OpenAPI document (make
# lint-openapi): the npm package that scripts/redocly/package-lock.json pins
# (version and digest), installed with the machine's Node.js and npm into the
# user's cache, in a folder named for the lock file's digest, so that a new
# pin installs anew and an installed one needs no network.
#   scripts/deps.sh --path redocly
# prints the path of its command.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

redocly_dir() {
  local sum
  sum="$(sha256sum "$root/scripts/redocly/package-lock.json" | cut -c1-12)"
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/redocly-cli-$sum"
}
redocly_bin() { echo "$(redocly_dir)/node_modules/.bin/redocly"; }

if [ "${1:-}" = "--path" ]; then
  case "${2:-}" in
    redocly) redocly_bin; exit 0 ;;
    *) echo "deps.sh: --path knows redocly only" >&2; exit 2 ;;
  esac
fi

have_postgres() {
  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
# The Redis Cluster tests need redis-cli too (Debian's redis-tools, which
# redis-server brings).
have_redis() { command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; }
have_chromium() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }
have_redocly() { [ -x "$(redocly_bin)" ]; }
# nginx and Caddy are the proxies blackbox/gateways runs docs/gateways.md's
# recipes in (as child processes on free ports; a packaged service that
# starts on install is not used).
have_nginx() { command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; }
have_caddy() { command -v caddy >/dev/null 2>&1; }
# node is Node.js 20.9 or later and npm, which the TypeScript client's tests
# (clients/typescript) run with: Next.js needs 20.9.
have_node() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 9) ? 0 : 1)'
}

# install_redocly installs the pinned Redocly CLI with npm ci (the lock
# file's versions and digests, nothing else) in a folder of its own, moved
# into place once whole.
install_redocly() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "Tollgate's OpenAPI lint needs Node.js (20.19 or later 20.x, or 22.12 or later) and npm: install them" >&2
    exit 1
  fi
  if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit((a === 20 && b >= 19) || a > 22 || (a === 22 && b >= 12) ? 0 : 1)'; then
    echo "Tollgate's OpenAPI lint needs Node.js 20.19 or later 20.x, or 22.12 or later; this is $(node --version)" >&2
    exit 1
  fi
  local dir tmp
  dir="$(redocly_dir)"
  mkdir -p "$(dirname "$dir")"
  tmp="$(mktemp -d "$dir.XXXXXX")"
  cp "$root/scripts/redocly/package.json" "$root/scripts/redocly/package-lock.json" "$tmp/"
  echo "installing Redocly CLI with npm into $dir" >&2
  if ! (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2); then
    rm -rf "$tmp"
    echo "deps.sh: npm could not install Redocly CLI" >&2
    exit 1
  fi
  if [ -d "$dir" ]; then
    rm -rf "$tmp" # another install finished first
  else
    mv "$tmp" "$dir"
  fi
}

missing=()
redocly=0
for want in "$@"; do
  case "$want" in
    postgres) have_postgres || missing+=(postgresql) ;;
    redis) have_redis || missing+=(redis-server redis-tools) ;;
    chromium) have_chromium || missing+=(chromium) ;;
    redocly) have_redocly || redocly=1 ;;
    node) have_node || missing+=(nodejs npm) ;;
    nginx) have_nginx || missing+=(nginx) ;;
    caddy) have_caddy || missing+=(caddy) ;;
    *) echo "deps.sh: unknown dependency $want" >&2; exit 2 ;;
  esac
done

if [ ${#missing[@]} -gt 0 ]; then
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
fi

if [ "$redocly" -eq 1 ]; then
  install_redocly
fi
