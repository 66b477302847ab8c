#!/usr/bin/env bash
# The /v1/check benchmark quoted in the README: wrk against Tollgate and
# against a bare net/http handler (scripts/bare) in the same run, runs
# interleaved, medians reported. Per store it prints:
#
#   req/s          /v1/check answers a second (wrk)
#   ratio          that over the bare handler's, same run
#   cpu_us         Tollgate's CPU seconds (utime+stime, /proc) per check, in µs
#   store_cpu_us   the store's CPU seconds per check (PostgreSQL: every
#                  postgres process; Redis: the redis-server), in µs
#   rows           counter rows (PostgreSQL) or keys (Redis) written per check,
#                  over all runs (PostgreSQL's table statistics are complete
#                  once Tollgate has stopped and its connections are gone)
#   p99            wrk's 99th percentile latency
#
# Usage (wrk: apt-get install wrk):
#
#   scripts/bench-check.sh [memory] [redis] [postgres]
#
# It starts a PostgreSQL and a Redis of its own (from the machine's
# binaries, on ports 18432 and 18379, removed afterwards), so that the store
# figures count the benchmark's work and nothing else.
#
# Settings: RUNS (3), DURATION (8s), CONNS (64), SUBJECTS (100000),
# TOLLGATE_BIN (a tollgate binary to measure instead of building the tree's),
# SCOPE (subject, or global: every check on one keyless counter).
# Tollgate, wrk and the stores share the machine: every figure is a
# whole-box figure, and absolute req/s move with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
duration=${DURATION:-8s}
conns=${CONNS:-64}
subjects=${SUBJECTS:-100000}
scope=${SCOPE:-subject}
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(memory redis postgres)

mkdir -p bin
go build -o bin/bare ./scripts/bare
bin=${TOLLGATE_BIN:-}
if [ -z "$bin" ]; then
  go build -o bin/tollgate ./cmd/tollgate
  bin=./bin/tollgate
fi

tick=$(getconf CLK_TCK)
# cpu PID...: utime+stime of the processes, in clock ticks.
cpu() {
  local sum=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$sum"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

script=$(mktemp --suffix .lua)
work=$(mktemp -d)
server=""
db=""
# stop PID: SIGTERM, then SIGKILL after five seconds.
stop() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}
cleanup() {
  stop "$server"
  stop "${bare:-}"
  stop "${redis:-}"
  declare -F pgstop >/dev/null && pgstop
  rm -rf "$script" "$work"
  true
}
trap cleanup EXIT

bin/bare -addr 127.0.0.1:18280 &
bare=$!

# A PostgreSQL and a Redis of the benchmark's own.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgdata="$work/pg"
mkdir -p "$pgdata"
runas=()
if [ "$(id -u)" = 0 ]; then
  chown postgres "$work" "$pgdata"
  runas=(runuser -u postgres --)
fi
"${runas[@]}" "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
"${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/log" -w \
  -o "-p 18432 -k $pgdata -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
pgstop() { "${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true; }
redis-server --port 18379 --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
redis=$!
DATABASE_URL="postgres://postgres@127.0.0.1:18432/postgres?sslmode=disable"
REDIS_URL="redis://127.0.0.1:18379/0"
for _ in $(seq 50); do redis-cli -p 18379 ping >/dev/null 2>&1 && break; sleep 0.1; done

# wrkrun URL: runs wrk with the check script, prints "req/s p99_ms requests".
wrkrun() {
  wrk -t2 -c"$conns" -d"$duration" --latency -s "$script" "$1" >"$work/wrk.out"
  local rps p99 reqs
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
  reqs=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' "$work/wrk.out")
  if grep -q "Non-2xx" "$work/wrk.out"; then
    echo "wrk saw non-2xx answers:" >&2
    grep "Non-2xx" "$work/wrk.out" >&2
  fi
  echo "$rps $p99 $reqs"
}

# written: counter rows (PostgreSQL) or keys (Redis) written so far.
written() {
  case "$1" in
    postgres) psql -qtA "${DATABASE_URL%/*}/$db?sslmode=disable" -c "SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'counters'" ;;
    redis) redis-cli -p 18379 info commandstats | awk -F'[=,:]' '/^cmdstat_(set|hset|incrby|incr|hincrby)/ {n += $3} END {print n+0}' ;;
    *) echo 0 ;;
  esac
}

storepids() {
  case "$1" in
    postgres) local pm; pm=$(head -1 "$pgdata/postmaster.pid"); echo "$pm $(pgrep -d' ' -P "$pm")" ;;
    redis) echo "$redis" ;;
  esac
}

printf '%-9s %10s %10s %7s %8s %13s %6s %8s\n' store "req/s" "bare" ratio cpu_us store_cpu_us rows p99_ms
for store in "${stores[@]}"; do
  db="tollgate_bench_$$_$store"
  psql -q "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
  export DATABASE_URL_BENCH="${DATABASE_URL%/*}/$db?sslmode=disable"
  addr=127.0.0.1:18281
  env DATABASE_URL="$DATABASE_URL_BENCH" TOLLGATE_DEV=1 "$bin" migrate up >/dev/null
  # Ceilings far above what one box can send: the policy is what is measured.
  env DATABASE_URL="$DATABASE_URL_BENCH" TOLLGATE_DEV=1 "$bin" plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 >/dev/null
  key=$(env DATABASE_URL="$DATABASE_URL_BENCH" TOLLGATE_DEV=1 "$bin" tenants create --name bench --plan enterprise | sed -E 's/.*"live_key":"([^"]+)".*/\1/')
  env DATABASE_URL="$DATABASE_URL_BENCH" TOLLGATE_DEV=1 TOLLGATE_ADDR=$addr TOLLGATE_LOG_LEVEL=error \
    TOLLGATE_COUNTER_STORE="$store" REDIS_URL="${REDIS_URL:-}" "$bin" serve 2>"$work/serve.log" &
  server=$!
  for _ in $(seq 100); do curl -sf "http://$addr/readyz" >/dev/null && break; sleep 0.1; done
  curl -sf "http://$addr/readyz" >/dev/null || { echo "tollgate did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
  curl -sf -X PUT "http://$addr/v1/policies/bench" -H "Authorization: Bearer $key" \
    -d "{\"limit\":1000000000,\"window\":\"1h\",\"algorithm\":\"fixed_window\",\"scope\":\"$scope\"}" >/dev/null
  cat >"$script" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
request = function()
  return wrk.format(nil, "/v1/check", nil, '{"items":[{"policy":"bench","subject":"user-' .. math.random($subjects) .. '"}]}')
end
LUA
  # Warm-up: caches, connections, the JIT of nothing.
  DURATION=2s wrk -t2 -c"$conns" -d2s -s "$script" "http://$addr/" >/dev/null
  : >"$work/rows"
  total=0
  sleep 1
  w0=$(written "$store")
  for run in $(seq "$runs"); do
    read -r brps _ _ < <(wrkrun "http://127.0.0.1:18280/")
    spids=$(storepids "$store" || true)
    c0=$(cpu "$server"); s0=$(cpu $spids)
    read -r rps p99 reqs < <(wrkrun "http://$addr/")
    c1=$(cpu "$server"); s1=$(cpu $spids)
    total=$((total + reqs))
    awk -v b="$brps" -v r="$rps" -v p="$p99" -v n="$reqs" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v t="$tick" -v st="$store" \
      'BEGIN { printf "%s %.0f %.0f %.3f %.1f %.1f %.2f\n", st, r, b, r/b, c/t/n*1e6, (st=="memory" ? 0 : s/t/n*1e6), p }' >>"$work/rows"
  done
  stop "$server"; server=""
  sleep 1
  rows=$(awk -v w=$(( $(written "$store") - w0 )) -v n="$total" -v st="$store" 'BEGIN { printf "%.2f", (st=="memory" ? 0 : w/n) }')
  # Medians, column by column.
  row=$store
  for col in 2 3 4 5 6; do row="$row $(awk -v c=$col '{print $c}' "$work/rows" | median)"; done
  row="$row $rows $(awk '{print $7}' "$work/rows" | median)"
  echo "$row" | awk '{printf "%-9s %10s %10s %7s %8s %13s %6s %8s\n", $1, $2, $3, $4, $5, $6, $7, $8}' 
  psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; db=""
done
