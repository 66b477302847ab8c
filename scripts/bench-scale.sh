#!/usr/bin/env bash
# How cost grows (issue 42): checks a second, and what a check costs
# Tollgate and its store, as one thing grows at a time from a base point,
# on each counter store. The axes:
#
#   subjects  distinct counters checked (SUBJECTS_AXIS, "1000 100000 10000000")
#   tenants   tenants the checks are spread over, one API key each
#             (TENANTS_AXIS, "1 100 10000")
#   policies  policies a tenant (POLICIES_AXIS, "1 10 100")
#   batch     checks a request (BATCH_AXIS, "1 16 100 1000"): 1 is
#             POST /v1/check of one item, more POST /v1/check/batch of that
#             many one-item checks
#
# each varied alone from the base point BASE_SUBJECTS (100000),
# BASE_TENANTS (1), BASE_POLICIES (1), BASE_BATCH (16); AXES ("subjects
# tenants policies batch") picks axes. The counters stay SUBJECTS whatever
# the tenants and policies: SUBJECTS/tenants a tenant, spread over its
# policies (scripts/loadgen), so that the tenants' and policies' axes
# measure them and not more counters. Every policy is a fixed window of a
# day, its limit 1,000,000,000: every check is admitted and counted.
#
# Each point starts a Tollgate of its own on an emptied store (the memory
# store's counters go with its process; Redis is flushed; PostgreSQL's
# counters truncated), reads the store's size, fills it (every counter
# checked once, FILL_PER (1000) to a request from FILL_CALLERS (4)
# callers, timed), reads the size again, then measures CALLERS (64)
# callers checking random counters among them, BATCH to a request, for
# DURATION (10s). Per point it prints:
#
#   checks/s      checks answered a second
#   cpu_us        Tollgate's CPU (utime+stime, /proc) per check, in µs
#   store_cpu_us  the store's per check: redis-server's, or PostgreSQL's
#                 (every postgres process, autovacuum's workers included)
#   per_call      checks per store call during the measurement (Redis:
#                 scripts run; PostgreSQL: transactions committed, the
#                 service's own writes among them)
#   fill          how long filling took, and its checks a second
#   counters      counters held after the fill: the memory store's are
#                 the counters filled; Redis's the keys added (DBSIZE);
#                 PostgreSQL's the rows of counters
#   size          memory: Tollgate's resident memory (VmRSS); Redis:
#                 used_memory (INFO memory); PostgreSQL: the counters
#                 table (heap) and its indexes (pg_relation_size,
#                 pg_indexes_size); all after the fill
#   B/counter     what the fill added to that size, per counter (PostgreSQL:
#                 heap+indexes)
#   vacuum        PostgreSQL: dead rows left after the measurement
#                 (n_dead_tup), autovacuum's runs on counters during the
#                 fill and the measurement, and the share of the
#                 measurement's updates that were HOT (no index touched)
#
# Usage: scripts/bench-scale.sh [memory] [redis] [postgres]   (make bench-scale)
# The whole sitting takes 25-45 minutes on 2 cores, most of it filling
# 10^7 counters (PostgreSQL's some 19 minutes), and wants some 4 GB of
# memory for the memory store's, 2.5 GB for Redis's, 5 GB of disk for
# PostgreSQL's (docs/benchmarks.md, How cost grows).
# A small sitting, to see it work:
#   SUBJECTS_AXIS="1000 10000" TENANTS_AXIS="1 10" POLICIES_AXIS="1 10" \
#   BATCH_AXIS="1 16 100" BASE_SUBJECTS=10000 DURATION=3s scripts/bench-scale.sh
# Settings: the axes and bases above, DURATION, CALLERS, FILL_PER,
# FILL_CALLERS, COUNTER_TIMEOUT, OUT (a file: the tables are written there
# too), PROFILE (a directory: a CPU profile of Tollgate during each point's
# measurement, <store>-<subjects>-<tenants>-<policies>-<batch>.cpu, for go
# tool pprof; DEBUG_PORT, 18282, serves it).
#
# The tenants (as many as the tenants' axis's largest) are made in one SQL
# statement, each with a live key whose secret is known (its hash is what
# Tollgate stores), so that 10,000 take a second; their ceilings (the
# enterprise plan's) are far above what one box sends, and a tenant's work
# in progress is not bounded (TOLLGATE_TENANT_INFLIGHT 1000000). The store's
# deadline is COUNTER_TIMEOUT (1s, TOLLGATE_COUNTER_TIMEOUT; Tollgate's own
# default is 50ms): a sitting measures what a check costs, and a check
# answered without the store (degraded) costs less and counts nothing. A
# point where some were is marked "(N!)" beside its checks a second, and
# the first reasons are written to stderr.
#
# Like scripts/bench-batch.sh it starts a PostgreSQL and a Redis of its
# own (ports BENCH_PG_PORT 18432, BENCH_REDIS_PORT 18379; Tollgate on
# TOLLGATE_PORT 18281; BENCH_PG_OPTS for PostgreSQL's settings, as
# BENCH_PG_OPTS="-c shared_buffers=1GB"); every figure is a whole-box figure, and the box,
# its load average and the date head the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a subjects_axis <<<"${SUBJECTS_AXIS:-1000 100000 10000000}"
read -r -a tenants_axis <<<"${TENANTS_AXIS:-1 100 10000}"
read -r -a policies_axis <<<"${POLICIES_AXIS:-1 10 100}"
read -r -a batch_axis <<<"${BATCH_AXIS:-1 16 100 1000}"
read -r -a axes <<<"${AXES:-subjects tenants policies batch}"
base_subjects=${BASE_SUBJECTS:-100000}
base_tenants=${BASE_TENANTS:-1}
base_policies=${BASE_POLICIES:-1}
base_batch=${BASE_BATCH:-16}
duration=${DURATION:-10s}
profile=${PROFILE:-}
debug_port=${DEBUG_PORT:-18282}
[ -z "$profile" ] || mkdir -p "$profile"
callers=${CALLERS:-64}
fill_per=${FILL_PER:-1000}
fill_callers=${FILL_CALLERS:-4}
counter_timeout=${COUNTER_TIMEOUT:-1s}
port=${TOLLGATE_PORT:-18281}
out=${OUT:-}
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(memory redis postgres)
for s in "${stores[@]}"; do
  case "$s" in memory | redis | postgres) ;; *) echo "bench-scale.sh: unknown store $s: want memory, redis or postgres" >&2; exit 2 ;; esac
done
for a in "${axes[@]}"; do
  case "$a" in subjects | tenants | policies | batch) ;; *) echo "bench-scale.sh: unknown axis $a: want subjects, tenants, policies or batch" >&2; exit 2 ;; esac
done
largest() { printf '%s\n' "$@" | sort -n | tail -1; }
max_tenants=$(largest "$base_tenants" "${tenants_axis[@]}")
max_policies=$(largest "$base_policies" "${policies_axis[@]}")

mkdir -p bin
go build -o bin/loadgen ./scripts/loadgen
go build -o bin/tollgate ./cmd/tollgate
work=$(mktemp -d)
server=""
# cpu, stop, bench_stores, pgcpu, loadavg.
. scripts/lib/bench.sh
cleanup() {
  stop "$server"
  bench_stores_stop
  rm -rf "$work"
  true
}
trap cleanup EXIT
bench_stores

# seed makes the database's tenants (bench-0000001 …), their keys (in
# $work/keys, in the tenants' order) and their policies: bench, bench1, …
# up to the policies' axis's largest for the tenants of the base point,
# the base point's policies for the others.
seed() {
  local dsn=$1 first
  tg() { env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate "$@" 2>>"$work/seed.log" || { cat "$work/seed.log" >&2; return 1; }; }
  tg migrate up >/dev/null 2>&1
  tg plans set enterprise --ip-per-minute 1000000000 --quota-per-minute 1000000000 --quota-per-hour 1000000000 --monthly-checks unlimited >/dev/null
  # The first policy through the CLI, so that its row is what Tollgate
  # writes; the rest copied from it.
  first=$(tg tenants create --name bench-0000000 --plan enterprise | sed -E 's/.*"tenant_id":"([^"]+)".*/\1/')
  tg policies put bench --tenant "$first" --limit 1000000000 --window 1d --algorithm fixed_window >/dev/null
  # A key is tg_live_, a 12-character prefix, _ and a 32-character secret;
  # Tollgate keeps its SHA-256.
  psql -qtA "$dsn" -v ON_ERROR_STOP=1 >/dev/null <<SQL
WITH t AS (
  INSERT INTO tenants (name, plan)
  SELECT 'bench-' || lpad(i::text, 7, '0'), 'enterprise' FROM generate_series(1, $max_tenants) AS i
  RETURNING id, substr(name, 7) AS n
)
INSERT INTO api_keys (id, tenant_id, prefix, hash, test, name)
SELECT 'key_benchkey0' || n, id, 'bench' || n,
       sha256(convert_to('tg_live_bench' || n || '_scalebenchsecret0000000000000000', 'UTF8')), false, 'bench'
  FROM t;
INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode, shadow, alert_after, unit, on_expiry)
SELECT t.id, CASE WHEN j = 0 THEN 'bench' ELSE 'bench' || j END, p."limit", p."window", p.algorithm, p.scope, p.fail_mode,
       p.shadow, p.alert_after, p.unit, p.on_expiry
  FROM tenants t
  CROSS JOIN LATERAL generate_series(0, CASE WHEN substr(t.name, 7)::int <= $base_tenants THEN $max_policies ELSE $base_policies END - 1) AS j
  JOIN policies p ON p.tenant_id = '$first' AND p.name = 'bench'
 WHERE t.name <> 'bench-0000000';
SQL
  for i in $(seq "$max_tenants"); do printf 'tg_live_bench%07d_scalebenchsecret0000000000000000\n' "$i"; done >"$work/keys"
}

# size prints the store's size figures: "counters bytes heap idx" (heap
# and idx PostgreSQL's alone).
size() {
  case "$store" in
    memory) echo "0 $(awk '/^VmRSS/ {print $2 * 1024}' "/proc/$server/status") 0 0" ;;
    redis) echo "$(redis-cli -p "$redis_port" dbsize) $(redis-cli -p "$redis_port" info memory | awk -F: '/^used_memory:/ {print $2 + 0}') 0 0" ;;
    postgres) psql -qtA -F' ' "$dsn" -c "SELECT count(*), pg_total_relation_size('counters'), pg_relation_size('counters'), pg_indexes_size('counters') FROM counters" ;;
  esac
}
# vacstats prints counters' "autovacuum_count n_tup_upd n_tup_hot_upd n_dead_tup".
vacstats() { psql -qtA -F' ' "$dsn" -c "SELECT autovacuum_count, n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'counters'"; }
# storecalls prints the store's calls so far (scripts run, transactions
# committed).
storecalls() {
  case "$store" in
    memory) echo 0 ;;
    redis) redis-cli -p "$redis_port" info commandstats | awk -F'[=,:]' '/^cmdstat_(evalsha|eval)/ {n += $3} END {print n+0}' ;;
    postgres) psql -qtA "$dsn" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()" ;;
  esac
}
storecpu() {
  case "$store" in
    memory) echo 0 ;;
    redis) cpu "$redis" ;;
    postgres) pgcpu ;;
  esac
}
now() { date +%s.%N; }
# degraded_why shows why answers were degraded (Tollgate logs it once a
# second at most).
degraded_why() { grep -h L2_DEGRADED "$work/serve.log" | head -3 | cut -c1-300 >&2 || true; }

# point SUBJECTS TENANTS POLICIES BATCH measures one point of the store and
# sets row: "subjects tenants policies batch checks/s cpu_us
# store_cpu_us fill_s fill_rate counters size B/counter vacuum" (the last
# three free text, separated by |).
point() {
  local s=$1 t=$2 p=$3 b=$4
  case "$store" in
    redis) redis-cli -p "$redis_port" flushall >/dev/null ;;
    postgres) psql -q "$dsn" -c "TRUNCATE counters" ;;
  esac
  env DATABASE_URL="$dsn" TOLLGATE_DEV=1 TOLLGATE_ADDR=127.0.0.1:$port TOLLGATE_LOG_LEVEL=error \
    TOLLGATE_COUNTER_STORE="$store" REDIS_URL="$REDIS_URL" TOLLGATE_MEMORY_MAX_KEYS=100000000 \
    TOLLGATE_TENANT_INFLIGHT=1000000 TOLLGATE_COUNTER_TIMEOUT="$counter_timeout" \
    ${profile:+TOLLGATE_DEBUG_ADDR=127.0.0.1:$debug_port} bin/tollgate serve 2>"$work/serve.log" &
  server=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { echo "tollgate did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
  local load=(-url "http://127.0.0.1:$port" -keys "$work/keys" -tenants "$t" -policies "$p" -subjects "$s")
  local n0 b0 h0 i0 n1 b1 h1 i1 v0 v1 f0 f1 fr fdeg ferr c0 c1 s0 s1 x0 x1 cps n deg errs
  read -r n0 b0 h0 i0 < <(size)
  [ "$store" != postgres ] || v0=$(vacstats)
  f0=$(now)
  read -r fr _ _ _ _ fdeg ferr _ < <(bin/loadgen "${load[@]}" -fill -per "$fill_per" -callers "$fill_callers")
  f1=$(now)
  [ "$fdeg$ferr" = 00 ] || { echo "$store fill $s/$t/$p: $fdeg degraded, $ferr failed" >&2; degraded_why; }
  read -r n1 b1 h1 i1 < <(size)
  c0=$(cpu "$server"); s0=$(storecpu); x0=$(storecalls)
  local prof=""
  if [ -n "$profile" ]; then
    curl -s -o "$profile/$store-$s-$t-$p-$b.cpu" "http://127.0.0.1:$debug_port/debug/pprof/profile?seconds=$(( ${duration%s} > 2 ? ${duration%s} - 1 : 1 ))" &
    prof=$!
  fi
  read -r cps _ _ n _ deg errs _ < <(bin/loadgen "${load[@]}" -per "$b" -callers "$callers" -duration "$duration")
  c1=$(cpu "$server"); s1=$(storecpu); x1=$(storecalls)
  [ -z "$prof" ] || wait "$prof"
  [ "$deg$errs" = 00 ] || { echo "$store $s/$t/$p/$b: $deg degraded, $errs failed" >&2; degraded_why; }
  stop "$server"; server=""
  local counters vac="–"
  case "$store" in
    memory) counters=$(( s > t ? (s + t - 1) / t * t : t )) ;;
    *) counters=$((n1 - n0)) ;;
  esac
  if [ "$store" = postgres ]; then
    # Statistics are complete once Tollgate's connections are gone.
    sleep 1
    v1=$(vacstats)
    vac=$(awk -v a="$v0" -v b="$v1" 'BEGIN { split(a, x, " "); split(b, y, " ");
      u = y[2] - x[2]; printf "dead %d, autovacuum %d, HOT %s", y[4], y[1] - x[1], (u > 0 ? sprintf("%.0f%%", (y[3] - x[3]) / u * 100) : "–") }')
  fi
  row=$(awk -v s="$s" -v t="$t" -v p="$p" -v b="$b" -v cps="$cps" -v n="$n" -v c=$((c1 - c0)) -v sc=$((s1 - s0)) -v x=$((x1 - x0)) -v tick="$tick" \
    -v f="$(awk -v a="$f0" -v b="$f1" 'BEGIN {print b - a}')" -v fr="$fr" -v k="$counters" -v st="$store" \
    -v b0="$b0" -v b1="$b1" -v h0="$h0" -v h1="$h1" -v i0="$i0" -v i1="$i1" -v vac="$vac" -v bad=$((deg + errs)) '
    function mb(x) { return sprintf("%.1f MB", x / 1048576) }
    function per(x) { return (k > 0 ? sprintf("%.0f", x / k) : "–") }
    BEGIN {
      if (st == "memory") { sz = "RSS " mb(b1); bc = per(b1 - b0) }
      else if (st == "redis") { sz = "used " mb(b1); bc = per(b1 - b0) }
      else { sz = "heap " mb(h1) " + idx " mb(i1); bc = per(h1 - h0) "+" per(i1 - i0) }
      printf "%d %d %d %d %.0f%s %.1f %s %s %.1f %.0f %d|%s|%s|%s\n", s, t, p, b, cps, (bad > 0 ? "(" bad "!)" : ""),
        c / tick / n * 1e6, (st == "memory" ? "–" : sprintf("%.1f", sc / tick / n * 1e6)),
        (x > 0 ? sprintf("%.1f", n / x) : "–"), f, fr, k, sz, bc, vac
    }')
}

# Every point's row, by store, in $work/rows: "store axis row".
: >"$work/rows"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(loadavg)
for store in "${stores[@]}"; do
  db="tollgate_scale_$$_$store"
  psql -q "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
  dsn="${DATABASE_URL%/*}/$db?sslmode=disable"
  s0=$(now)
  seed "$dsn"
  echo "$store: $max_tenants tenants seeded in $(awk -v a="$s0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}') s" >&2
  declare -A done_points=()
  for axis in "${axes[@]}"; do
    case "$axis" in
      subjects) values=("${subjects_axis[@]}") ;;
      tenants) values=("${tenants_axis[@]}") ;;
      policies) values=("${policies_axis[@]}") ;;
      batch) values=("${batch_axis[@]}") ;;
    esac
    for v in "${values[@]}"; do
      s=$base_subjects t=$base_tenants p=$base_policies b=$base_batch
      case "$axis" in subjects) s=$v ;; tenants) t=$v ;; policies) p=$v ;; batch) b=$v ;; esac
      # The base point is on every axis: measured once.
      key="$s $t $p $b"
      if [ -z "${done_points[$key]:-}" ]; then
        point "$s" "$t" "$p" "$b"
        done_points[$key]=$row
        echo "$store $axis ${done_points[$key]}" >&2
      fi
      echo "$store $axis ${done_points[$key]}" >>"$work/rows"
    done
  done
  unset done_points
  psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
done

# The tables, one an axis, every store in each.
tables() {
  echo "Sitting of $started to $(date -u '+%H:%M UTC'): $(nproc) cores, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo); load average $load0 before, $(loadavg) after; Tollgate $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes'); DURATION $duration, CALLERS $callers; base point: $base_subjects subjects, $base_tenants tenant(s), $base_policies policy(ies), batches of $base_batch."
  for axis in "${axes[@]}"; do
    local col
    case "$axis" in subjects) col=3 ;; tenants) col=4 ;; policies) col=5 ;; batch) col=6 ;; esac
    echo
    echo "$axis:"
    echo
    echo "| store | $axis | checks/s | cpu_us | store_cpu_us | per_call | fill | counters | size | B/counter | vacuum |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|"
    awk -v a="$axis" -v col="$col" '$2 == a {
      split($0, f, "|"); split(f[1], w, " ")
      printf "| %s | %s | %s | %s | %s | %s | %.1f s (%s/s) | %s | %s | %s | %s |\n", $1, w[col], w[7], w[8], w[9], w[10], w[11], w[12], w[13], f[2], f[3], f[4]
    }' "$work/rows"
  done
}
if [ -n "$out" ]; then tables | tee "$out"; else tables; fi
