-- A group's settled outcomes hold a share of the store (counter.SettleRef's
-- KeptLimit): reservation_kept counts each group's settled rows, kept with
-- them (a settlement adds one, tollgate_reserve_expire takes away those it
-- deletes), so that a settlement past the share forgets the group's oldest
-- outcomes without counting the group's rows.
CREATE TABLE reservation_kept (
    grp text COLLATE "C" PRIMARY KEY,
    n   bigint NOT NULL
);
INSERT INTO reservation_kept (grp, n)
SELECT grp, count(*) FROM reservations WHERE settled_us IS NOT NULL GROUP BY grp;
CREATE INDEX reservations_kept ON reservations (grp, due_us, id) WHERE settled_us IS NOT NULL;

-- tollgate_reserve_trim counts the settlement of group p_grp's reservation
-- p_id just made and, past p_kmax settled outcomes (0: no share), deletes
-- the group's oldest (by the instant until which each is kept, then id),
-- never p_id's. The group's lock is held.
CREATE FUNCTION tollgate_reserve_trim(p_grp text, p_id bytea, p_kmax bigint) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n bigint;
    v_d bigint;
BEGIN
    INSERT INTO reservation_kept AS k (grp, n) VALUES (p_grp, 1)
    ON CONFLICT (grp) DO UPDATE SET n = k.n + 1
    RETURNING k.n INTO v_n;
    IF p_kmax <= 0 OR v_n <= p_kmax THEN
        RETURN;
    END IF;
    DELETE FROM reservations AS r
     WHERE r.grp = p_grp AND r.id IN (
        SELECT o.id FROM reservations AS o
         WHERE o.grp = p_grp AND o.settled_us IS NOT NULL AND o.id <> p_id
         ORDER BY o.due_us, o.id
         LIMIT v_n - p_kmax);
    GET DIAGNOSTICS v_d = ROW_COUNT;
    UPDATE reservation_kept AS k SET n = k.n - v_d WHERE k.grp = p_grp;
END
$$;

CREATE OR REPLACE FUNCTION tollgate_reserve_expire(p_grp text, p_now bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_r record;
    v_n bigint;
    v_k bigint;
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
    WITH gone AS (
        DELETE FROM reservations AS r WHERE r.grp = p_grp AND r.due_us <= p_now
        RETURNING r.settled_us IS NOT NULL AS settled)
    SELECT count(*), count(*) FILTER (WHERE settled) INTO v_n, v_k FROM gone;
    IF v_k > 0 THEN
        UPDATE reservation_kept AS k SET n = k.n - v_k WHERE k.grp = p_grp;
    END IF;
    RETURN v_n;
END
$function$;

DROP FUNCTION tollgate_settle(text, bytea, bigint, bigint, bigint);
CREATE FUNCTION tollgate_settle(p_grp text, p_id bytea, p_used bigint, p_kept bigint, p_kmax bigint, p_now bigint)
 RETURNS TABLE(status smallint, used bigint, settled_us bigint, item_keys bytea[], algs smallint[], limits bigint[], windows bigint[], amounts bigint[], charged bigint[], a_start bigint[], a_count bigint[], a_prev bigint[], a_tat double precision[])
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
        PERFORM tollgate_reserve_trim(p_grp, p_id, p_kmax);
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
$function$;
