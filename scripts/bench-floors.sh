#!/usr/bin/env bash
# The stores' floors beside the bare handler, in one run: what Redis and
# PostgreSQL spend on the one counter a check writes, done as simply as each
# can do it, against what the bare net/http handler (scripts/bare) spends on
# a request. Issue 42's ratio is bare_cpu_us ÷ (Tollgate's CPU a batched
# check + its store's): the floors bound it from above whatever Tollgate
# does, and TOLLGATE_SERVER (the memory store's batched row of
# scripts/bench-batch.sh in the same sitting, its server column: the bare
# handler's CPU a request over Tollgate's CPU a check with no store, each
# from its own run) tightens the bound to what Tollgate's no-store cost
# leaves. The bare handler's CPU a request moves by a fifth between runs
# minutes apart, so each cost is taken as a share of its own run's bare
# handler before they are added.
#
#   bare      wrk -t2 -cCALLERS (64) against the bare handler; its CPU a
#             request
#   redis     redis-benchmark, 4 connections, REDIS_CALLS (40,000) calls of
#             a script of KEYS (16) GETs and SET … PXs of a 32-byte value
#             (a counter's state) on keys random among 100,000: the
#             server's CPU a key
#   postgres  pgbench, 4 connections, prepared, synchronous_commit off (as
#             the store sets it), one upsert a statement of ROWS random
#             rows among 100,000 (a row each for "25 100": about what a
#             statement of scripts/bench-batch.sh's batched run holds, and
#             more), count + 1 on conflict, into the store's counters
#             table: the server's CPU a row
#
# Columns: us_per_unit (CPU a request, key or row, µs), bound (bare_cpu_us
# ÷ us_per_unit: the most checks Tollgate and that store could answer for
# the CPU the bare handler spends on a request, were Tollgate free) and,
# with TOLLGATE_SERVER, bound_tg (1 ÷ (1 ÷ TOLLGATE_SERVER + us_per_unit ÷
# bare_cpu_us)).
# Medians of RUNS (3); the bare handler and PostgreSQL run DURATION (8)
# seconds each, Redis REDIS_CALLS scripts.
#
# Usage: [TOLLGATE_SERVER=3.5] scripts/bench-floors.sh   (wrk, redis-benchmark,
# pgbench: the wrk, redis-tools and postgresql packages). Starts its own
# PostgreSQL (18432) and Redis (18379) like the other benchmarks; a
# whole-box figure: say the load average beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
duration=${DURATION:-8}
callers=${CALLERS:-64}
keys=${KEYS:-16}
read -r -a rowss <<<"${ROWS:-25 100}"
rcalls=${REDIS_CALLS:-40000}
tg=${TOLLGATE_SERVER:-}

mkdir -p bin
go build -o bin/bare ./scripts/bare
. scripts/lib/bench.sh
work=$(mktemp -d)
cleanup() { stop "${bare:-}"; bench_stores_stop; rm -rf "$work"; true; }
trap cleanup EXIT
bench_bare
bench_stores
pgport=${BENCH_PG_PORT:-18432}

# Redis: the script reads and writes each key once, as check.lua does at
# the least; redis-benchmark draws each __rand_int__ on its own.
lua="for i = 1, #KEYS do redis.call('GET', KEYS[i]); redis.call('SET', KEYS[i], ARGV[1], 'PX', 3600000) end"
rkeys=()
for _ in $(seq "$keys"); do rkeys+=("floor:__rand_int__"); done
state=$(printf 'x%.0s' $(seq 32))
redis-benchmark -p "$redis_port" -c 4 -n 20000 -r 100000 -q eval "$lua" "$keys" "${rkeys[@]}" "$state" >/dev/null

# PostgreSQL: the counters table as the store has it (bin/tollgate
# migrate), rows upserted by an array of keys.
go build -o bin/tollgate ./cmd/tollgate
env DATABASE_URL="$DATABASE_URL" TOLLGATE_DEV=1 bin/tollgate migrate up >/dev/null 2>&1
for rows in "${rowss[@]}"; do
  {
    list=""
    for i in $(seq "$rows"); do
      echo "\\set k$i random(1, 100000)"
      list="$list${list:+, }'floor:' || :k$i"
    done
    echo "INSERT INTO counters AS c (key, start, count, expires_at)"
    echo "SELECT DISTINCT k COLLATE \"C\", 0, 1, now() + interval '1 hour' FROM unnest(ARRAY[$list]::text[]) AS k ORDER BY 1"
    echo "ON CONFLICT (key) DO UPDATE SET count = c.count + 1;"
  } >"$work/upsert$rows.sql"
done
pgb() { PGOPTIONS='-c synchronous_commit=off' pgbench -n -M prepared -c 4 -j 2 -T "$1" -f "$work/upsert$2.sql" -h 127.0.0.1 -p "$pgport" -U postgres postgres 2>/dev/null | awk '/actually processed/ {print $NF}' | cut -d/ -f1; }
pgb 3 "${rowss[-1]}" >/dev/null

echo "load average: $(loadavg)"
: >"$work/rows"
for run in $(seq "$runs"); do
  b0=$(cpu "$bare")
  read -r _ n < <(bare_wrk 2 "$callers" "${duration}s")
  b1=$(cpu "$bare")
  echo "bare $n $((b1 - b0))" >>"$work/rows"

  r0=$(cpu "$redis")
  redis-benchmark -p "$redis_port" -c 4 -n "$rcalls" -r 100000 -q eval "$lua" "$keys" "${rkeys[@]}" "$state" >/dev/null
  r1=$(cpu "$redis")
  echo "redis $((rcalls * keys)) $((r1 - r0))" >>"$work/rows"

  for rows in "${rowss[@]}"; do
    p0=$(pgcpu)
    calls=$(pgb "$duration" "$rows")
    p1=$(pgcpu)
    echo "postgres-$rows $((calls * rows)) $((p1 - p0))" >>"$work/rows"
  done
done
# Per run: µs a unit; then the medians.
awk -v t="$tick" '{printf "%s %.2f\n", $1, $3 / t / $2 * 1e6}' "$work/rows" >"$work/us"
bare_us=$(awk '$1 == "bare" {print $2}' "$work/us" | median)
printf '%-9s %12s %11s %6s%s\n' floor unit us_per_unit bound "${tg:+ bound_tg}"
floors=(bare redis)
for rows in "${rowss[@]}"; do floors+=("postgres-$rows"); done
for f in "${floors[@]}"; do
  us=$(awk -v f="$f" '$1 == f {print $2}' "$work/us" | median)
  case $f in bare) unit=request ;; redis) unit="key of $keys" ;; *) unit="row of ${f#postgres-}" ;; esac
  awk -v f="${f%-*}" -v u="$unit" -v us="$us" -v b="$bare_us" -v tg="$tg" 'BEGIN {
    printf "%-9s %12s %11.2f %6.2f", f, u, us, b / us
    if (tg != "") printf " %8.2f", (f == "bare" ? tg : 1 / (1 / tg + us / b))
    printf "\n" }'
done
echo "load average: $(loadavg)"
