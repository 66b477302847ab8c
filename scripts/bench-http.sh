#!/usr/bin/env bash
# Load test of POST /v1/check over HTTP, with the same server's /healthz as
# the ceiling of the HTTP layer in the same run. Needs wrk (apt-get install
# wrk) and a PostgreSQL on which it may create a database:
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
#   REDIS_URL=redis://127.0.0.1:6379/0 scripts/bench-http.sh [postgres|redis|cluster|memory]...
#
# Each store named is measured in turn, in the same run, against the same
# database and tenant. redis uses REDIS_URL (one server, or a cluster's
# redis+cluster:// URL); cluster starts a throwaway Redis Cluster of three
# masters (REPLICAS=1 gives each a replica) from the machine's redis-server
# and redis-cli on ports from CLUSTER_PORT (default 17101) up, and removes it
# afterwards.
#
# The server, wrk and the stores share the machine, so each figure is a
# whole-box ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- postgres
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL maintenance database}"
duration=${DURATION:-15s}
conns=${CONNS:-50}
redis_url=${REDIS_URL:-}

db="tollgate_bench_$$"
psql -q "$DATABASE_URL" -c "CREATE DATABASE $db"
bench_url="${DATABASE_URL%/*}/$db?sslmode=disable"
addr=127.0.0.1:18181
export DATABASE_URL="$bench_url" TOLLGATE_DEV=1 TOLLGATE_ADDR=$addr TOLLGATE_LOG_LEVEL=error

server=""
cluster_dir=""
script=""
cleanup() {
  [ -z "$server" ] || { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  if [ -n "$cluster_dir" ]; then
    for pidfile in "$cluster_dir"/*/pid; do [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true; done
    sleep 0.2
    rm -rf "$cluster_dir"
  fi
  [ -z "$script" ] || rm -f "$script"
  psql -q "${bench_url%/*}/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
}
trap cleanup EXIT

# start_cluster starts three masters (and REPLICAS replicas each) and sets
# cluster_url.
start_cluster() {
  local base=${CLUSTER_PORT:-17101} replicas=${REPLICAS:-0} n addrs=() port
  n=$((3 * (1 + replicas)))
  cluster_dir=$(mktemp -d -t tollgate-bench-cluster-XXXX)
  for i in $(seq 0 $((n - 1))); do
    port=$((base + i))
    mkdir "$cluster_dir/$port"
    (cd "$cluster_dir/$port" && redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 5000 --save '' --appendonly no \
      --repl-diskless-sync-delay 0 --daemonize yes --pidfile "$cluster_dir/$port/pid" --logfile log)
    addrs+=("127.0.0.1:$port")
  done
  for a in "${addrs[@]}"; do
    for _ in $(seq 100); do redis-cli -h 127.0.0.1 -p "${a#*:}" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >/dev/null
  for _ in $(seq 200); do
    redis-cli -p "$base" cluster info | grep -q cluster_state:ok && break
    sleep 0.05
  done
  cluster_url="redis+cluster://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}"
}

# cpu_ticks sums utime and stime (fields 14 and 15 of /proc/PID/stat, in
# clock ticks) of the processes given.
cpu_ticks() {
  local t=0 pid f
  for pid in "$@"; do
    f=$(sed -E 's/^[0-9]+ \(.*\) //' "/proc/$pid/stat" 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13}))
  done
  echo "$t"
}

# store_pids names the Redis processes of a store on this machine (none for
# PostgreSQL, whose backends serve other clients too).
store_pids() {
  case "$1" in
    cluster) cat "$cluster_dir"/*/pid ;;
    redis) redis-cli -u "$REDIS_URL" info server 2>/dev/null | awk -F: '/^process_id/ { print $2 }' | tr -d '\r' ;;
  esac
}

go build -o bin/tollgate ./cmd/tollgate
./bin/tollgate migrate up >/dev/null
# Ceilings far above what one box can send, so the policy is what is measured.
./bin/tollgate plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 >/dev/null
key=$(./bin/tollgate tenants create --name bench --plan enterprise | sed -E 's/.*"live_key":"([^"]+)".*/\1/')

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
-- Answers given without the store (its deadline passed) are counted apart.
local threads = {}
setup = function(thread) table.insert(threads, thread) end
degraded = 0
response = function(status, headers, body)
  if string.find(body, '"degraded":true', 1, true) then degraded = degraded + 1 end
end
done = function(summary, latency, requests)
  local d = 0
  for _, t in ipairs(threads) do d = d + t:get("degraded") end
  io.write(string.format("  degraded answers: %d of %d\n", d, summary.requests))
end
LUA

for store in "$@"; do
  case "$store" in
    cluster)
      [ -n "$cluster_dir" ] || start_cluster
      export TOLLGATE_COUNTER_STORE=redis REDIS_URL="$cluster_url"
      ;;
    redis) export TOLLGATE_COUNTER_STORE=redis REDIS_URL="${redis_url:?set REDIS_URL for the redis store}" ;;
    postgres | memory) export TOLLGATE_COUNTER_STORE=$store ;;
    *) echo "bench-http.sh: unknown store $store: want postgres, redis, cluster or memory" >&2; exit 2 ;;
  esac
  ./bin/tollgate serve 2>/tmp/tollgate-bench.log &
  server=$!
  for _ in $(seq 100); do curl -sf "http://$addr/readyz" >/dev/null && break; sleep 0.1; done
  curl -sf -X PUT "http://$addr/v1/policies/bench" -H "Authorization: Bearer $key" \
    -d '{"limit":1000000000,"window":"1h","algorithm":"sliding_window"}' >/dev/null

  echo "== GET /healthz (HTTP ceiling), $conns connections, $duration"
  wrk -t2 -c"$conns" -d"$duration" --latency "http://$addr/healthz" | grep -E "Requests/sec|Latency|99%"
  label=$store
  [ "$TOLLGATE_COUNTER_STORE" != redis ] || label="$store, ${REDIS_URL%%\?*}"
  echo "== POST /v1/check, counter store $label, $conns connections, $duration"
  store_pids=$(store_pids "$store")
  before=$(cpu_ticks "$server") store_before=$(cpu_ticks $store_pids)
  out=$(wrk -t2 -c"$conns" -d"$duration" --latency -s "$script" "http://$addr/")
  after=$(cpu_ticks "$server") store_after=$(cpu_ticks $store_pids)
  echo "$out" | grep -E "Requests/sec|Latency|99%|Non-2xx|degraded"
  # CPU per check is steadier than checks per second on a shared box.
  requests=$(echo "$out" | awk '/requests in/ { print $1 }')
  tick_us=$((1000000 / $(getconf CLK_TCK)))
  echo "  service CPU per check: $(((after - before) * tick_us / requests)) µs"
  [ -z "$store_pids" ] || echo "  store CPU per check: $(((store_after - store_before) * tick_us / requests)) µs"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
done
