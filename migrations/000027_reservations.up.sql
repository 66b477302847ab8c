-- Reservations of the PostgreSQL counter store (internal/counter/postgres/
-- reserve.go; counter.Reserver): amounts charged to counters by a check,
-- settled later with what was really used.
--
-- grp is the request's Group (a tenant id), id opaque bytes. A row is live
-- while settled_us is NULL and its expiry is after the instant asked about;
-- due_us is when something is due: its expiry while live, the end of the
-- time its outcome is kept once settled. The charges are arrays, one
-- element each: the counter's row key (counters.key) and item key, its
-- algorithm, limit and window (as tollgate_check takes them), the amount,
-- and the start of the window it was charged in; once settled, the
-- counters' states after the settlement, to answer the same settlement
-- again.
CREATE TABLE reservations (
    grp        text COLLATE "C" NOT NULL,
    id         bytea NOT NULL,
    expires_us bigint NOT NULL,
    release    boolean NOT NULL,
    settled_us bigint,
    used       bigint NOT NULL DEFAULT 0,
    due_us     bigint NOT NULL,
    keys       text[] NOT NULL,
    item_keys  bytea[] NOT NULL,
    algs       smallint[] NOT NULL,
    limits     bigint[] NOT NULL,
    windows    bigint[] NOT NULL,
    amounts    bigint[] NOT NULL,
    charged    bigint[] NOT NULL,
    a_start    bigint[],
    a_count    bigint[],
    a_prev     bigint[],
    a_tat      double precision[],
    PRIMARY KEY (grp, id)
);
CREATE INDEX reservations_due ON reservations (grp, due_us);
CREATE INDEX reservations_live ON reservations (grp) WHERE settled_us IS NULL;
CREATE INDEX reservations_sweep ON reservations (due_us);

-- tollgate_adjust is limit.Adjust (internal/limit/adjust.go), operation for
-- operation: the state of a counter once delta is added to what it counts
-- at p_now, for a charge made in the window that starts at p_charged, and
-- limit.Expiry of it.
CREATE FUNCTION tollgate_adjust(
    p_alg smallint, p_start bigint, p_count bigint, p_prev bigint, p_tat double precision,
    p_now bigint, p_delta bigint, p_charged bigint, p_limit bigint, p_window bigint,
    OUT start bigint, OUT count bigint, OUT prev bigint, OUT tat double precision, OUT expires_us bigint)
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    v_s   bigint;
    v_m   bigint;
    v_iv  double precision;
    v_off double precision;
BEGIN
    start := p_start;
    count := p_count;
    prev := p_prev;
    tat := p_tat;
    IF p_alg = 2 THEN
        v_s := p_now - p_now % p_window;
        IF start >= v_s THEN
            -- The same window, or a later one seen by a clock that ran ahead.
            NULL;
        ELSIF start = v_s - p_window THEN
            start := v_s;
            prev := count;
            count := 0;
            tat := 0;
        ELSE
            start := v_s;
            count := 0;
            prev := 0;
            tat := 0;
        END IF;
        IF p_delta >= 0 THEN
            count := count + p_delta;
        ELSIF p_charged = start THEN
            count := greatest(0, count + p_delta);
        ELSIF p_charged = start - p_window THEN
            prev := greatest(0, prev + p_delta);
        END IF;
        expires_us := start + 2 * p_window;
    ELSIF p_alg = 3 THEN
        v_m := greatest(p_now, start);
        v_iv := p_window::double precision / p_limit::double precision;
        v_off := greatest(0::double precision, tat - (v_m - start)::double precision);
        v_off := greatest(0::double precision, v_off + v_iv * p_delta::double precision);
        start := v_m;
        count := 0;
        prev := 0;
        tat := v_off;
        expires_us := v_m + ceil(v_off)::bigint;
    ELSE
        IF p_window = 0 THEN
            v_s := tollgate_month_start(p_now, 0);
        ELSE
            v_s := p_now - p_now % p_window;
        END IF;
        IF start >= v_s THEN
            v_s := start;
        ELSE
            count := 0;
        END IF;
        IF p_delta >= 0 THEN
            count := count + p_delta;
        ELSIF p_charged = v_s THEN
            count := greatest(0, count + p_delta);
        END IF;
        start := v_s;
        prev := 0;
        tat := 0;
        IF p_window = 0 THEN
            expires_us := tollgate_month_start(v_s, 1);
        ELSE
            expires_us := v_s - v_s % p_window + p_window;
        END IF;
    END IF;
END
$$;

-- tollgate_reserve_apply adjusts the counters p_keys (rows the caller has
-- locked), in order, by p_deltas at instant p_at with tollgate_adjust, and
-- returns the states it leaves.
CREATE FUNCTION tollgate_reserve_apply(
    p_keys text[], p_algs smallint[], p_limits bigint[], p_windows bigint[], p_charged bigint[],
    p_deltas bigint[], p_at bigint,
    OUT a_start bigint[], OUT a_count bigint[], OUT a_prev bigint[], OUT a_tat double precision[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_c record;
    v_a record;
BEGIN
    a_start := '{}';
    a_count := '{}';
    a_prev := '{}';
    a_tat := '{}';
    FOR i IN 1..coalesce(cardinality(p_keys), 0) LOOP
        SELECT c.start, c.count, c.prev, c.tat INTO v_c FROM counters AS c WHERE c.key = p_keys[i];
        IF NOT FOUND THEN
            RAISE EXCEPTION 'tollgate_reserve_apply: counter % is not locked', p_keys[i];
        END IF;
        SELECT * INTO v_a FROM tollgate_adjust(p_algs[i], v_c.start, v_c.count, v_c.prev, v_c.tat,
            p_at, p_deltas[i], p_charged[i], p_limits[i], p_windows[i]);
        UPDATE counters AS c
           SET start = v_a.start, count = v_a.count, prev = v_a.prev, tat = v_a.tat,
               expires_at = timestamptz 'epoch' + interval '1 microsecond' * v_a.expires_us
         WHERE c.key = p_keys[i];
        a_start := a_start || v_a.start;
        a_count := a_count || v_a.count;
        a_prev := a_prev || v_a.prev;
        a_tat := a_tat || v_a.tat;
    END LOOP;
END
$$;

-- tollgate_reserve_lock serialises the reservations of group p_grp, for
-- the rest of the transaction (a caller that reads its clock once the
-- group is locked has taken the lock already: taking it again is free),
-- and locks the counter rows p_keys and those
-- of the group's reservations due by p_now that release on expiry, in one
-- order (bytes of the key, as every batch of checks locks them), creating
-- the rows missing. Callers take it before touching any row.
CREATE FUNCTION tollgate_reserve_lock(p_grp text, p_keys text[], p_now bigint) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tollgate reserve ' || p_grp, 0));
    INSERT INTO counters AS c (key)
    SELECT DISTINCT u.key COLLATE "C"
      FROM (SELECT unnest(p_keys) AS key
            UNION ALL
            SELECT unnest(r.keys) FROM reservations AS r
             WHERE r.grp = p_grp AND r.due_us <= p_now AND r.settled_us IS NULL AND r.release) AS u
     ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET key = excluded.key WHERE false;
END
$$;

-- tollgate_reserve_expire deals with group p_grp's reservations due by
-- p_now, under tollgate_reserve_lock: a live one past its expiry is
-- deleted, giving its amounts back at its expiry instant when it releases
-- on expiry (as a settlement of 0 would), in order of expiry then id; a
-- settled one no longer kept is deleted. It returns how many it deleted.
CREATE FUNCTION tollgate_reserve_expire(p_grp text, p_now bigint) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_r record;
    v_n bigint;
BEGIN
    FOR v_r IN
        SELECT r.keys, r.algs, r.limits, r.windows, r.charged, r.amounts, r.expires_us
          FROM reservations AS r
         WHERE r.grp = p_grp AND r.due_us <= p_now AND r.settled_us IS NULL AND r.release
         ORDER BY r.due_us, r.id
    LOOP
        PERFORM tollgate_reserve_apply(v_r.keys, v_r.algs, v_r.limits, v_r.windows, v_r.charged,
            (SELECT array_agg(-a ORDER BY o) FROM unnest(v_r.amounts) WITH ORDINALITY AS x(a, o)), v_r.expires_us);
    END LOOP;
    DELETE FROM reservations AS r WHERE r.grp = p_grp AND r.due_us <= p_now;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- tollgate_reserve decides one reservation (counter.Reservation): its
-- request as one request of tollgate_check (p_keys to p_ceilings as it
-- takes them, for that one request in consume mode), at the instant p_now
-- (NULL: the database clock, read once the group's lock is held), after
-- the group's due reservations are dealt with; when the request is allowed
-- and the group holds fewer than p_gmax live reservations (0: no cap), the
-- reservation p_id of p_ttl µs is recorded with what each admitted policy
-- item charged (p_item_keys: the items' keys). A group at its cap decides
-- the request as a peek: its ceilings count, its policies are not charged.
--
-- It returns one row per item as tollgate_check does (op 0), then one row
-- (op 1) whose status is 0 refused, 1 held, 2 refused for the group's cap,
-- with the expiry when held; or that row alone, of status 3, when the group
-- holds the id already (live, or settled and kept), and nothing was decided.
CREATE FUNCTION tollgate_reserve(
    p_keys     text[],
    p_slot     integer[],
    p_alg      smallint[],
    p_limit    bigint[],
    p_window   bigint[],
    p_cost     bigint[],
    p_advisory boolean[],
    p_ceilings integer,
    p_item_keys bytea[],
    p_grp      text,
    p_id       bytea,
    p_ttl      bigint,
    p_release  boolean,
    p_gmax     bigint,
    p_now      bigint
) RETURNS TABLE (
    op         integer,
    seen_start bigint,
    seen_count bigint,
    seen_prev  bigint,
    seen_tat   double precision,
    allowed    boolean,
    status     smallint,
    expires_us bigint,
    now_us     bigint
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n     integer := cardinality(p_slot);
    v_now   bigint;
    v_full  boolean := false;
    v_all   boolean := true;
    v_ok    boolean[] := '{}';
    v_i     integer := 0;
    v_rk    text[] := '{}';
    v_ik    bytea[] := '{}';
    v_algs  smallint[] := '{}';
    v_lims  bigint[] := '{}';
    v_wins  bigint[] := '{}';
    v_amts  bigint[] := '{}';
    v_chg   bigint[] := '{}';
    v_start bigint;
BEGIN
    -- The instant is read once the group is locked: the group's
    -- reservations and settlements are applied in the order of theirs.
    PERFORM pg_advisory_xact_lock(hashtextextended('tollgate reserve ' || p_grp, 0));
    v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    PERFORM tollgate_reserve_lock(p_grp, p_keys, v_now);
    PERFORM tollgate_reserve_expire(p_grp, v_now);
    op := 1;
    seen_start := 0;
    seen_count := 0;
    seen_prev := 0;
    seen_tat := 0;
    now_us := v_now;
    expires_us := 0;
    allowed := false;
    IF EXISTS (SELECT 1 FROM reservations AS r WHERE r.grp = p_grp AND r.id = p_id) THEN
        status := 3;
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_gmax > 0 THEN
        v_full := (SELECT count(*) FROM reservations AS r WHERE r.grp = p_grp AND r.settled_us IS NULL) >= p_gmax;
    END IF;
    FOR seen_start, seen_count, seen_prev, seen_tat, allowed, now_us IN
        SELECT * FROM tollgate_check(p_keys, array_fill(1, ARRAY[v_n]), p_slot, p_alg, p_limit, p_window,
            p_cost, p_advisory, ARRAY[NOT v_full], ARRAY[p_ceilings], v_now)
    LOOP
        v_i := v_i + 1;
        v_ok := v_ok || allowed;
        IF NOT allowed AND NOT p_advisory[v_i] THEN
            v_all := false;
        END IF;
        op := 0;
        status := 0;
        expires_us := 0;
        RETURN NEXT;
    END LOOP;
    op := 1;
    seen_start := 0;
    seen_count := 0;
    seen_prev := 0;
    seen_tat := 0;
    now_us := v_now;
    expires_us := 0;
    allowed := false;
    IF v_full THEN
        status := 2;
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT v_all THEN
        status := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The policy items admitted are charged; the window each charged is its
    -- row's start now (every admitted item on a row, at one instant, leaves
    -- the same start).
    FOR i IN p_ceilings + 1 .. v_n LOOP
        IF v_ok[i] THEN
            SELECT c.start INTO v_start FROM counters AS c WHERE c.key = p_keys[p_slot[i]];
            v_rk := v_rk || p_keys[p_slot[i]];
            v_ik := v_ik || p_item_keys[i];
            v_algs := v_algs || p_alg[i];
            v_lims := v_lims || p_limit[i];
            v_wins := v_wins || p_window[i];
            v_amts := v_amts || p_cost[i];
            v_chg := v_chg || v_start;
        END IF;
    END LOOP;
    INSERT INTO reservations (grp, id, expires_us, release, due_us, keys, item_keys, algs, limits, windows, amounts, charged)
    VALUES (p_grp, p_id, v_now + p_ttl, p_release, v_now + p_ttl, v_rk, v_ik, v_algs, v_lims, v_wins, v_amts, v_chg);
    status := 1;
    allowed := true;
    expires_us := v_now + p_ttl;
    RETURN NEXT;
END
$$;

-- tollgate_settle settles the reservation (p_grp, p_id) with p_used, once,
-- at the instant p_now (NULL: the database clock, read once the group's
-- lock is held), after the group's due reservations are dealt with, and
-- keeps its outcome until the later of its expiry and p_kept µs on. It
-- returns one row: status 0 when there is no such reservation, 1 settled
-- now, 2 settled before with p_used, 3 settled before with another; and
-- the reservation as settled (what was used and when, its charges and the
-- counters' states after them).
CREATE FUNCTION tollgate_settle(p_grp text, p_id bytea, p_used bigint, p_kept bigint, p_now bigint)
RETURNS TABLE (
    status     smallint,
    used       bigint,
    settled_us bigint,
    item_keys  bytea[],
    algs       smallint[],
    limits     bigint[],
    windows    bigint[],
    amounts    bigint[],
    charged    bigint[],
    a_start    bigint[],
    a_count    bigint[],
    a_prev     bigint[],
    a_tat      double precision[]
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now bigint;
    v_r   reservations;
    v_a   record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tollgate reserve ' || p_grp, 0));
    v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    PERFORM tollgate_reserve_lock(p_grp,
        coalesce((SELECT r.keys FROM reservations AS r
                   WHERE r.grp = p_grp AND r.id = p_id AND r.settled_us IS NULL AND r.due_us > v_now), '{}'),
        v_now);
    PERFORM tollgate_reserve_expire(p_grp, v_now);
    SELECT * INTO v_r FROM reservations AS r WHERE r.grp = p_grp AND r.id = p_id;
    IF NOT FOUND THEN
        status := 0;
        used := 0;
        settled_us := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_r.settled_us IS NOT NULL THEN
        status := CASE WHEN v_r.used = p_used THEN 2 ELSE 3 END;
    ELSE
        SELECT * INTO v_a FROM tollgate_reserve_apply(v_r.keys, v_r.algs, v_r.limits, v_r.windows, v_r.charged,
            (SELECT array_agg(p_used - a ORDER BY o) FROM unnest(v_r.amounts) WITH ORDINALITY AS x(a, o)), v_now);
        UPDATE reservations AS r
           SET settled_us = v_now, used = p_used, due_us = greatest(r.expires_us, v_now + p_kept),
               a_start = v_a.a_start, a_count = v_a.a_count, a_prev = v_a.a_prev, a_tat = v_a.a_tat
         WHERE r.grp = p_grp AND r.id = p_id
        RETURNING r.* INTO v_r;
        status := 1;
    END IF;
    used := v_r.used;
    settled_us := v_r.settled_us;
    item_keys := v_r.item_keys;
    algs := v_r.algs;
    limits := v_r.limits;
    windows := v_r.windows;
    amounts := v_r.amounts;
    charged := v_r.charged;
    a_start := v_r.a_start;
    a_count := v_r.a_count;
    a_prev := v_r.a_prev;
    a_tat := v_r.a_tat;
    RETURN NEXT;
END
$$;

-- tollgate_reserve_sweep deals with the due reservations of the groups of
-- up to p_rows reservations due by p_now, as their next reservation or
-- settlement would (tollgate_reserve_expire), and returns how many it
-- deleted: a release due in a group nobody touches is given back all the
-- same. The groups are taken in the order of their counters' row keys
-- (length, colon, group), so that the rows of one after another are
-- locked in the order every batch of checks locks them.
CREATE FUNCTION tollgate_reserve_sweep(p_rows integer, p_now bigint) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_g text;
    v_n bigint := 0;
BEGIN
    FOR v_g IN
        SELECT d.grp
          FROM (SELECT DISTINCT r.grp
                  FROM (SELECT r.grp FROM reservations AS r WHERE r.due_us <= p_now ORDER BY r.due_us LIMIT p_rows) AS r) AS d
         ORDER BY (length(d.grp) || ':' || d.grp) COLLATE "C"
    LOOP
        PERFORM tollgate_reserve_lock(v_g, '{}', p_now);
        v_n := v_n + tollgate_reserve_expire(v_g, p_now);
    END LOOP;
    RETURN v_n;
END
$$;
