-- Back to 000002's tollgate_check.

-- tollgate_check decides a batch of requests, each a group of items, in the
-- order given, and counts the admitted ones: each request's ceilings (its
-- first items) as one all-or-nothing tier, and the whole request as another,
-- where advisory items never fail a tier.
--
-- p_keys holds the batch's distinct counter keys, sorted bytewise (the order
-- of the key column's "C" collation). Item i (1-based) is on key
-- p_keys[p_slot[i]] and belongs to request p_req[i]; the items of one request
-- are adjacent, requests are numbered 1, 2, … in arrival order,
-- p_consume[r] says whether request r counts (false: a peek), and
-- p_ceilings[r] how many of its first items are ceilings (0 to its number
-- of items; counter.Request.Ceilings). For each item:
-- p_alg (1 fixed window, 2 sliding window, 3 token bucket: the values of
-- limit.Algorithm), p_limit, p_window (µs; 0 is the calendar month in UTC, as
-- limit.Window.Micros encodes it), p_cost and p_advisory (true: the item
-- never blocks; counter.Item.Advisory). p_now is the instant in Unix µs;
-- NULL reads the database clock once the rows are locked, so that batches from
-- any number of Tollgate instances are applied in the order of their instants.
--
-- An item sees the state left by the requests before its own and by the
-- earlier admitted items of its own request (tentatively, ceilings and
-- policies, enforced and advisory alike, whatever the request keeps in the
-- end), and is admitted or not by its own arithmetic. A request whose
-- enforced (not advisory) items are all admitted, and that consumes, keeps
-- the new states of its admitted items; else one whose enforced ceilings are
-- all admitted keeps the states its admitted ceilings left, in either mode;
-- any other request counts nothing. A refused advisory item counts nothing
-- either: its row keeps its state and its expiry. (A key a request named for
-- the first time and did not count keeps an empty row, which pruning
-- removes.)
--
-- It returns one row per item, in input order: the state the item saw, whether
-- it was admitted, and the instant used. The rest of each decision
-- (remaining, reset, retry) is derived by the caller from these with
-- limit.Decide.
CREATE OR REPLACE FUNCTION tollgate_check(
    p_keys     text[],
    p_req      integer[],
    p_slot     integer[],
    p_alg      smallint[],
    p_limit    bigint[],
    p_window   bigint[],
    p_cost     bigint[],
    p_advisory boolean[],
    p_consume  boolean[],
    p_ceilings integer[],
    p_now      bigint
) RETURNS TABLE (
    seen_start bigint,
    seen_count bigint,
    seen_prev  bigint,
    seen_tat   double precision,
    allowed    boolean,
    now_us     bigint
)
LANGUAGE plpgsql
-- Every statement here reads or writes a few rows by key, through an index:
-- plan each once per session, with the index. Left to choose, PL/pgSQL would
-- plan them again on every call (a plan that knows the arrays' lengths always
-- looks cheaper than the generic one: that tripled the cost of a call), and a
-- plan made while the table was small (a new database) would scan the table
-- whole for as long as the connection lives.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n      integer := coalesce(cardinality(p_req), 0);
    -- Working states, one per key, indexed like p_keys.
    k_key    text[];
    k_start  bigint[];
    k_count  bigint[];
    k_prev   bigint[];
    k_tat    double precision[];
    k_alg    smallint[];
    k_window bigint[];
    k_dirty  boolean[];
    -- What each item saw and its verdict.
    o_start  bigint[];
    o_count  bigint[];
    o_prev   bigint[];
    o_tat    double precision[];
    o_ok     boolean[];
    -- Undo log of the request being decided: the states its admitted items
    -- replaced, newest last, one entry per admitted item.
    u_slot   integer[] := '{}';
    u_start  bigint[] := '{}';
    u_count  bigint[] := '{}';
    u_prev   bigint[] := '{}';
    u_tat    double precision[] := '{}';
    u_n      integer;
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
    -- The undo entries of the request's admitted ceilings.
    v_ceilu  integer;
    -- The request's last item whose state it keeps, and the undo entries
    -- of the items up to it.
    v_last   integer;
    v_kept   integer;
    v_dirty  boolean := false;
    -- The item being decided and the state it works on.
    v_alg    smallint;
    v_w      bigint;
    v_lim    bigint;
    v_cost   bigint;
    v_start  bigint;
    v_count  bigint;
    v_prev   bigint;
    v_tat    double precision;
    v_ws     bigint;
    v_el     bigint;
    v_t      bigint;
    v_est    double precision;
    v_iv     double precision;
    v_off    double precision;
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
    -- every commit that touched them.
    SELECT array_agg(c.key), array_agg(c.start), array_agg(c.count), array_agg(c.prev), array_agg(c.tat)
      INTO k_key, k_start, k_count, k_prev, k_tat
      FROM (SELECT c.key, c.start, c.count, c.prev, c.tat
              FROM counters AS c
             WHERE c.key = ANY (p_keys)
             ORDER BY c.key) AS c;
    -- Also proves that the states line up with p_keys, and so with p_slot.
    IF k_key IS DISTINCT FROM p_keys THEN
        RAISE EXCEPTION 'tollgate_check: p_keys must be distinct, sorted bytewise, and all present';
    END IF;

    k_alg := array_fill(0::smallint, ARRAY[cardinality(k_key)]);
    k_window := array_fill(0::bigint, ARRAY[cardinality(k_key)]);
    k_dirty := array_fill(false, ARRAY[cardinality(k_key)]);
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
        v_ceilu := 0;
        u_n := 0;
        WHILE v_i <= v_n AND p_req[v_i] = v_r LOOP
            v_j := p_slot[v_i];
            v_start := k_start[v_j];
            v_count := k_count[v_j];
            v_prev := k_prev[v_j];
            v_tat := k_tat[v_j];
            o_start[v_i] := v_start;
            o_count[v_i] := v_count;
            o_prev[v_i] := v_prev;
            o_tat[v_i] := v_tat;
            v_alg := p_alg[v_i];
            v_w := p_window[v_i];
            v_lim := p_limit[v_i];
            v_cost := p_cost[v_i];

            IF v_alg = 3 THEN
                -- gcraStep. A clock behind the state's counts as the state's
                -- own instant.
                v_t := greatest(v_now, v_start);
                v_iv := v_w::double precision / v_lim::double precision;
                v_off := greatest(0::double precision, v_tat - (v_t - v_start)::double precision);
                v_next := v_off + v_iv * v_cost::double precision;
                -- limit.gcraCapacity: the window plus interval/2^20, so
                -- that limit intervals rounded up still fit.
                v_ok := v_next <= v_w::double precision + v_iv / 1048576::double precision;
                IF v_ok THEN
                    v_start := v_t;
                    v_count := 0;
                    v_prev := 0;
                    v_tat := v_next;
                END IF;
            ELSIF v_alg = 2 THEN
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
                v_est := (v_prev::double precision * ((v_w - v_el)::double precision / v_w::double precision))
                    + v_count::double precision;
                v_ok := v_est + v_cost::double precision <= v_lim::double precision;
                IF v_ok THEN
                    v_count := v_count + v_cost;
                END IF;
            ELSE
                -- fixedStep; epoch-aligned windows, or the UTC month.
                IF v_w = 0 THEN
                    v_ws := tollgate_month_start(v_now, 0);
                ELSE
                    v_ws := v_now - v_now % v_w;
                END IF;
                -- A state in this window or a later one (a clock that ran
                -- ahead) keeps its window; an older one starts afresh.
                IF v_start < v_ws THEN
                    v_start := v_ws;
                    v_count := 0;
                END IF;
                v_ok := v_count + v_cost <= v_lim;
                IF v_ok THEN
                    v_count := v_count + v_cost;
                    v_prev := 0;
                    v_tat := 0;
                END IF;
            END IF;

            o_ok[v_i] := v_ok;
            IF v_ok THEN
                u_n := u_n + 1;
                u_slot[u_n] := v_j;
                u_start[u_n] := k_start[v_j];
                u_count[u_n] := k_count[v_j];
                u_prev[u_n] := k_prev[v_j];
                u_tat[u_n] := k_tat[v_j];
                k_start[v_j] := v_start;
                k_count[v_j] := v_count;
                k_prev[v_j] := v_prev;
                k_tat[v_j] := v_tat;
                IF v_i - v_first < v_ceil THEN
                    v_ceilu := u_n;
                END IF;
            ELSIF p_advisory[v_i] THEN
                -- Refused, it changed nothing, and it fails no tier.
                NULL;
            ELSIF v_i - v_first < v_ceil THEN
                v_ceilok := false;
            ELSE
                v_polok := false;
            END IF;
            v_i := v_i + 1;
        END LOOP;
        IF v_ceil < 0 OR v_ceil > v_i - v_first THEN
            RAISE EXCEPTION 'tollgate_check: request % has % ceilings and % items', v_r, v_ceil, v_i - v_first;
        END IF;

        -- All of the request, its ceilings alone, or nothing. The first
        -- v_ceilu undo entries are the admitted ceilings'.
        IF v_ceilok AND v_polok AND v_consume THEN
            v_last := v_i - 1;
            v_kept := u_n;
        ELSIF v_ceilok THEN
            v_last := v_first + v_ceil - 1;
            v_kept := v_ceilu;
        ELSE
            v_last := v_first - 1;
            v_kept := 0;
        END IF;
        -- Put back what the items after v_last changed, newest first.
        FOR v_x IN REVERSE u_n .. v_kept + 1 LOOP
            v_j := u_slot[v_x];
            k_start[v_j] := u_start[v_x];
            k_count[v_j] := u_count[v_x];
            k_prev[v_j] := u_prev[v_x];
            k_tat[v_j] := u_tat[v_x];
        END LOOP;
        -- Only admitted items write: a refused advisory item's key keeps
        -- its expiry too, unless another item admitted on it.
        FOR v_x IN v_first .. v_last LOOP
            IF o_ok[v_x] THEN
                v_j := p_slot[v_x];
                k_dirty[v_j] := true;
                k_alg[v_j] := p_alg[v_x];
                k_window[v_j] := p_window[v_x];
                v_dirty := true;
            END IF;
        END LOOP;
    END LOOP;

    IF v_dirty THEN
        -- limit.Expiry: after it the state says no more than a new counter.
        UPDATE counters AS c
           SET start = w.st, count = w.cn, prev = w.pv, tat = w.tt,
               expires_at = timestamptz 'epoch' + interval '1 microsecond' * CASE w.alg
                   WHEN 2 THEN w.st + 2 * w.win
                   WHEN 3 THEN w.st + ceil(w.tt)::bigint
                   ELSE CASE WHEN w.win = 0 THEN tollgate_month_start(w.st, 1) ELSE w.st - w.st % w.win + w.win END
               END
          FROM unnest(p_keys, k_start, k_count, k_prev, k_tat, k_alg, k_window, k_dirty)
               AS w(key, st, cn, pv, tt, alg, win, dirty)
         WHERE w.dirty AND c.key = w.key;
    END IF;

    RETURN QUERY SELECT o.*, v_now FROM unnest(o_start, o_count, o_prev, o_tat, o_ok) AS o;
END
$$;
