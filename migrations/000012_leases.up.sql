-- Concurrency limits: policies of algorithm 'concurrency' (at most "limit"
-- holders in flight, no window), and the leases of the PostgreSQL counter
-- store (internal/counter/postgres/lease.go), one row per lease.

ALTER TABLE policies DROP CONSTRAINT policies_algorithm_check;
ALTER TABLE policies ADD CONSTRAINT policies_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window', 'token_bucket', 'concurrency'));
-- A concurrency policy counts holders, not time: it has no window, and every
-- other policy has one.
ALTER TABLE policies ADD CONSTRAINT policies_window_check
    CHECK ((algorithm = 'concurrency') = ("window" = ''));

-- grp is counter.Acquire.Group (a tenant id); id, key and tally are opaque
-- bytes (counter.Acquire). A lease is live while expires_us (Unix µs) is
-- after the instant asked about; expired rows are deleted by the store's
-- pruning, and until then nothing counts them.
CREATE TABLE leases (
    grp        text COLLATE "C" NOT NULL,
    id         bytea NOT NULL,
    key        bytea NOT NULL,
    tally      bytea NOT NULL,
    expires_us bigint NOT NULL,
    PRIMARY KEY (grp, id)
);
CREATE INDEX leases_key ON leases (grp, key, expires_us);
CREATE INDEX leases_tally ON leases (grp, tally, expires_us) WHERE tally <> ''::bytea;
CREATE INDEX leases_expires ON leases (expires_us);

-- tollgate_lease_lock serialises every change to the holders of one key
-- that could let one more in: acquires and renewals of leases of (p_grp,
-- p_key) take it, for the rest of their transaction. Releases and resets
-- only free slots and take none. Keys whose hashes collide merely wait for
-- each other.
CREATE FUNCTION tollgate_lease_lock(p_grp text, p_key bytea) RETURNS void
LANGUAGE sql VOLATILE STRICT
AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('tollgate lease ' || p_grp || '/' || encode(p_key, 'hex'), 0))
$$;

-- tollgate_acquire decides one lease request in one transaction: first the
-- request's ceilings, as one request of tollgate_check in consume mode whose
-- items are all ceilings (p_keys to p_advisory as tollgate_check takes them,
-- for that one request; none is fine); then, when every enforced ceiling
-- was admitted, a lease p_id of p_ttl µs among at most p_max live leases of
-- (p_grp, p_key), counted in p_tally. p_now is the instant (Unix µs), NULL
-- for the database clock, read again once the key's lock is held.
--
-- It returns one row per ceiling, in order, as tollgate_check does (in_flight
-- and expires_us NULL), then one row for the lease: allowed (taken),
-- now_us (the instant the lease was decided at), in_flight (live leases of
-- the key after it; 0 when a ceiling refused) and expires_us (the lease's
-- expiry when taken, else the earliest expiry among the live leases, NULL
-- when none or when a ceiling refused). An id the group still holds live
-- raises SQLSTATE 22023 'tollgate: lease id in use'.
CREATE FUNCTION tollgate_acquire(
    p_keys     text[],
    p_slot     integer[],
    p_alg      smallint[],
    p_limit    bigint[],
    p_window   bigint[],
    p_cost     bigint[],
    p_advisory boolean[],
    p_grp      text,
    p_key      bytea,
    p_tally    bytea,
    p_id       bytea,
    p_max      bigint,
    p_ttl      bigint,
    p_now      bigint
) RETURNS TABLE (
    seen_start bigint,
    seen_count bigint,
    seen_prev  bigint,
    seen_tat   double precision,
    allowed    boolean,
    now_us     bigint,
    in_flight  bigint,
    expires_us bigint
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n     integer := coalesce(cardinality(p_alg), 0);
    v_i     integer := 0;
    v_ok    boolean := true;
    v_now   bigint;
    v_live  bigint;
    v_first bigint;
BEGIN
    IF v_n > 0 THEN
        FOR seen_start, seen_count, seen_prev, seen_tat, allowed, now_us IN
            SELECT * FROM tollgate_check(p_keys, array_fill(1, ARRAY[v_n]), p_slot, p_alg, p_limit, p_window,
                p_cost, p_advisory, ARRAY[true], ARRAY[v_n], p_now)
        LOOP
            v_i := v_i + 1;
            v_now := now_us;
            IF NOT allowed AND NOT p_advisory[v_i] THEN
                v_ok := false;
            END IF;
            in_flight := NULL;
            expires_us := NULL;
            RETURN NEXT;
        END LOOP;
    END IF;
    v_now := coalesce(p_now, v_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    seen_start := 0;
    seen_count := 0;
    seen_prev := 0;
    seen_tat := 0;
    IF NOT v_ok THEN
        allowed := false;
        now_us := v_now;
        in_flight := 0;
        expires_us := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    PERFORM tollgate_lease_lock(p_grp, p_key);
    IF p_now IS NULL THEN
        -- The lock may have been waited for: decide at a later instant,
        -- never an earlier one than the ceilings'.
        v_now := greatest(v_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    END IF;
    -- The key's expired leases, and an expired lease of the same id, are
    -- forgotten now rather than by pruning.
    DELETE FROM leases AS l
     WHERE l.grp = p_grp AND ((l.key = p_key AND l.expires_us <= v_now) OR (l.id = p_id AND l.expires_us <= v_now));
    SELECT count(*), min(l.expires_us) INTO v_live, v_first
      FROM leases AS l
     WHERE l.grp = p_grp AND l.key = p_key AND l.expires_us > v_now;
    now_us := v_now;
    IF v_live < p_max THEN
        INSERT INTO leases (grp, id, key, tally, expires_us)
        VALUES (p_grp, p_id, p_key, p_tally, v_now + p_ttl)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'tollgate: lease id in use' USING ERRCODE = '22023';
        END IF;
        allowed := true;
        in_flight := v_live + 1;
        expires_us := v_now + p_ttl;
    ELSE
        allowed := false;
        in_flight := v_live;
        expires_us := v_first;
    END IF;
    RETURN NEXT;
END
$$;

-- tollgate_renew gives the live lease (p_grp, p_id) the expiry now + p_ttl
-- (µs) under its key's lock, and returns it; NULL when there is no such
-- live lease. p_now as in tollgate_acquire.
CREATE FUNCTION tollgate_renew(p_grp text, p_id bytea, p_ttl bigint, p_now bigint) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_key bytea;
    v_now bigint;
    v_exp bigint;
BEGIN
    SELECT l.key INTO v_key FROM leases AS l WHERE l.grp = p_grp AND l.id = p_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM tollgate_lease_lock(p_grp, v_key);
    -- Read once the lock is held: an acquire that counted this lease as
    -- gone did so at an instant before this one.
    v_now := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    UPDATE leases AS l SET expires_us = v_now + p_ttl
     WHERE l.grp = p_grp AND l.id = p_id AND l.expires_us > v_now
    RETURNING l.expires_us INTO v_exp;
    RETURN v_exp;
END
$$;
