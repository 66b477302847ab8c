#!/usr/bin/env bash
# Load test of POST /v1/check over HTTP, with the same server's /healthz as
# the ceiling of the HTTP layer in the same run. Needs wrk (apt-get install
# wrk) and a PostgreSQL on which it may create a database:
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
#   REDIS_URL=redis://127.0.0.1:6379/0 scripts/bench-http.sh [postgres|redis|memory]
#
# The server, wrk and the database share the machine, so each figure is a
# whole-box ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${1:-postgres}
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL maintenance database}"
duration=${DURATION:-15s}
conns=${CONNS:-50}

db="tollgate_bench_$$"
psql -q "$DATABASE_URL" -c "CREATE DATABASE $db"
bench_url="${DATABASE_URL%/*}/$db?sslmode=disable"
addr=127.0.0.1:18181
export DATABASE_URL="$bench_url" TOLLGATE_DEV=1 TOLLGATE_ADDR=$addr TOLLGATE_LOG_LEVEL=error TOLLGATE_COUNTER_STORE=$store

go build -o bin/tollgate ./cmd/tollgate
./bin/tollgate migrate up >/dev/null
# Ceilings far above what one box can send, so the policy is what is measured.
./bin/tollgate plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 >/dev/null
key=$(./bin/tollgate tenants create --name bench --plan enterprise | sed -E 's/.*"live_key":"([^"]+)".*/\1/')

./bin/tollgate serve 2>/tmp/tollgate-bench.log &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  psql -q "${bench_url%/*}/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf "http://$addr/readyz" >/dev/null && break; sleep 0.1; done
curl -sf -X PUT "http://$addr/v1/policies/bench" -H "Authorization: Bearer $key" \
  -d '{"limit":1000000000,"window":"1h","algorithm":"sliding_window"}' >/dev/null

script=$(mktemp --suffix .lua)
cat >"$script" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/v1/check", nil, '{"items":[{"policy":"bench","subject":"user-' .. (n % 10000) .. '"}]}')
end
LUA

echo "== GET /healthz (HTTP ceiling), $conns connections, $duration"
wrk -t2 -c"$conns" -d"$duration" --latency "http://$addr/healthz" | grep -E "Requests/sec|Latency|99%"
echo "== POST /v1/check, counter store $store, $conns connections, $duration"
wrk -t2 -c"$conns" -d"$duration" --latency -s "$script" "http://$addr/" | grep -E "Requests/sec|Latency|99%|Non-2xx"
rm -f "$script"
