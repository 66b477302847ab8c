# shellcheck shell=bash
# What the benchmark scripts (scripts/bench-*.sh) share, sourced by them:
# CPU from /proc, medians, stopping a process, and a PostgreSQL and a Redis
# of the benchmark's own, so that the store figures count the benchmark's
# work and nothing else.
#
# The sourcing script sets work (a temporary directory of its own) before
# it calls bench_stores, and stops what it started in its EXIT trap
# (bench_stores_stop stops the stores).

tick=$(getconf CLK_TCK)

# cpu PID...: utime+stime of the processes, in clock ticks (those gone are
# left out).
cpu() {
  local sum=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$sum"
}

# median of the numbers on stdin; of an even count, the lower middle one.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# stop PID: SIGTERM, then SIGKILL after five seconds.
stop() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}

# bench_stores starts a PostgreSQL (port BENCH_PG_PORT, 18432) and a Redis
# (BENCH_REDIS_PORT, 18379) from the machine's binaries, their data under
# $work, and sets DATABASE_URL, REDIS_URL, redis_port, redis (its PID),
# pgdata, and pgstop. Root runs PostgreSQL as the postgres user.
# BENCH_PG_OPTS adds server settings ("-c shared_buffers=1GB", "-c
# shared_preload_libraries=pg_stat_statements"): the default is PostgreSQL's
# own, 128 MB of buffers.
bench_stores() {
  local pgport=${BENCH_PG_PORT:-18432}
  redis_port=${BENCH_REDIS_PORT:-18379}
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pgdata="$work/pg"
  mkdir -p "$pgdata"
  runas=()
  if [ "$(id -u)" = 0 ]; then chown postgres "$work" "$pgdata"; runas=(runuser -u postgres --); fi
  "${runas[@]}" "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
  "${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/log" -w \
    -o "-p $pgport -k $pgdata -c listen_addresses=127.0.0.1 -c max_connections=200 ${BENCH_PG_OPTS:-}" start >/dev/null
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
  redis=$!
  DATABASE_URL="postgres://postgres@127.0.0.1:$pgport/postgres?sslmode=disable"
  REDIS_URL="redis://127.0.0.1:$redis_port/0"
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}

# pgstop stops bench_stores' PostgreSQL, at once.
pgstop() { "${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true; }

# bench_stores_stop stops bench_stores' Redis and PostgreSQL, if started.
bench_stores_stop() {
  stop "${redis:-}"
  [ -z "${pgdata:-}" ] || [ ! -f "$pgdata/postmaster.pid" ] || pgstop
}

# pgpids: the postmaster and its children now.
pgpids() { local pm; pm=$(head -1 "$pgdata/postmaster.pid"); echo "$pm $(pgrep -d' ' -P "$pm")"; }

# pgcpu is PostgreSQL's CPU: the postmaster, its children now, and those
# that exited (the postmaster's cutime and cstime: autovacuum's workers,
# backends of connections closed).
pgcpu() {
  local pm
  pm=$(head -1 "$pgdata/postmaster.pid")
  echo $(( $(cpu "$pm" $(pgrep -P "$pm" || true)) + $(awk '{print $16 + $17}' "/proc/$pm/stat") ))
}

# loadavg: the box's load average, one, five and fifteen minutes.
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# bench_bare starts the bare net/http handler (bin/bare, which the sourcing
# script builds) on 127.0.0.1:18280 and sets bare (its PID); it writes the
# request wrk sends it, a /v1/check body, to $work/bare.lua.
bench_bare() {
  bin/bare -addr 127.0.0.1:18280 &
  bare=$!
  cat >"$work/bare.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"items":[{"policy":"bench","subject":"user-1"}]}'
wrk.headers["Content-Type"] = "application/json"
LUA
}

# bare_wrk THREADS CONNECTIONS DURATION runs wrk against the bare handler
# and prints its requests a second and the requests it made.
bare_wrk() {
  wrk -t"$1" -c"$2" -d"$3" -s "$work/bare.lua" http://127.0.0.1:18280/ |
    awk '/requests in/ {n = $1} /Requests\/sec/ {r = $2} END {print r, n}'
}
