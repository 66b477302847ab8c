#!/usr/bin/env bash
# The /v1/check benchmark quoted in docs/benchmarks.md: wrk against Tollgate and
# against a bare net/http handler (scripts/bare) in the same run, runs
# interleaved, medians reported. Per store it prints:
#
#   req/s          /v1/check answers a second (wrk)
#   ratio          that over the bare handler's, same run
#   cpu_us         Tollgate's CPU seconds (utime+stime, /proc) per check, in µs
#   bare_us        the bare handler's, per request: the floor of the HTTP layer
#   store_cpu_us   the store's CPU seconds per check (PostgreSQL: every
#                  postgres process; Redis: the redis-server), in µs
#   degraded       answers given without the store (its deadline passed)
#   rows           counter rows (PostgreSQL) or keys (Redis) written per check,
#                  over all runs (PostgreSQL's table statistics are complete
#                  once Tollgate has stopped and its connections are gone)
#   batch          checks per call of the store: per committed transaction
#                  of the benchmark's database (PostgreSQL), per script run
#                  (Redis), over all runs
#   p99            wrk's 99th percentile latency
#   rss_mb         Tollgate's peak resident memory (VmHWM), in MiB
#   allocs         heap allocations per check (go_memstats_mallocs_total)
#
# Usage (wrk: apt-get install wrk):
#
#   scripts/bench-check.sh [memory] [redis] [cluster] [postgres]
#
# It starts a PostgreSQL and a Redis of its own (from the machine's
# binaries, on ports 18432 and 18379, removed afterwards), so that the store
# figures count the benchmark's work and nothing else; cluster starts a
# Redis Cluster of three masters (REPLICAS=1 gives each a replica) on ports
# from 18101 up.
#
# Settings: RUNS (3), DURATION (8s), CONNS (64), SUBJECTS (100000),
# TOLLGATE_BIN (a tollgate binary to measure instead of building the tree's;
# several, separated by spaces, are measured side by side: each with a
# database and a server of its own, all up at once, each run taking the
# builds in turn in an order that rotates from run to run; they are reported
# as store#1, #2, … with vs#1, the median over the runs of a build's checks a
# second over #1's in the same run: on a shared box only builds measured
# side by side compare),
# VERBOSE (set: each run's figures too, on stderr, as
#   store req/s bare ratio cpu_us store_cpu_us p99 degraded bare_us allocs run),
# SCOPE (subject, or global: every check on one keyless counter),
# CLIENTS (0: every request from 127.0.0.1; N: each from one of N client
# addresses, sent as X-Forwarded-For from 127.0.0.1, a trusted proxy),
# PROCS (unset: Go's default, one P per core; N: GOMAXPROCS=N for Tollgate
# and the bare handler alike),
# PROFILE (a directory: Go's CPU and allocation profiles of Tollgate during
# each store's last run are saved there as <store>.cpu, <store>.allocs and
# <store>.mutex (contended locks), for go tool pprof; <store>#N.… for build N).
# Each server is warmed up for 2 s before the runs. Tollgate, wrk and the
# stores share the machine: every figure is a
# whole-box figure, and absolute req/s move with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# wrk is the load generator; say so before any set-up, not after it.
command -v wrk >/dev/null || { echo "scripts/bench-check.sh needs wrk: apt-get install wrk (Debian, Ubuntu) or brew install wrk" >&2; exit 1; }
runs=${RUNS:-3}
duration=${DURATION:-8s}
conns=${CONNS:-64}
subjects=${SUBJECTS:-100000}
scope=${SCOPE:-subject}
clients=${CLIENTS:-0}
profile=${PROFILE:-}
procs=${PROCS:-}
[ -z "$profile" ] || mkdir -p "$profile"
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(memory redis postgres)

mkdir -p bin
go build -o bin/bare ./scripts/bare
read -r -a bins <<<"${TOLLGATE_BIN:-}"
if [ ${#bins[@]} -eq 0 ]; then
  go build -o bin/tollgate ./cmd/tollgate
  bins=(./bin/tollgate)
fi
bin=${bins[0]}
declare -a tot wsum ksum rss dbs keys servers w0 k0
if [ ${#bins[@]} -gt 1 ]; then
  for i in "${!bins[@]}"; do echo "#$((i + 1)) ${bins[i]}"; done
fi

# cpu, median, stop, bench_stores.
. scripts/lib/bench.sh

script=$(mktemp --suffix .lua)
work=$(mktemp -d)
server=""
db=""
cleanup() {
  local p
  for p in $server; do stop "$p"; done
  stop "${bare:-}"
  if [ -n "${cluster_dir:-}" ]; then
    for pidfile in "$cluster_dir"/*/pid; do [ -f "$pidfile" ] && stop "$(cat "$pidfile")"; done
    rm -rf "$cluster_dir"
  fi
  bench_stores_stop
  rm -rf "$script" "$script".* "$work"
  true
}
trap cleanup EXIT

env ${procs:+GOMAXPROCS=$procs} bin/bare -addr 127.0.0.1:18280 &
bare=$!

# A PostgreSQL and a Redis of the benchmark's own.
bench_stores

# start_cluster starts three masters (and REPLICAS replicas each) and sets
# cluster_url and cluster_dir.
start_cluster() {
  local base=18101 replicas=${REPLICAS:-0} n addrs=() port
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
    for _ in $(seq 100); do redis-cli -p "${a#*:}" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >/dev/null
  for _ in $(seq 200); do
    redis-cli -p "$base" cluster info | grep -q cluster_state:ok && break
    sleep 0.05
  done
  cluster_url="redis+cluster://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}"
}

# wrkrun URL: runs wrk with the check script, prints "req/s p99_ms requests
# degraded".
wrkrun() {
  wrk -t2 -c"$conns" -d"$duration" --latency -s "$2" "$1" >"$work/wrk.out"
  local rps p99 reqs deg
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
  reqs=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' "$work/wrk.out")
  if grep -q "Non-2xx" "$work/wrk.out"; then
    echo "wrk saw non-2xx answers:" >&2
    grep "Non-2xx" "$work/wrk.out" >&2
  fi
  deg=$(awk '/degraded answers:/ {print $3}' "$work/wrk.out")
  echo "$rps $p99 $reqs ${deg:-0}"
}

# written: counter rows (PostgreSQL) or keys (Redis) written so far.
written() {
  case "$1" in
    postgres) psql -qtA "${DATABASE_URL%/*}/$db?sslmode=disable" -c "SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'counters'" ;;
    redis|cluster) local p; for p in $(storeports "$1"); do redis-cli -p "$p" info commandstats; done | awk -F'[=,:]' '/^cmdstat_(set|hset|incrby|incr|hincrby)/ {n += $3} END {print n+0}' ;;
    *) echo 0 ;;
  esac
}

# mallocs: the heap allocations Tollgate has made so far.
# calls: the store's calls so far: committed transactions of the
# benchmark's database (PostgreSQL), scripts run (Redis).
calls() {
  case "$1" in
    postgres) psql -qtA "$DATABASE_URL" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$db'" ;;
    redis|cluster) local p; for p in $(storeports "$1"); do redis-cli -p "$p" info commandstats; done | awk -F'[=,:]' '/^cmdstat_(evalsha|eval|fcall)/ {n += $3} END {print n+0}' ;;
    *) echo 0 ;;
  esac
}

mallocs() { curl -s "http://$addr/metrics" | awk '/^go_memstats_mallocs_total/ {printf "%.0f", $2}'; }

storeports() {
  case "$1" in
    redis) echo "$redis_port" ;;
    cluster) ls "$cluster_dir" ;;
  esac
}

storepids() {
  case "$1" in
    cluster) cat "$cluster_dir"/*/pid ;;
    postgres) pgpids ;;
    redis) echo "$redis" ;;
  esac
}

vs=""
[ ${#bins[@]} -eq 1 ] || vs="vs#1"
printf '%-11s %10s %10s %7s %8s %8s %13s %6s %6s %8s %9s %7s %7s %s\n' store "req/s" "bare" ratio cpu_us bare_us store_cpu_us rows batch p99_ms degraded rss_mb allocs "$vs"
for store in "${stores[@]}"; do
  addr=127.0.0.1:18281
  url=$REDIS_URL kind=$store
  case "$store" in
    cluster) [ -n "${cluster_dir:-}" ] || start_cluster; url=$cluster_url kind=redis ;;
    memory | redis | postgres) ;;
    *) echo "bench-check.sh: unknown store $store: want memory, redis, cluster or postgres" >&2; exit 2 ;;
  esac
  # A database, a tenant and a key for each build, so that builds with
  # different migrations can be compared.
  for i in "${!bins[@]}"; do
    dbs[i]="tollgate_bench_$$_${store}_$i"
    psql -q "$DATABASE_URL" -c "CREATE DATABASE ${dbs[i]}" >/dev/null
    dsn="${DATABASE_URL%/*}/${dbs[i]}?sslmode=disable"
    env DATABASE_URL="$dsn" TOLLGATE_DEV=1 "${bins[i]}" migrate up >/dev/null
    # Ceilings far above what one box can send: the policy is what is measured.
    env DATABASE_URL="$dsn" TOLLGATE_DEV=1 "${bins[i]}" plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 >/dev/null
    key=$(env DATABASE_URL="$dsn" TOLLGATE_DEV=1 "${bins[i]}" tenants create --name bench --plan enterprise | sed -E 's/.*"live_key":"([^"]+)".*/\1/')
    keys[i]=$key
    cat >"$script.$i" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
local clients = $clients
request = function()
  if clients > 0 then
    local n = math.random(clients)
    wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
  end
  return wrk.format(nil, "/v1/check", nil, '{"items":[{"policy":"bench","subject":"user-' .. math.random($subjects) .. '"}]}')
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
  io.write(string.format("degraded answers: %d\n", d))
end
LUA
  done
  # Every build's server is up at once (an idle one costs nothing), and
  # the runs take the builds in turn, in an order that rotates from run to
  # run: on a shared box only builds measured side by side compare.
  for i in "${!bins[@]}"; do
    : >"$work/rows.$i"; tot[i]=0 ksum[i]=0
    port=$((18281 + i))
    env DATABASE_URL="${DATABASE_URL%/*}/${dbs[i]}?sslmode=disable" TOLLGATE_DEV=1 TOLLGATE_ADDR=127.0.0.1:$port TOLLGATE_LOG_LEVEL=error \
      TOLLGATE_COUNTER_STORE="$kind" REDIS_URL="$url" TOLLGATE_TRUSTED_PROXIES=127.0.0.1 \
      ${profile:+TOLLGATE_DEBUG_ADDR=127.0.0.1:$((18381 + i))} ${procs:+GOMAXPROCS=$procs} "${bins[i]}" serve 2>"$work/serve.$i.log" &
    servers[i]=$!
    server=${servers[*]}
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { echo "tollgate did not start:" >&2; cat "$work/serve.$i.log" >&2; exit 1; }
    curl -sf -X PUT "http://127.0.0.1:$port/v1/policies/bench" -H "Authorization: Bearer ${keys[i]}" \
      -d "{\"limit\":1000000000,\"window\":\"1h\",\"algorithm\":\"fixed_window\",\"scope\":\"$scope\"}" >/dev/null
    # Warm-up: caches, connections, the JIT of nothing.
    wrk -t2 -c"$conns" -d2s -s "$script.$i" "http://127.0.0.1:$port/" >/dev/null
  done
  sleep 1
  # PostgreSQL keeps statistics per database, and each build has its own:
  # they are read after the warm-up and once its servers have stopped.
  # Redis's are the server's, read around each run.
  for i in "${!bins[@]}"; do db=${dbs[i]}; w0[i]=$(written "$store"); k0[i]=$(calls "$store"); wsum[i]=0 ksum[i]=0; done
  n=${#bins[@]}
  for run in $(seq "$runs"); do
    for k in $(seq 0 $((n - 1))); do
      i=$(( (k + run - 1) % n ))
      db=${dbs[i]} addr=127.0.0.1:$((18281 + i))
      b0=$(cpu "$bare")
      read -r brps _ breqs _ < <(wrkrun "http://127.0.0.1:18280/" "$script.$i")
      b1=$(cpu "$bare")
      spids=$(storepids "$store" || true)
      c0=$(cpu "${servers[i]}"); s0=$(cpu $spids); m0=$(mallocs); rw0=$(written "$store"); rk0=$(calls "$store")
      prof=""
      name=$store
      [ "$n" -eq 1 ] || name="$store#$((i + 1))"
      if [ -n "$profile" ] && [ "$run" = "$runs" ]; then
        secs=$(( ${duration%s} > 2 ? ${duration%s} - 1 : 1 ))
        curl -s -o "$profile/$name.cpu" "http://127.0.0.1:$((18381 + i))/debug/pprof/profile?seconds=$secs" &
        prof=$!
      fi
      read -r rps p99 reqs deg < <(wrkrun "http://$addr/" "$script.$i")
      if [ -n "$prof" ]; then
        wait "$prof"
        curl -s -o "$profile/$name.allocs" "http://127.0.0.1:$((18381 + i))/debug/pprof/allocs"
        curl -s -o "$profile/$name.mutex" "http://127.0.0.1:$((18381 + i))/debug/pprof/mutex"
      fi
      c1=$(cpu "${servers[i]}"); s1=$(cpu $spids); m1=$(mallocs)
      if [ "$store" != postgres ]; then
        wsum[i]=$((wsum[i] + $(written "$store") - rw0)) ksum[i]=$((ksum[i] + $(calls "$store") - rk0))
      fi
      tot[i]=$((tot[i] + reqs))
      awk -v b="$brps" -v r="$rps" -v p="$p99" -v n="$reqs" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v t="$tick" -v st="$store" -v d="$deg" \
        -v bc=$((b1 - b0)) -v bn="$breqs" -v m="$(awk -v a="$m0" -v b="$m1" 'BEGIN {print b - a}')" -v run="$run" \
        'BEGIN { printf "%s %.0f %.0f %.3f %.1f %.1f %.2f %d %.1f %.1f %d\n", st, r, b, r/b, c/t/n*1e6, (st=="memory" ? 0 : s/t/n*1e6), p, d, bc/t/bn*1e6, m/n, run }' >>"$work/rows.$i"
      # Why answers were degraded, if some were (one line a second at most).
      grep -h L2_DEGRADED "$work/serve.$i.log" | head -3 | cut -c1-300 >&2 || true
    done
  done
  for i in "${!bins[@]}"; do
    rss[i]=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/${servers[i]}/status")
    stop "${servers[i]}"
  done
  server=""
  # PostgreSQL's statistics (each build has a database of its own) are
  # complete once the servers' connections are gone.
  sleep 1
  if [ "$store" = postgres ]; then
    for i in "${!bins[@]}"; do
      db=${dbs[i]}
      wsum[i]=$(( $(written "$store") - w0[i] )) ksum[i]=$(( $(calls "$store") - k0[i] ))
    done
  fi
  for i in "${!bins[@]}"; do
    rows=$(awk -v w="${wsum[i]}" -v n="${tot[i]}" -v st="$store" 'BEGIN { printf "%.2f", (st=="memory" ? 0 : w/n) }')
    batch=$(awk -v k="${ksum[i]}" -v n="${tot[i]}" 'BEGIN { printf "%.1f", (k > 0 ? n/k : 0) }')
    # Medians, column by column.
    row=$store
    [ "$n" -eq 1 ] || row="$store#$((i + 1))"
    for col in 2 3 4 5 9 6; do row="$row $(awk -v c=$col '{print $c}' "$work/rows.$i" | median)"; done
    row="$row $rows $batch $(awk '{print $7}' "$work/rows.$i" | median) $(awk '{n += $8} END {print n+0}' "$work/rows.$i") ${rss[i]} $(awk '{print $10}' "$work/rows.$i" | median)"
    # Against build #1: the median of the runs' checks a second over #1's
    # in the same run.
    if [ "$n" -gt 1 ]; then
      row="$row $(LC_ALL=C join <(awk '{print $11, $2}' "$work/rows.0" | LC_ALL=C sort) <(awk '{print $11, $2}' "$work/rows.$i" | LC_ALL=C sort) | awk '{printf "%.3f\n", $3 / $2}' | median)"
    fi
    [ -z "${VERBOSE:-}" ] || sed "s/^/  run: /" "$work/rows.$i" >&2
    echo "$row" | awk '{printf "%-11s %10s %10s %7s %8s %8s %13s %6s %6s %8s %9s %7s %7s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14}'
  done
  for db in "${dbs[@]}"; do psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; done
  dbs=() db=""
done
