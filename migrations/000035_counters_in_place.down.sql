-- Back to migration 000029's definitions.

CREATE OR REPLACE FUNCTION tollgate_check(p_keys text[], p_req integer[], p_slot integer[], p_alg smallint[], p_limit bigint[], p_window bigint[], p_cost bigint[], p_advisory boolean[], p_consume boolean[], p_ceilings integer[], p_now bigint)
 RETURNS TABLE(seen_start bigint, seen_count bigint, seen_prev bigint, seen_tat double precision, allowed boolean, now_us bigint)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    v_n      integer := coalesce(cardinality(p_req), 0);
    -- Working states, one per key, indexed like p_keys, and where each
    -- row is (the rows are locked: their ctid cannot change).
    k_key    text[];
    k_tid    tid[];
    k_start  bigint[];
    k_count  bigint[];
    k_prev   bigint[];
    k_tat    double precision[];
    -- The algorithm and window of a key's last kept admitted item, NULL for
    -- a key that nothing counted on (its row keeps its state and expiry).
    k_alg    smallint[];
    k_window bigint[];
    -- What each item saw and its verdict. What an admitted item saw is
    -- also what undoing it puts back.
    o_start  bigint[];
    o_count  bigint[];
    o_prev   bigint[];
    o_tat    double precision[];
    o_ok     boolean[];
    v_now    bigint;
    v_i      integer := 1;
    v_x      integer;
    v_j      integer;
    v_r      integer;
    v_first  integer;
    v_consume boolean;
    v_ceil   integer;
    -- Whether every enforced ceiling, and every enforced policy, of the
    -- request is admitted.
    v_ceilok boolean;
    v_polok  boolean;
    -- The request's last item whose state it keeps.
    v_last   integer;
    v_dirty  boolean := false;
    -- The item being decided and the state it works on.
    v_w      bigint;
    v_cost   bigint;
    v_start  bigint;
    v_count  bigint;
    v_prev   bigint;
    v_tat    double precision;
    v_ws     bigint;
    v_el     bigint;
    v_t      bigint;
    v_iv     double precision;
    v_next   double precision;
    v_ok     boolean;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_slot) <> v_n OR cardinality(p_alg) <> v_n OR cardinality(p_limit) <> v_n
        OR cardinality(p_window) <> v_n OR cardinality(p_cost) <> v_n
        OR cardinality(p_advisory) <> v_n THEN
        RAISE EXCEPTION 'tollgate_check: item arrays differ in length';
    END IF;
    IF array_position(p_advisory, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tollgate_check: p_advisory holds a NULL';
    END IF;

    -- Create the keys never seen and lock every row of the batch, in one
    -- order (bytes of the key) so that concurrent batches cannot deadlock.
    -- Inserting makes a first use lockable, so that two batches never both
    -- start from a zero state; DO UPDATE … WHERE false writes nothing but
    -- locks an existing row like FOR UPDATE, in the same statement, so a row
    -- that the pruner deletes meanwhile is inserted afresh instead of being
    -- missed (with a separate SELECT … FOR UPDATE it would simply be skipped).
    INSERT INTO counters AS c (key)
    SELECT DISTINCT u.key COLLATE "C" FROM unnest(p_keys) AS u(key) ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET key = excluded.key WHERE false;

    -- The rows are ours now, and this statement's snapshot is newer than
    -- every commit that touched them. Their ctids stay valid until we
    -- commit: nobody else may update or delete a row we hold.
    SELECT array_agg(c.key), array_agg(c.ctid), array_agg(c.start), array_agg(c.count), array_agg(c.prev), array_agg(c.tat)
      INTO k_key, k_tid, k_start, k_count, k_prev, k_tat
      FROM (SELECT c.key, c.ctid, c.start, c.count, c.prev, c.tat
              FROM counters AS c
             WHERE c.key = ANY (p_keys)
             ORDER BY c.key) AS c;
    -- Also proves that the states line up with p_keys, and so with p_slot.
    IF k_key IS DISTINCT FROM p_keys THEN
        RAISE EXCEPTION 'tollgate_check: p_keys must be distinct, sorted bytewise, and all present';
    END IF;

    k_alg := array_fill(NULL::smallint, ARRAY[cardinality(k_key)]);
    k_window := array_fill(NULL::bigint, ARRAY[cardinality(k_key)]);
    o_start := array_fill(0::bigint, ARRAY[v_n]);
    o_count := o_start;
    o_prev := o_start;
    o_tat := array_fill(0::double precision, ARRAY[v_n]);
    o_ok := array_fill(false, ARRAY[v_n]);

    -- Read after the locks: a batch that waited for another sees a later
    -- instant than the one it waited for.
    v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);

    WHILE v_i <= v_n LOOP
        v_r := p_req[v_i];
        v_first := v_i;
        v_consume := p_consume[v_r];
        v_ceil := p_ceilings[v_r];
        IF v_consume IS NULL OR v_ceil IS NULL THEN
            RAISE EXCEPTION 'tollgate_check: no p_consume or p_ceilings for request %', v_r;
        END IF;
        v_ceilok := true;
        v_polok := true;
        LOOP
            v_j := p_slot[v_i];
            v_start := k_start[v_j];
            v_count := k_count[v_j];
            v_prev := k_prev[v_j];
            v_tat := k_tat[v_j];
            o_start[v_i] := v_start;
            o_count[v_i] := v_count;
            o_prev[v_i] := v_prev;
            o_tat[v_i] := v_tat;
            v_w := p_window[v_i];
            v_cost := p_cost[v_i];

            CASE p_alg[v_i]
            WHEN 3 THEN
                -- gcraStep. A clock behind the state's counts as the state's
                -- own instant; limit.gcraCapacity allows the window plus
                -- interval/2^20, so that limit intervals rounded up still fit.
                v_t := greatest(v_now, v_start);
                v_iv := v_w::double precision / p_limit[v_i]::double precision;
                v_next := greatest(0::double precision, v_tat - (v_t - v_start)::double precision) + v_iv * v_cost::double precision;
                v_ok := v_next <= v_w::double precision + v_iv / 1048576::double precision;
                IF v_ok THEN
                    v_start := v_t;
                    v_count := 0;
                    v_prev := 0;
                    v_tat := v_next;
                END IF;
            WHEN 2 THEN
                -- slidingStep and slidingEstimate.
                v_ws := v_now - v_now % v_w;
                IF v_start >= v_ws THEN
                    -- The same window, or a later one written by a clock
                    -- that ran ahead.
                    v_ws := v_start;
                ELSIF v_start = v_ws - v_w THEN
                    v_start := v_ws;
                    v_prev := v_count;
                    v_count := 0;
                    v_tat := 0;
                ELSE
                    v_start := v_ws;
                    v_count := 0;
                    v_prev := 0;
                    v_tat := 0;
                END IF;
                v_el := greatest(0, v_now - v_ws);
                v_ok := (v_prev::double precision * ((v_w - v_el)::double precision / v_w::double precision))
                    + v_count::double precision + v_cost::double precision <= p_limit[v_i]::double precision;
                IF v_ok THEN
                    v_count := v_count + v_cost;
                END IF;
            ELSE
                -- fixedStep; epoch-aligned windows, or a month. A state
                -- in this window or a later one (a clock that ran ahead)
                -- keeps its window; an older one starts afresh.
                IF v_w <= 0 THEN
                    v_ws := tollgate_period_start(v_now, -v_w, 0);
                ELSE
                    v_ws := v_now - v_now % v_w;
                END IF;
                IF v_start < v_ws THEN
                    v_start := v_ws;
                    v_count := 0;
                END IF;
                v_ok := v_count + v_cost <= p_limit[v_i];
                IF v_ok THEN
                    v_count := v_count + v_cost;
                    v_prev := 0;
                    v_tat := 0;
                END IF;
            END CASE;

            IF v_ok THEN
                o_ok[v_i] := true;
                k_start[v_j] := v_start;
                k_count[v_j] := v_count;
                k_prev[v_j] := v_prev;
                k_tat[v_j] := v_tat;
            ELSIF p_advisory[v_i] THEN
                -- Refused, it changed nothing, and it fails no tier.
                NULL;
            ELSIF v_i - v_first < v_ceil THEN
                v_ceilok := false;
            ELSE
                v_polok := false;
            END IF;
            v_i := v_i + 1;
            EXIT WHEN v_i > v_n OR p_req[v_i] IS DISTINCT FROM v_r;
        END LOOP;
        IF v_ceil < 0 OR v_ceil > v_i - v_first THEN
            RAISE EXCEPTION 'tollgate_check: request % has % ceilings and % items', v_r, v_ceil, v_i - v_first;
        END IF;

        -- All of the request, its ceilings alone, or nothing: put back what
        -- the admitted items after v_last changed, newest first, from what
        -- each of them saw.
        IF v_ceilok AND v_polok AND v_consume THEN
            v_last := v_i - 1;
        ELSIF v_ceilok THEN
            v_last := v_first + v_ceil - 1;
            FOR v_x IN REVERSE v_i - 1 .. v_last + 1 LOOP
                IF o_ok[v_x] THEN
                    v_j := p_slot[v_x];
                    k_start[v_j] := o_start[v_x];
                    k_count[v_j] := o_count[v_x];
                    k_prev[v_j] := o_prev[v_x];
                    k_tat[v_j] := o_tat[v_x];
                END IF;
            END LOOP;
        ELSE
            v_last := v_first - 1;
            FOR v_x IN REVERSE v_i - 1 .. v_first LOOP
                IF o_ok[v_x] THEN
                    v_j := p_slot[v_x];
                    k_start[v_j] := o_start[v_x];
                    k_count[v_j] := o_count[v_x];
                    k_prev[v_j] := o_prev[v_x];
                    k_tat[v_j] := o_tat[v_x];
                END IF;
            END LOOP;
        END IF;
        -- Only admitted items write: a refused advisory item's key keeps
        -- its expiry too, unless another item admitted on it.
        FOR v_x IN v_first .. v_last LOOP
            IF o_ok[v_x] THEN
                v_j := p_slot[v_x];
                k_alg[v_j] := p_alg[v_x];
                k_window[v_j] := p_window[v_x];
                v_dirty := true;
            END IF;
        END LOOP;
    END LOOP;

    IF v_dirty THEN
        -- limit.Expiry: after it the state says no more than a new counter.
        -- By ctid: no index search, and the row's other indexed column (the
        -- key) is unchanged, so the update is HOT when its page has room.
        UPDATE counters AS c
           SET start = w.st, count = w.cn, prev = w.pv, tat = w.tt,
               expires_at = timestamptz 'epoch' + interval '1 microsecond' * CASE w.alg
                   WHEN 2 THEN w.st + 2 * w.win
                   WHEN 3 THEN w.st + ceil(w.tt)::bigint
                   ELSE CASE WHEN w.win <= 0 THEN tollgate_period_start(w.st, -w.win, 1) ELSE w.st - w.st % w.win + w.win END
               END
          FROM unnest(k_tid, k_start, k_count, k_prev, k_tat, k_alg, k_window)
               AS w(tid, st, cn, pv, tt, alg, win)
         WHERE w.alg IS NOT NULL AND c.ctid = w.tid;
    END IF;

    RETURN QUERY SELECT o.*, v_now FROM unnest(o_start, o_count, o_prev, o_tat, o_ok) AS o;
END
$function$;

CREATE OR REPLACE FUNCTION tollgate_check_fixed_packed(p_keys text[], p_n integer[], p_limit bigint[], p_window bigint[], p_cost bigint[], p_now bigint, OUT starts bigint[], OUT counts bigint[], OUT admitted integer[], OUT now_us bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    v_n     integer := coalesce(cardinality(p_keys), 0);
    a_key   text[];
    a_start bigint[];
    a_count bigint[];
BEGIN
    now_us := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    IF v_n = 0 THEN
        starts := '{}';
        counts := '{}';
        admitted := '{}';
        RETURN;
    END IF;
    IF cardinality(p_n) <> v_n OR cardinality(p_limit) <> v_n OR cardinality(p_window) <> v_n
        OR cardinality(p_cost) <> v_n THEN
        RAISE EXCEPTION 'tollgate_check_fixed_packed: arrays differ in length';
    END IF;
    IF array_position(p_n, NULL) IS NOT NULL OR 1 > ANY (p_n) THEN
        RAISE EXCEPTION 'tollgate_check_fixed_packed: a key without requests';
    END IF;

    IF 1 < ANY (p_n) THEN
        -- Some key has several requests: lock every row (creating the
        -- missing ones) in key order, read their states, and write each
        -- admitted key's count once.
        INSERT INTO counters AS c (key)
        SELECT u.key COLLATE "C" FROM unnest(p_keys) AS u(key) ORDER BY 1
        ON CONFLICT (key) DO UPDATE SET key = excluded.key WHERE false;

        WITH r AS (
            SELECT k.i, c.ctid AS tid, k.lim, k.win, k.cost, d.ws,
                   CASE WHEN c.start >= d.ws THEN c.start ELSE d.ws END AS st,
                   CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END AS cn,
                   least(k.n, greatest(0, (k.lim - CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END) / k.cost))::integer AS ok
              FROM unnest(p_keys, p_n, p_limit, p_window, p_cost) WITH ORDINALITY AS k(key, n, lim, win, cost, i)
              CROSS JOIN LATERAL (SELECT CASE WHEN k.win <= 0 THEN tollgate_period_start(now_us, -k.win, 0) ELSE now_us - now_us % k.win END AS ws) AS d
              JOIN counters AS c ON c.key = k.key COLLATE "C"
        ), w AS (
            -- limit.Expiry of the window counted in.
            UPDATE counters AS c
               SET start = r.st, count = r.cn + r.ok * r.cost, prev = 0, tat = 0,
                   expires_at = timestamptz 'epoch' + interval '1 microsecond' *
                       CASE WHEN r.win <= 0 THEN tollgate_period_start(r.st, -r.win, 1) ELSE r.st - r.st % r.win + r.win END
              FROM r
             WHERE r.ok > 0 AND c.ctid = r.tid
        )
        SELECT array_agg(r.st ORDER BY r.i), array_agg(r.cn + r.ok * r.cost ORDER BY r.i), array_agg(r.ok ORDER BY r.i)
          INTO starts, counts, admitted
          FROM r;
        RETURN;
    END IF;

    -- One request a key. Each admissible item proposes its row as a first
    -- count in the current window; a row that exists is locked, in key
    -- order, and counted on only if the count it holds in this window (or a
    -- later one) leaves room. An item whose cost exceeds its limit proposes
    -- nothing: it is refused whatever the row holds. Only admitted items
    -- write, and return.
    WITH up AS (
        INSERT INTO counters AS c (key, start, count, expires_at)
        SELECT r.key, r.ws, r.cost, timestamptz 'epoch' + interval '1 microsecond' *
                   CASE WHEN r.win <= 0 THEN tollgate_period_start(r.ws, -r.win, 1) ELSE r.ws + r.win END
          FROM (SELECT u.key COLLATE "C" AS key, u.cost, u.lim, u.win,
                       CASE WHEN u.win <= 0 THEN tollgate_period_start(now_us, -u.win, 0) ELSE now_us - now_us % u.win END AS ws
                  FROM unnest(p_keys, p_cost, p_limit, p_window) AS u(key, cost, lim, win)) AS r
         WHERE r.cost <= r.lim
         ORDER BY r.key
        ON CONFLICT (key) DO UPDATE
           SET start = greatest(c.start, excluded.start),
               count = CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count,
               prev = 0,
               tat = 0,
               -- limit.Expiry of the window counted in; a later window than
               -- this instant's (a clock that ran ahead) keeps its own end.
               expires_at = CASE WHEN c.start > excluded.start THEN
                   timestamptz 'epoch' + interval '1 microsecond' * (
                       SELECT CASE WHEN x.win <= 0 THEN tollgate_period_start(c.start, -x.win, 1) ELSE c.start - c.start % x.win + x.win END
                         FROM (SELECT p_window[array_position(p_keys, excluded.key::text)] AS win) AS x)
                   ELSE excluded.expires_at END
         WHERE CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count
               <= p_limit[array_position(p_keys, excluded.key::text)]
        RETURNING c.key, c.start, c.count
    )
    SELECT array_agg(up.key ORDER BY up.key), array_agg(up.start ORDER BY up.key), array_agg(up.count ORDER BY up.key)
      INTO a_key, a_start, a_count
      FROM up;

    IF a_key IS NOT DISTINCT FROM p_keys THEN
        -- All admitted.
        starts := a_start;
        counts := a_count;
        admitted := array_fill(1, ARRAY[v_n]);
        RETURN;
    END IF;
    -- Some refused: they are as their row is now (a new statement, so a
    -- newer snapshot, and the rows it proposed on are still locked), or
    -- without a row, in this instant's window.
    SELECT array_agg(coalesce(a.st, CASE WHEN c.start >= d.ws THEN c.start ELSE d.ws END) ORDER BY k.i),
           array_agg(coalesce(a.cn, CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END) ORDER BY k.i),
           array_agg(CASE WHEN a.st IS NULL THEN 0 ELSE 1 END ORDER BY k.i)
      INTO starts, counts, admitted
      FROM unnest(p_keys, p_window) WITH ORDINALITY AS k(key, win, i)
      CROSS JOIN LATERAL (SELECT CASE WHEN k.win <= 0 THEN tollgate_period_start(now_us, -k.win, 0) ELSE now_us - now_us % k.win END AS ws) AS d
      LEFT JOIN unnest(a_key, a_start, a_count) AS a(key, st, cn) ON a.key = k.key
      LEFT JOIN counters AS c ON c.key = k.key COLLATE "C";
END
$function$;
