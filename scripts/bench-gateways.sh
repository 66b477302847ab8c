#!/usr/bin/env bash
# Envoy's rate limit service (ShouldRateLimit over gRPC), side by side in one
# sitting: Tollgate against envoyproxy/ratelimit's own server on the same
# Redis, and against a bare gRPC handler. The load is scripts/rlsload:
# CALLERS (64) callers over CONNS (4) connections, one request at a time,
# one descriptor a request, a random client address among SUBJECTS
# (100000), as Envoy's rate limit filter sends them. Targets (TARGETS, all
# by default):
#
#   bare      scripts/rlsbare: answers OK without looking (the gRPC floor)
#   envoy     envoyproxy/ratelimit on Redis; domain bench, a rule on the key
#             remote_address, descriptor [("remote_address", ADDR)]
#   redis     Tollgate, counters on Redis; descriptor [("policy",
#   postgres  "per-client"), ("remote_address", ADDR)], its tenant's key in
#   memory    the metadata (authorization: Bearer KEY)
#
# Both limits are 1,000,000,000 a minute, fixed windows, so every answer is
# OK and every one is counted. Each run takes every target in turn, alone:
# started, warmed up for WARMUP (5s), measured for DURATION (20s), stopped;
# the runs (RUNS, 2) alternate the order, forward then reversed. Per target
# it prints the medians over the runs of:
#
#   dec/s      decisions answered a second
#   ratio      that over the bare handler's decisions a second, same run
#   svc_us     the service's CPU (utime+stime, /proc) per decision, in µs
#   redis_us   redis-server's CPU per decision
#   pg_us      PostgreSQL's CPU per decision (every postgres process, and
#              the backends that exited meanwhile); Tollgate keeps its
#              tenants, keys and usage there whatever its counter store
#   server_us  the three together: what a decision costs the servers
#   dec/cpu_s  decisions per server CPU second (1e6 / server_us)
#   load_us    the load generator's CPU per decision
#   rcmd       Redis commands run a decision, those that scripts run included
#   p50_ms p99_ms  latency one caller saw, per request
#   rss_mb     the service's peak resident memory (VmHWM) in MiB
#   p50@R p99@R    the same at a fixed RATE (2000) decisions a second,
#              measured for RATE_DURATION (10s) after the rest: latency
#              when the box is not saturated (above, every caller sends
#              its next call at once, so the latencies are the queue of a
#              saturated box: the bare handler's own p99 is 7-30 ms)
#
# and the verdict of issue 39's target: Tollgate on Redis at least 2 ×
# envoyproxy/ratelimit's decisions per server CPU second (per run, then the
# median), p99 at most 5 ms (at the fixed rate). Answers OVER_LIMIT and errors, when any, are
# written to stderr.
#
# envoyproxy/ratelimit is built from source (none of it enters this
# repository), once per commit, into ~/.cache/tollgate/envoy-ratelimit/:
#   RATELIMIT_SRC=/path/to/checkout   a checkout of
#       https://github.com/envoyproxy/ratelimit (git clone it); its HEAD is
#       the commit reported. Without it the script clones RATELIMIT_REF
#       (f2fb157, the commit docs/benchmarks.md measured) into the cache,
#       and says what to do when GitHub cannot be reached.
#   RATELIMIT_BIN=/path/to/ratelimit  a server already built.
#   RATELIMIT_ENV="REDIS_PIPELINE_WINDOW=150us …"  more of its settings.
# A go.mod that wants a newer Go than this machine's is built with
# GOTOOLCHAIN=go1.27.3 (RATELIMIT_GOTOOLCHAIN), in the build's environment
# only.
#
# Settings: RUNS, DURATION, WARMUP, CALLERS, CONNS, SUBJECTS, RATE, RATE_DURATION, TARGETS
# ("bare envoy redis postgres memory"), EACH (1: every run's row too, to
# stderr), PROFILE (a directory: CPU profiles of each service during the
# last run, <target>.cpu, for go tool pprof; envoyproxy/ratelimit's from its
# debug port), TOLLGATE_BIN (other builds of Tollgate than this tree's,
# space-separated: a target redis:2 is the second build on Redis, so that
# builds are measured in turns in one sitting), TOLLGATE_ENV ("GOMAXPROCS=1
# GODEBUG=…": more environment for Tollgate).
# Like scripts/bench-batch.sh it starts a PostgreSQL and a Redis of its own
# (ports 18432, 18379), so their CPU is the benchmark's alone; every figure
# is a whole-box figure: the load average is printed beside them.
#
# Usage: scripts/bench-gateways.sh   (make bench-gateways)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-2}
duration=${DURATION:-20s}
warmup=${WARMUP:-5s}
callers=${CALLERS:-64}
conns=${CONNS:-4}
subjects=${SUBJECTS:-100000}
rate=${RATE:-2000}
rduration=${RATE_DURATION:-10s}
read -r -a targets <<<"${TARGETS:-bare envoy redis postgres memory}"
each=${EACH:-0}
profile=${PROFILE:-}
[ -z "$profile" ] || mkdir -p "$profile"
limit=1000000000

mkdir -p bin
go build -o bin/rlsload ./scripts/rlsload
go build -o bin/rlsbare ./scripts/rlsbare
go build -o bin/tollgate ./cmd/tollgate
read -r -a tgbins <<<"${TOLLGATE_BIN:-bin/tollgate}"
read -r -a tgenv <<<"${TOLLGATE_ENV:-}"
# cpu, stop, bench_stores, pgcpu.
. scripts/lib/bench.sh
# median of the numbers on stdin; of an even count (RUNS is 2), the mean of
# the middle two.
median() { sort -g | awk '{a[NR]=$1} END {m = int((NR+1)/2); print (NR % 2 ? a[m] : (a[m] + a[m+1]) / 2)}'; }
work=$(mktemp -d)
svc=""
cleanup() {
  stop "$svc"
  bench_stores_stop
  rm -rf "$work"
  true
}
trap cleanup EXIT

# ratelimit_build sets rl_bin and rl_commit: envoyproxy/ratelimit's server,
# built from RATELIMIT_SRC or a clone of RATELIMIT_REF, cached by commit.
ratelimit_build() {
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/envoy-ratelimit
  local ref=${RATELIMIT_REF:-f2fb15770f7fd1c88ca6c3a1b58ee513917ace96}
  if [ -n "${RATELIMIT_BIN:-}" ]; then
    rl_bin=$RATELIMIT_BIN rl_commit=${RATELIMIT_COMMIT:-"unknown (RATELIMIT_BIN)"}
    return
  fi
  local src=${RATELIMIT_SRC:-}
  if [ -z "$src" ]; then
    src=$cache/src-$ref
    if [ ! -d "$src/.git" ]; then
      echo "cloning envoyproxy/ratelimit at $ref into $src" >&2
      rm -rf "$src.tmp"
      if ! GIT_TERMINAL_PROMPT=0 timeout 300 git clone -q https://github.com/envoyproxy/ratelimit "$src.tmp" 2>"$work/clone.log" ||
        ! git -C "$src.tmp" checkout -q "$ref" 2>>"$work/clone.log"; then
        rm -rf "$src.tmp"
        cat >&2 <<EOF
bench-gateways: envoyproxy/ratelimit could not be cloned from https://github.com/envoyproxy/ratelimit:
  $(tail -1 "$work/clone.log")
Get a checkout where GitHub can be reached (git clone https://github.com/envoyproxy/ratelimit;
git -C ratelimit checkout $ref), copy it here and run
  RATELIMIT_SRC=/path/to/ratelimit scripts/bench-gateways.sh
or measure Tollgate alone: TARGETS="bare redis postgres memory" scripts/bench-gateways.sh
EOF
        exit 1
      fi
      mv "$src.tmp" "$src"
    fi
  fi
  [ -f "$src/go.mod" ] && [ -d "$src/src/service_cmd" ] || {
    echo "bench-gateways: RATELIMIT_SRC=$src is no checkout of envoyproxy/ratelimit (no go.mod, no src/service_cmd)" >&2
    exit 1
  }
  rl_commit=$(git -C "$src" rev-parse HEAD 2>/dev/null) || rl_commit=""
  local out
  if [ -n "$rl_commit" ]; then
    out=$cache/$rl_commit/ratelimit
  else
    # Not a git checkout: no commit to cache it by; Go's build cache keeps
    # the rebuild short.
    rl_commit="unknown ($src is not a git checkout)"
    out=$work/ratelimit
  fi
  if [ ! -x "$out" ]; then
    local want have tc=()
    want=$(awk '$1 == "go" {print $2; exit}' "$src/go.mod")
    have=$(go env GOVERSION | sed 's/^go//')
    if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | tail -1)" != "$have" ]; then
      tc=(GOTOOLCHAIN="${RATELIMIT_GOTOOLCHAIN:-go1.27.3}")
    fi
    echo "building envoyproxy/ratelimit ($rl_commit) into $out${tc:+ with ${tc[*]}} (minutes, once)" >&2
    mkdir -p "$(dirname "$out")"
    (cd "$src" && env GOWORK=off GOFLAGS=-mod=readonly "${tc[@]}" go build -o "$out.tmp" ./src/service_cmd)
    mv "$out.tmp" "$out"
  fi
  rl_bin=$out
}
for t in "${targets[@]}"; do [ "$t" != envoy ] || ratelimit_build; done

bench_stores
rcmds() { redis-cli -p "$redis_port" info stats | awk -F: '/^total_commands_processed/ {print $2 + 0}'; }

# Tollgate: one tenant on a plan whose ceilings the load never reaches, and
# its policy per-client, in one database that every counter store shares.
dsn=$DATABASE_URL
tg() { env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate "$@"; }
tg migrate up >/dev/null 2>&1
tg plans set enterprise --ip-per-minute $limit --quota-per-minute $limit --quota-per-hour $limit --monthly-checks unlimited >/dev/null
created=$(tg tenants create --name bench --plan enterprise 2>/dev/null)
key=$(sed -E 's/.*"live_key":"([^"]+)".*/\1/' <<<"$created")
tenant=$(sed -E 's/.*"tenant_id":"([^"]+)".*/\1/' <<<"$created")
tg policies put per-client --tenant "$tenant" --limit $limit --window 1m --algorithm fixed_window >/dev/null

# envoyproxy/ratelimit's configuration: the same limit on the key
# remote_address, each address counted apart.
mkdir -p "$work/rl/ratelimit/config"
cat >"$work/rl/ratelimit/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: $limit
EOF

# start runs target t and sets svc (its pid), addr, debug (its profiler's
# URL) and load (rlsload's arguments for it); it returns once a call is
# answered.
start() {
  local t=$1
  load=(-callers "$callers" -conns "$conns" -subjects "$subjects")
  debug=""
  case "$t" in
    bare)
      addr=127.0.0.1:18090
      bin/rlsbare -addr "$addr" 2>"$work/svc.log" &
      ;;
    envoy)
      addr=127.0.0.1:18091 debug=http://127.0.0.1:18093
      read -r -a extra <<<"${RATELIMIT_ENV:-}"
      env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$redis_port CACHE_KEY_PREFIX=envoy-bench: \
        RUNTIME_ROOT="$work/rl" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
        HOST=127.0.0.1 PORT=18092 GRPC_HOST=127.0.0.1 GRPC_PORT=18091 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18093 \
        "${extra[@]}" "$rl_bin" >"$work/svc.log" 2>&1 &
      load+=(-policy "")
      ;;
    redis | postgres | memory | redis:* | postgres:* | memory:*)
      addr=127.0.0.1:18081 debug=http://127.0.0.1:18381
      local build=1
      [[ $t != *:* ]] || build=${t#*:}
      [ -n "${tgbins[build - 1]:-}" ] || { echo "bench-gateways: $t: TOLLGATE_BIN has no build $build" >&2; exit 2; }
      env DATABASE_URL="$dsn" TOLLGATE_DEV=1 TOLLGATE_ADDR=127.0.0.1:18281 TOLLGATE_GRPC_ADDR="$addr" \
        TOLLGATE_DEBUG_ADDR=127.0.0.1:18381 TOLLGATE_LOG_LEVEL=error TOLLGATE_COUNTER_STORE="${t%%:*}" \
        REDIS_URL=redis://127.0.0.1:$redis_port/1 "${tgenv[@]}" "${tgbins[build - 1]}" serve 2>"$work/svc.log" &
      load+=(-key "$key")
      ;;
    *) echo "bench-gateways: unknown target $t" >&2; exit 2 ;;
  esac
  svc=$!
  load+=(-addr "$addr")
  local line n errs
  for _ in $(seq 100); do
    line=$(bin/rlsload "${load[@]}" -callers 1 -conns 1 -duration 20ms 2>/dev/null) || true
    read -r _ _ _ n _ _ errs _ <<<"${line:-0 0 0 0 0 0 1 0}"
    [ "$n" -gt 0 ] && [ "$errs" = 0 ] && return 0
    sleep 0.1
  done
  echo "bench-gateways: $t answered no call:" >&2
  bin/rlsload "${load[@]}" -callers 1 -conns 1 -duration 20ms >&2 || true
  cat "$work/svc.log" >&2
  exit 1
}

# measure runs target t once and appends its row to $work/rows.
measure() {
  local t=$1 run=$2 prof=""
  start "$t"
  bin/rlsload "${load[@]}" -duration "$warmup" >/dev/null 2>&1
  if [ -n "$profile" ] && [ "$run" = "$runs" ] && [ -n "$debug" ]; then
    curl -s -o "$profile/$t.cpu" "$debug/debug/pprof/profile?seconds=$(( ${duration%s} - 2 ))" &
    prof=$!
  fi
  local c0 r0 p0 k0 c1 r1 p1 k1
  c0=$(cpu "$svc"); r0=$(cpu "$redis"); p0=$(pgcpu); k0=$(rcmds)
  read -r dps p50 p99 n ok over errs lcpu < <(bin/rlsload "${load[@]}" -duration "$duration")
  c1=$(cpu "$svc"); r1=$(cpu "$redis"); p1=$(pgcpu); k1=$(rcmds)
  [ -z "$prof" ] || wait "$prof"
  [ "$over$errs" = 00 ] || echo "$t, run $run: $over OVER_LIMIT, $errs errors of $n" >&2
  local r50 r99 rn rover rerrs rss
  read -r _ r50 r99 rn _ rover rerrs _ < <(bin/rlsload "${load[@]}" -rate "$rate" -duration "$rduration")
  [ "$rover$rerrs" = 00 ] || echo "$t, run $run, at $rate a second: $rover OVER_LIMIT, $rerrs errors of $rn" >&2
  rss=$(awk '/^VmHWM:/ {print $2 / 1024}' "/proc/$svc/status" 2>/dev/null || echo 0)
  stop "$svc"; svc=""
  awk -v run="$run" -v t="$t" -v d="$dps" -v c=$((c1 - c0)) -v r=$((r1 - r0)) -v p=$((p1 - p0)) -v k=$((k1 - k0)) \
    -v n="$n" -v l="$lcpu" -v tick="$tick" -v p50="$p50" -v p99="$p99" -v r50="$r50" -v r99="$r99" -v rss="${rss:-0}" 'BEGIN {
      f = 1e6 / tick / n; s = (c + r + p) * f
      printf "%s %s %.0f %.1f %.1f %.1f %.1f %.0f %.1f %.2f %.2f %.2f %.2f %.2f %.0f\n", run, t, d, c*f, r*f, p*f, s, 1e6/s, l, k/n, p50, p99, r50, r99, rss }' >>"$work/rows"
}

echo "machine: $(nproc) cores, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(free -g | awk '/^Mem:/ {print $2}') GiB"
if [ -n "${TOLLGATE_BIN:-}" ]; then
  for i in "${!tgbins[@]}"; do echo "tollgate build $((i + 1)): ${tgbins[i]}${TOLLGATE_ENV:+ with $TOLLGATE_ENV}"; done
else
  echo "tollgate: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- cmd internal go.mod || echo ' (modified)')${TOLLGATE_ENV:+ with $TOLLGATE_ENV}"
fi
for t in "${targets[@]}"; do [ "$t" != envoy ] || echo "envoyproxy/ratelimit: $rl_commit"; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/rows"
for run in $(seq "$runs"); do
  order=("${targets[@]}")
  if (( run % 2 == 0 )); then order=(); for t in "${targets[@]}"; do order=("$t" "${order[@]}"); done; fi
  for t in "${order[@]}"; do measure "$t" "$run"; done
done
[ "$each" = 0 ] || sed 's/^/run: /' "$work/rows" >&2

# ratio: each row's decisions a second over the bare handler's in its run.
awk 'NR == FNR { if ($2 == "bare") b[$1] = $3; next } { print $0, ($1 in b ? $3 / b[$1] : 0) }' "$work/rows" "$work/rows" >"$work/rated"
printf '%-9s %8s %6s %7s %9s %6s %10s %10s %8s %5s %7s %7s %7s %7s %6s\n' target "dec/s" ratio svc_us redis_us pg_us server_us "dec/cpu_s" load_us rcmd p50_ms p99_ms "p50@R" "p99@R" rss_mb
for t in "${targets[@]}"; do
  row="$t"
  for col in 3 16 4 5 6 7 8 9 10 11 12 13 14 15; do row="$row $(awk -v t="$t" -v c=$col '$2 == t {print $c}' "$work/rated" | median)"; done
  awk '{printf "%-9s %8.0f %6.2f %7.1f %9.1f %6.1f %10.1f %10.0f %8.1f %5.2f %7.2f %7.2f %7.2f %7.2f %6.0f\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15}' <<<"$row"
done
echo "(p50@R p99@R: at $rate decisions a second)"
if [[ " ${targets[*]} " == *" envoy "* && " ${targets[*]} " == *" redis "* ]]; then
  x=$(awk 'NR == FNR { if ($2 == "envoy") e[$1] = $8; next } $2 == "redis" { print $8 / e[$1] }' "$work/rows" "$work/rows" | median)
  p99=$(awk '$2 == "redis" {print $14}' "$work/rows" | median)
  awk -v x="$x" -v p="$p99" -v r="$rate" 'BEGIN { printf "target (issue 39): Tollgate on Redis %.2f × envoyproxy/ratelimit'"'"'s decisions per server CPU second (want >= 2): %s; p99 at %d a second %.2f ms (want <= 5): %s\n",
    x, (x >= 2 ? "met" : "missed"), r, p, (p <= 5 ? "met" : "missed") }'
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
