-- Coalesced lease operations and a cap on each tenant's live leases.
--
-- Before this, every acquire, renewal and release was a transaction of its
-- own on the counter store's pool, and an acquire waited for its key's lock
-- holding a connection: a burst on one hot subject took every connection of
-- the pool, and every other tenant's checks waited behind it past their
-- deadline. tollgate_lease_ops decides a whole batch of them, gathered by
-- the store (internal/counter/postgres/leaseops.go) while the previous batch
-- is in the database, in one transaction, in arrival order.

-- lease_groups keeps, per group whose acquires name a cap
-- (counter.Acquire.GroupLimit: a tenant's bound on its live leases), an
-- upper bound of the group's live leases: tollgate_lease_ops adds one for
-- each lease it takes and takes one off for each it releases, while
-- expiries, resets, pruning and the older functions take none off. When the
-- bound reaches the cap, the group's leases are counted again (at most once
-- a second: counted_us, Unix µs), so a group at its cap costs one count a
-- second, not one an acquire.
CREATE TABLE lease_groups (
    grp        text COLLATE "C" PRIMARY KEY,
    held       bigint NOT NULL,
    counted_us bigint NOT NULL
);

-- tollgate_lease_ops decides a batch of lease operations, in the order
-- given, in one transaction. Operation i is p_op[i]: 1 acquire, 2 renew, 3
-- release, of the lease p_id[i] of group p_grp[i].
--
-- An acquire names its key p_key[i], tally p_tally[i], limit p_max[i], time
-- to live p_ttl[i] (µs), the cap on its group's live leases p_gmax[i] (0:
-- none), and its ceilings: when p_creq[i] > 0 it is request p_creq[i] of the
-- ceiling arguments (p_keys to p_ceilings, as tollgate_check takes them, every
-- request in consume mode and all of its items ceilings), decided first for
-- the whole batch, in order; an acquire whose enforced ceilings did not all
-- allow takes no lease. A renewal gives the live lease the expiry now +
-- p_ttl[i]; a release deletes the lease. Unused arguments of an operation
-- are ignored ('' or 0).
--
-- Locks are taken in one order by every batch, so that batches of any
-- number of instances never deadlock: the keys' advisory locks (sorted, the
-- locks of tollgate_lease_lock, so that tollgate_acquire and tollgate_renew
-- still exclude these), then the ceilings' counter rows (sorted, by
-- tollgate_check, as every batch of checks takes them), then the capped
-- groups' rows (sorted), then lease rows. (tollgate_acquire, for instances
-- of an earlier release during an upgrade, takes rows before its key's
-- lock; a cycle with it is broken by PostgreSQL's deadlock detection.)
-- p_now is the instant (Unix µs), NULL for the database clock, read once
-- the locks are held.
--
-- It returns first one row per ceiling item (op 0), as tollgate_check does,
-- then one row per operation (op i): allowed (acquire: taken; renew,
-- release: the lease was live), status (0; for a refused acquire 1 the id is
-- in use, 2 a ceiling refused, 3 no free slot, 4 the group is at its cap),
-- in_flight (acquire: the key's live leases after it), expires_us (acquire:
-- the lease's expiry when taken, else the earliest among the key's live
-- leases, 0 when none; renew: the new expiry) and now_us.
CREATE FUNCTION tollgate_lease_ops(
    p_keys       text[],
    p_req        integer[],
    p_slot       integer[],
    p_alg        smallint[],
    p_limit      bigint[],
    p_window     bigint[],
    p_cost       bigint[],
    p_advisory   boolean[],
    p_consume    boolean[],
    p_ceilings   integer[],
    p_op         smallint[],
    p_creq       integer[],
    p_grp        text[],
    p_key        bytea[],
    p_tally      bytea[],
    p_id         bytea[],
    p_max        bigint[],
    p_ttl        bigint[],
    p_gmax       bigint[],
    p_now        bigint
) RETURNS TABLE (
    op         integer,
    seen_start bigint,
    seen_count bigint,
    seen_prev  bigint,
    seen_tat   double precision,
    allowed    boolean,
    status     smallint,
    in_flight  bigint,
    expires_us bigint,
    now_us     bigint
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n      integer := coalesce(cardinality(p_op), 0);
    v_nreq   integer := coalesce(cardinality(p_consume), 0);
    v_key    bytea[] := p_key;
    v_ok     boolean[];
    v_i      integer := 0;
    v_now    bigint;
    v_lock   bigint;
    v_live   bigint;
    v_first  bigint;
    v_held   bigint;
    v_count  bigint;
    v_exp    bigint;
    v_was    boolean;
    v_k      bytea;
    v_cgrp   text;
    v_ckey   bytea;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_creq) <> v_n OR cardinality(p_grp) <> v_n OR cardinality(p_key) <> v_n
        OR cardinality(p_tally) <> v_n OR cardinality(p_id) <> v_n OR cardinality(p_max) <> v_n
        OR cardinality(p_ttl) <> v_n OR cardinality(p_gmax) <> v_n THEN
        RAISE EXCEPTION 'tollgate_lease_ops: operation arrays differ in length';
    END IF;

    -- A renewal names its lease by id: its key, which never changes, is
    -- read first, without locks.
    FOR i IN 1..v_n LOOP
        IF p_op[i] = 2 THEN
            SELECT l.key INTO v_k FROM leases AS l WHERE l.grp = p_grp[i] AND l.id = p_id[i];
            v_key[i] := v_k;
        END IF;
    END LOOP;

    -- The keys' locks come first, before any row: a batch waiting for a
    -- hot key's lock (another instance's batch holds it) must not hold the
    -- ceilings' rows meanwhile, which every check of the tenant needs.
    FOR v_lock IN
        SELECT DISTINCT hashtextextended('tollgate lease ' || p_grp[i] || '/' || encode(v_key[i], 'hex'), 0)
          FROM generate_subscripts(p_op, 1) AS i
         WHERE v_key[i] IS NOT NULL AND p_op[i] IN (1, 2)
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(v_lock);
    END LOOP;

    v_ok := array_fill(true, ARRAY[greatest(v_nreq, 1)]);
    IF coalesce(cardinality(p_req), 0) > 0 THEN
        FOR seen_start, seen_count, seen_prev, seen_tat, allowed, now_us IN
            SELECT * FROM tollgate_check(p_keys, p_req, p_slot, p_alg, p_limit, p_window,
                p_cost, p_advisory, p_consume, p_ceilings, p_now)
        LOOP
            v_i := v_i + 1;
            v_now := now_us;
            IF NOT allowed AND NOT p_advisory[v_i] THEN
                v_ok[p_req[v_i]] := false;
            END IF;
            op := 0;
            status := 0;
            in_flight := 0;
            expires_us := 0;
            RETURN NEXT;
        END LOOP;
    END IF;

    -- The rows of the groups whose bound this batch may move: those of its
    -- capped acquires (made when new), and those its releases find.
    INSERT INTO lease_groups AS lg (grp, held, counted_us)
    SELECT DISTINCT p_grp[i], 0::bigint, 0::bigint
      FROM generate_subscripts(p_op, 1) AS i
     WHERE p_op[i] = 1 AND p_gmax[i] > 0
     ORDER BY 1
    ON CONFLICT DO NOTHING;
    PERFORM 1 FROM lease_groups AS lg
     WHERE lg.grp IN (SELECT p_grp[i] FROM generate_subscripts(p_op, 1) AS i
                       WHERE p_op[i] = 3 OR (p_op[i] = 1 AND p_gmax[i] > 0))
     ORDER BY lg.grp
       FOR UPDATE;

    -- The locks may have been waited for: decide at a later instant, never
    -- an earlier one than the ceilings'.
    v_now := coalesce(p_now, greatest(v_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint));
    seen_start := 0;
    seen_count := 0;
    seen_prev := 0;
    seen_tat := 0;
    now_us := v_now;
    FOR i IN 1..v_n LOOP
        op := i;
        allowed := false;
        status := 0;
        in_flight := 0;
        expires_us := 0;
        IF p_op[i] = 1 THEN
            IF p_creq[i] > 0 AND NOT v_ok[p_creq[i]] THEN
                status := 2;
                RETURN NEXT;
                CONTINUE;
            END IF;
            -- The key's expired leases, and an expired lease of the same id,
            -- are forgotten now rather than by pruning. A burst is many
            -- acquires of one key in a row: the count of the key's leases
            -- is kept from one to the next while nothing else intervenes.
            DELETE FROM leases AS l
             WHERE l.grp = p_grp[i] AND l.id = p_id[i] AND l.expires_us <= v_now;
            IF v_cgrp IS DISTINCT FROM p_grp[i] OR v_ckey IS DISTINCT FROM p_key[i] THEN
                DELETE FROM leases AS l
                 WHERE l.grp = p_grp[i] AND l.key = p_key[i] AND l.expires_us <= v_now;
                SELECT count(*), min(l.expires_us) INTO v_live, v_first
                  FROM leases AS l
                 WHERE l.grp = p_grp[i] AND l.key = p_key[i] AND l.expires_us > v_now;
                v_cgrp := p_grp[i];
                v_ckey := p_key[i];
            END IF;
            in_flight := v_live;
            expires_us := coalesce(v_first, 0);
            IF v_live >= p_max[i] THEN
                status := 3;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF p_gmax[i] > 0 THEN
                SELECT lg.held, lg.counted_us INTO v_held, v_count
                  FROM lease_groups AS lg WHERE lg.grp = p_grp[i];
                IF v_held >= p_gmax[i] AND v_now - v_count >= 1000000 THEN
                    DELETE FROM leases AS l WHERE l.grp = p_grp[i] AND l.expires_us <= v_now;
                    SELECT count(*) INTO v_held FROM leases AS l WHERE l.grp = p_grp[i];
                    UPDATE lease_groups AS lg SET held = v_held, counted_us = v_now WHERE lg.grp = p_grp[i];
                END IF;
                IF v_held >= p_gmax[i] THEN
                    status := 4;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            INSERT INTO leases (grp, id, key, tally, expires_us)
            VALUES (p_grp[i], p_id[i], p_key[i], p_tally[i], v_now + p_ttl[i])
            ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                status := 1;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF p_gmax[i] > 0 THEN
                UPDATE lease_groups AS lg SET held = lg.held + 1 WHERE lg.grp = p_grp[i];
            END IF;
            allowed := true;
            v_live := v_live + 1;
            v_first := least(v_first, v_now + p_ttl[i]);
            in_flight := v_live;
            expires_us := v_now + p_ttl[i];
        ELSIF p_op[i] = 2 THEN
            -- A renewal or release may change the kept key's leases.
            v_ckey := NULL;
            IF v_key[i] IS NOT NULL THEN
                UPDATE leases AS l SET expires_us = v_now + p_ttl[i]
                 WHERE l.grp = p_grp[i] AND l.id = p_id[i] AND l.expires_us > v_now
                RETURNING l.expires_us INTO v_exp;
                IF FOUND THEN
                    allowed := true;
                    expires_us := v_exp;
                END IF;
            END IF;
        ELSE
            v_ckey := NULL;
            DELETE FROM leases AS l WHERE l.grp = p_grp[i] AND l.id = p_id[i]
            RETURNING l.expires_us > v_now INTO v_was;
            IF FOUND THEN
                allowed := v_was;
                UPDATE lease_groups AS lg SET held = greatest(lg.held - 1, 0) WHERE lg.grp = p_grp[i];
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
