#!/usr/bin/env bash
# What one call of the PostgreSQL counter store costs PostgreSQL, by the
# number of counter keys in it: tollgate_check_fixed_packed (the store's
# statement for a batch of one-item fixed-window checks, each on its own
# key, all admitted) with KEYS keys a call (default "1 16 64"), beside
# three baselines: "SELECT 1", one single-row upsert of a counter, and the
# statement the function runs for all-admitted keys, alone, for one key;
# each its own transaction as the store's calls are (synchronous_commit
# off, as the store sets it). pgbench drives each with CLIENTS (4) connections for
# DURATION (8) seconds, prepared; RUNS (3) runs, and the medians printed:
#
#   calls/s      calls a second
#   pg_us_call   PostgreSQL's CPU (every backend, utime+stime from /proc)
#                per call, in µs
#   pg_us_key    that per key
#
# Usage: scripts/bench-pgcall.sh   (pgbench: the postgresql package's)
# It starts a PostgreSQL of its own (port 18433) from the machine's binaries
# and migrates it with bin/tollgate. A whole-box figure: say the load
# average beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
duration=${DURATION:-8}
clients=${CLIENTS:-4}
keys=(${KEYS:-1 16 64})

go build -o bin/tollgate ./cmd/tollgate
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d)
pgdata="$work/pg"
mkdir -p "$pgdata"
runas=()
if [ "$(id -u)" = 0 ]; then chown postgres "$work" "$pgdata"; runas=(runuser -u postgres --); fi
cleanup() {
  "${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"${runas[@]}" "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
"${runas[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/log" -w \
  -o "-p 18433 -k $pgdata -c listen_addresses=127.0.0.1" start >/dev/null
dsn="postgres://postgres@127.0.0.1:18433/postgres?sslmode=disable"
env DATABASE_URL="$dsn" TOLLGATE_DEV=1 bin/tollgate migrate up >/dev/null 2>&1
pm=$(head -1 "$pgdata/postmaster.pid")
tick=$(getconf CLK_TCK)
# cpu is the CPU of the server: the postmaster's, its live children's, and
# that of the children it has reaped (pgbench's backends end with it).
cpu() {
  local sum p
  sum=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do
    [ -r "/proc/$p/stat" ] && sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$sum"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Each call's keys are distinct, in the "C" order the store sends them in,
# and among 100,000 counters.
script() {
  local n=$1 i list=""
  echo '\set base random(0, 1500)'
  for i in $(seq "$n"); do
    echo "\\set k$i 100000 + :base * 64 + $i"
    list="$list${list:+, }'bench:' || :k$i"
  done
  local ones lims wins
  ones=$(printf '1,%.0s' $(seq "$n")); ones=${ones%,}
  lims=$(printf '1000000000,%.0s' $(seq "$n")); lims=${lims%,}
  wins=$(printf '3600000000,%.0s' $(seq "$n")); wins=${wins%,}
  echo "SELECT now_us FROM tollgate_check_fixed_packed(ARRAY[$list]::text[], '{$ones}'::int[], '{$lims}'::bigint[], '{$wins}'::bigint[], '{$ones}'::bigint[], NULL);"
}
echo 'SELECT 1;' >"$work/select1.sql"
cat >"$work/upsert.sql" <<'SQL'
\set k random(1, 100000)
INSERT INTO counters AS c (key, start, count, expires_at) VALUES ('upsert:' || :k, 0, 1, now() + interval '1 hour')
ON CONFLICT (key) DO UPDATE SET count = c.count + 1;
SQL
# The statement the function runs for all-admitted keys, alone, for one
# key: what the function adds around it is the difference.
cat >"$work/statement.sql" <<'SQL'
\set k random(1, 100000)
WITH up AS (
    INSERT INTO counters AS c (key, start, count, expires_at)
    SELECT r.key, r.ws, 1, timestamptz 'epoch' + interval '1 microsecond' * (r.ws + 3600000000)
      FROM (SELECT 'statement:' || :k COLLATE "C" AS key,
                   (extract(epoch FROM clock_timestamp()) * 1000000)::bigint / 3600000000 * 3600000000 AS ws) AS r
    ON CONFLICT (key) DO UPDATE
       SET start = greatest(c.start, excluded.start),
           count = CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count,
           prev = 0, tat = 0, expires_at = excluded.expires_at
     WHERE CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count <= 1000000000
    RETURNING c.key, c.start, c.count
)
SELECT array_agg(up.key ORDER BY up.key), array_agg(up.start ORDER BY up.key), array_agg(up.count ORDER BY up.key) FROM up;
SQL
targets=(select1 upsert statement)
for n in "${keys[@]}"; do script "$n" >"$work/keys$n.sql"; targets+=("keys$n"); done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %5s %9s %11s %10s\n' call keys "calls/s" pg_us_call pg_us_key
: >"$work/rows"
for run in $(seq "$runs"); do
  for t in "${targets[@]}"; do
    n=1
    [[ $t == keys* ]] && n=${t#keys}
    sleep 1
    c0=$(cpu)
    calls=$(PGOPTIONS='-c synchronous_commit=off' pgbench -n -M prepared -c "$clients" -j 2 -T "$duration" \
      -f "$work/$t.sql" -h 127.0.0.1 -p 18433 -U postgres postgres 2>/dev/null |
      awk '/actually processed/ {print $NF}' | cut -d/ -f1)
    sleep 1
    c1=$(cpu)
    awk -v t="$t" -v n="$n" -v k="$calls" -v d="$duration" -v c=$((c1 - c0)) -v tick="$tick" \
      'BEGIN { us = c / tick / k * 1e6; printf "%s %d %.0f %.1f %.1f\n", t, n, k / d, us, us / n }' >>"$work/rows"
  done
done
for t in "${targets[@]}"; do
  row="$t $(awk -v t="$t" '$1==t {print $2; exit}' "$work/rows")"
  for col in 3 4 5; do row="$row $(awk -v t="$t" -v c=$col '$1==t {print $c}' "$work/rows" | median)"; done
  echo "$row" | awk '{printf "%-9s %5s %9s %11s %10s\n", $1, $2, $3, $4, $5}'
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
