#!/usr/bin/env bash
# Batched checks against one check per request and against a bare net/http
# handler (scripts/bare), in the same run, per store. The load is the Go
# client (scripts/loadgen): CALLERS (64) goroutines, each checking a random
# subject among SUBJECTS (100000), one check at a time; once with one
# request per check ("single"), once through client.WithBatching ("batched");
# wrk -t2 -cCALLERS against the bare handler beside them. Per store and mode
# it prints the medians over RUNS (3) of:
#
#   checks/s      checks answered a second
#   ratio         that over the bare handler's requests a second, same run
#   cpu_us        Tollgate's CPU (utime+stime, /proc) per check, in µs
#   client_us     the load generator's CPU per check (the Go client and the
#                 callers), in µs: the client's share of the two cores
#   store_cpu_us  the store's CPU per check (every postgres process, or the
#                 redis-server), in µs
#   bare_cpu_us   the bare handler's CPU per request, in µs, in the same run
#   server        bare_cpu_us ÷ (cpu_us + store_cpu_us): how many checks the
#                 server side (Tollgate and its store) answers for the CPU
#                 the bare handler spends answering one request (issue 42's
#                 ratio; the load generator's own CPU left out)
#   per_call      checks per store call (scripts run; transactions committed)
#   per_req       checks per HTTP request
#   p50_ms p99_ms latency one caller saw, per check
#
# Usage: scripts/bench-batch.sh [memory] [redis] [postgres]   (wrk: apt-get install wrk)
# Settings: RUNS, DURATION (8s), CALLERS (CALLERS=1: one lone caller, to
# see what batching costs it), SUBJECTS, BATCH_DELAY (1ms), BATCH_SIZE
# (16, the client's default), MODES ("single batched": which to run),
# EACH (1: print every run's row too, to stderr, to see the spread), PROFILE (a directory: the CPU and allocation
# profiles of Tollgate during each store's last batched run, <store>.cpu and
# <store>.allocs, and the load generator's, <store>.client.cpu, for go tool
# pprof).
#
# GUBERNATOR=1 adds Gubernator (GUBERNATOR=only: Gubernator alone): one
# node, in memory, its cache sized above SUBJECTS, tracing off, driven by
# scripts/gubernator-load with the same callers and subjects, 1, 32 and
# 100 decisions per GetRateLimits request, over its HTTP gateway and over
# gRPC, beside the same bare handler. Its row's cpu_us is Gubernator's CPU
# per decision, per_req the decisions per request, p50/p99 per request.
# The server is built once with go install from the Go module proxy into
# ~/.cache/tollgate-bench/gubernator-<GUBERNATOR_VERSION> (v2.13.0), never
# into the repository.
# Like scripts/bench-check.sh it starts a PostgreSQL and a Redis of its own
# (ports 18432, 18379); every figure is a whole-box figure: say the load
# average (uptime) beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
duration=${DURATION:-8s}
callers=${CALLERS:-64}
subjects=${SUBJECTS:-100000}
delay=${BATCH_DELAY:-1ms}
size=${BATCH_SIZE:-16}
profile=${PROFILE:-}
read -r -a modes_run <<<"${MODES:-single batched}"
each=${EACH:-0}
[ -z "$profile" ] || mkdir -p "$profile"
gubernator=${GUBERNATOR:-0}
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(memory redis postgres)
[ "$gubernator" != only ] || stores=()
# wrk wants at least as many connections as threads.
threads=$(( callers < 2 ? callers : 2 ))

mkdir -p bin
go build -o bin/bare ./scripts/bare
go build -o bin/loadgen ./scripts/loadgen
go build -o bin/tollgate ./cmd/tollgate
# cpu, median, stop, bench_bare, bare_wrk, bench_stores.
. scripts/lib/bench.sh
# summary prints the row of one target and mode: each column's median over
# the runs in file (lines "target mode column…").
summary() {
  local row="$1 $2" col
  for col in 3 4 5 6 7 8 9 10 11 12 13 14; do row="$row $(awk -v m="$2" -v c=$col '$2==m {print $c}' "$3" | median)"; done
  echo "$row" | awk '{printf "%-9s %-8s %9s %9s %6s %7s %9s %12s %8s %7s %7s %7s %11s %6s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14}'
}
work=$(mktemp -d)
server=""
cleanup() {
  stop "$server"; stop "${bare:-}"; stop "${guber:-}"
  bench_stores_stop
  rm -rf "$work"
  true
}
trap cleanup EXIT

bench_bare
bench_stores

calls() {
  case "$1" in
    postgres) psql -qtA "$DATABASE_URL" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$db'" ;;
    redis) redis-cli -p "$redis_port" info commandstats | awk -F'[=,:]' '/^cmdstat_(evalsha|eval)/ {n += $3} END {print n+0}' ;;
    *) echo 0 ;;
  esac
}
storepids() {
  case "$1" in
    postgres) pgpids ;;
    redis) echo "$redis" ;;
  esac
}

# bench_gubernator measures one Gubernator node beside the bare handler.
bench_gubernator() {
  local version=${GUBERNATOR_VERSION:-v2.13.0}
  local gdir=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate-bench/gubernator-$version
  if [ ! -x "$gdir/gubernator" ]; then
    echo "building Gubernator $version into $gdir (minutes, once)" >&2
    mkdir -p "$gdir"
    GOBIN="$gdir" go install "github.com/gubernator-io/gubernator/v2/cmd/gubernator@$version"
  fi
  (cd scripts/gubernator-load && go build -o ../../bin/gubernator-load .)
  # Loopback only, memberlist included; a cache above the subjects, so no
  # decision is lost to eviction; no trace exporter.
  env OTEL_TRACES_EXPORTER=none GUBER_LOG_LEVEL=error GUBER_INSTANCE_ID=bench \
    GUBER_HTTP_ADDRESS=127.0.0.1:18350 GUBER_GRPC_ADDRESS=127.0.0.1:18351 GUBER_ADVERTISE_ADDRESS=127.0.0.1:18351 \
    GUBER_MEMBERLIST_ADDRESS=127.0.0.1:18352 GUBER_MEMBERLIST_BIND_ADDRESS=127.0.0.1:18352 \
    GUBER_MEMBERLIST_KNOWN_NODES=127.0.0.1:18352 GUBER_CACHE_SIZE=$((subjects * 2)) \
    "$gdir/gubernator" 2>"$work/gubernator.log" &
  guber=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18350/v1/HealthCheck | grep -q '"peer_count":1' && break; sleep 0.1; done
  curl -sf http://127.0.0.1:18350/v1/HealthCheck >/dev/null || { cat "$work/gubernator.log" >&2; exit 1; }
  local modes=(http:1 http:32 http:100 grpc:1 grpc:32 grpc:100)
  bin/gubernator-load -http http://127.0.0.1:18350 -callers "$callers" -subjects "$subjects" -per 100 -duration 2s >/dev/null
  : >"$work/grows"
  for run in $(seq "$runs"); do
    b0=$(cpu "$bare")
    read -r brps breqs < <(bare_wrk "$threads" "$callers" "$duration")
    b1=$(cpu "$bare")
    for m in "${modes[@]}"; do
      local proto=${m%:*} per=${m#*:} target
      if [ "$proto" = http ]; then target=(-http http://127.0.0.1:18350); else target=(-grpc 127.0.0.1:18351); fi
      c0=$(cpu "$guber")
      read -r dps p50 p99 n reqs over errs < <(bin/gubernator-load "${target[@]}" -callers "$callers" -subjects "$subjects" -per "$per" -duration "$duration")
      c1=$(cpu "$guber")
      [ "$over$errs" = 00 ] || echo "gubernator $m: $over over the limit, $errs failed requests" >&2
      awk -v m="$proto-$per" -v r="$dps" -v b="$brps" -v c=$((c1 - c0)) -v n="$n" -v q="$reqs" -v t="$tick" -v p50="$p50" -v p99="$p99" \
        -v bc=$((b1 - b0)) -v bn="$breqs" \
        'BEGIN { cu = c/t/n*1e6; bu = bc/t/bn*1e6
          printf "gubernator %s %.0f %.0f %.3f %.1f - - - %.1f %.2f %.2f %.1f %.2f\n", m, r, b, r/b, cu, n/q, p50, p99, bu, bu/cu }' >>"$work/grows"
    done
  done
  for m in "${modes[@]}"; do summary gubernator "${m%:*}-${m#*:}" "$work/grows"; done
  stop "$guber"; guber=""
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-8s %9s %9s %6s %7s %9s %12s %8s %7s %7s %7s %11s %6s\n' store mode "checks/s" "bare" ratio cpu_us client_us store_cpu_us per_call per_req p50_ms p99_ms bare_cpu_us server
for store in "${stores[@]}"; do
  db="tollgate_bb_$$_$store"
  psql -q "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
  dsn="${DATABASE_URL%/*}/$db?sslmode=disable"
  env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate migrate up >/dev/null 2>&1
  env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 >/dev/null 2>&1
  key=$(env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate tenants create --name bench --plan enterprise 2>/dev/null | sed -E 's/.*"live_key":"([^"]+)".*/\1/')
  env DATABASE_URL="$dsn" TOLLGATE_DEV=1 TOLLGATE_ADDR=127.0.0.1:18281 TOLLGATE_LOG_LEVEL=error \
    TOLLGATE_COUNTER_STORE="$store" REDIS_URL="$REDIS_URL" ${profile:+TOLLGATE_DEBUG_ADDR=127.0.0.1:18381} \
    bin/tollgate serve 2>"$work/serve.log" &
  server=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18281/readyz >/dev/null && break; sleep 0.1; done
  curl -sf http://127.0.0.1:18281/readyz >/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  curl -sf -X PUT http://127.0.0.1:18281/v1/policies/bench -H "Authorization: Bearer $key" \
    -d '{"limit":1000000000,"window":"1h","algorithm":"fixed_window"}' >/dev/null
  bin/loadgen -key "$key" -callers "$callers" -subjects "$subjects" -duration 2s >/dev/null
  bin/loadgen -key "$key" -callers "$callers" -subjects "$subjects" -duration 2s -batch "$delay" -batch-size "$size" >/dev/null
  : >"$work/rows"
  for run in $(seq "$runs"); do
    b0=$(cpu "$bare")
    read -r brps breqs < <(bare_wrk "$threads" "$callers" "$duration")
    b1=$(cpu "$bare")
    for mode in "${modes_run[@]}"; do
      args=()
      [ "$mode" = single ] || args=(-batch "$delay" -batch-size "$size")
      spids=$(storepids "$store" || true)
      c0=$(cpu "$server"); s0=$(cpu $spids); k0=$(calls "$store")
      prof=""
      if [ -n "$profile" ] && [ "$run" = "$runs" ] && [ "$mode" = batched ]; then
        curl -s -o "$profile/$store.cpu" "http://127.0.0.1:18381/debug/pprof/profile?seconds=$(( ${duration%s} - 1 ))" &
        prof=$!
        args+=(-cpuprofile "$profile/$store.client.cpu")
      fi
      read -r cps p50 p99 n reqs deg errs ccpu < <(bin/loadgen -key "$key" -callers "$callers" -subjects "$subjects" -duration "$duration" "${args[@]}")
      if [ -n "$prof" ]; then wait "$prof"; curl -s -o "$profile/$store.allocs" http://127.0.0.1:18381/debug/pprof/allocs; fi
      c1=$(cpu "$server"); s1=$(cpu $spids); k1=$(calls "$store")
      [ "$deg$errs" = 00 ] || echo "$store $mode: $deg degraded, $errs errors" >&2
      awk -v st="$store" -v m="$mode" -v r="$cps" -v cc="$ccpu" -v b="$brps" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v k=$((k1 - k0)) -v n="$n" -v q="$reqs" -v t="$tick" -v p50="$p50" -v p99="$p99" \
        -v bc=$((b1 - b0)) -v bn="$breqs" \
        'BEGIN { cu = c/t/n*1e6; su = (st=="memory" ? 0 : s/t/n*1e6); bu = bc/t/bn*1e6
          printf "%s %s %.0f %.0f %.3f %.1f %.1f %.1f %.1f %.1f %.2f %.2f %.1f %.2f\n", st, m, r, b, r/b, cu, cc, su, (k > 0 ? n/k : 0), n/q, p50, p99, bu, bu/(cu+su) }' >>"$work/rows"
    done
  done
  [ "$each" = 0 ] || sed 's/^/run: /' "$work/rows" >&2
  for mode in "${modes_run[@]}"; do summary "$store" "$mode" "$work/rows"; done
  stop "$server"; server=""
  sleep 1
  psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
done
[ "$gubernator" = 0 ] || bench_gubernator
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
