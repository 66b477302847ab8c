-- tollgate_reserve refuses a group at its bound without taking the group's
-- lock (see the comment at its top); everything else as migration 000027
-- defined it.

CREATE OR REPLACE FUNCTION tollgate_reserve(
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
    -- A group that holds its bound is refused without its lock: as of this
    -- statement's snapshot it holds p_gmax live reservations and none is due
    -- (the locked path would first expire those, giving back what they
    -- release, which the peek below must see), so the refusal is the answer
    -- at that instant, whatever is settled after it; and the id is not in
    -- use (that answer is the locked path's). A flood past the bound then
    -- costs a count and a peek, like a check, rather than a turn of the lock
    -- that the group's settlements wait for. A reservation that may be held,
    -- or that finds one due, takes the lock and counts again.
    IF p_gmax > 0 THEN
        v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        v_full := (SELECT count(*) FROM reservations AS r WHERE r.grp = p_grp AND r.settled_us IS NULL) >= p_gmax
              AND NOT EXISTS (SELECT 1 FROM reservations AS r WHERE r.grp = p_grp AND r.due_us <= v_now)
              AND NOT EXISTS (SELECT 1 FROM reservations AS r WHERE r.grp = p_grp AND r.id = p_id);
    END IF;
    op := 1;
    seen_start := 0;
    seen_count := 0;
    seen_prev := 0;
    seen_tat := 0;
    expires_us := 0;
    allowed := false;
    IF NOT v_full THEN
        -- The instant is read once the group is locked: the group's
        -- reservations and settlements are applied in the order of theirs.
        PERFORM pg_advisory_xact_lock(hashtextextended('tollgate reserve ' || p_grp, 0));
        v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        PERFORM tollgate_reserve_lock(p_grp, p_keys, v_now);
        PERFORM tollgate_reserve_expire(p_grp, v_now);
        IF EXISTS (SELECT 1 FROM reservations AS r WHERE r.grp = p_grp AND r.id = p_id) THEN
            now_us := v_now;
            status := 3;
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_gmax > 0 THEN
            v_full := (SELECT count(*) FROM reservations AS r WHERE r.grp = p_grp AND r.settled_us IS NULL) >= p_gmax;
        END IF;
    END IF;
    now_us := v_now;
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
