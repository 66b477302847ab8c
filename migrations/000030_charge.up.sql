-- tollgate_charge counts usage known only after the fact (counter.Charger):
-- each item's cost is added to its counter p_keys[i], in order, past its
-- limit if need be (tollgate_adjust with delta p_costs[i], as a
-- settlement's excess), in one transaction. The rows are created when
-- missing and locked in bytewise order of their keys, as every batch of
-- checks locks them. It returns the instant it counted at (p_now, or the
-- database clock when NULL) and the state each item left.
CREATE FUNCTION tollgate_charge(
    p_keys text[], p_algs smallint[], p_limits bigint[], p_windows bigint[], p_costs bigint[], p_now bigint,
    OUT now_us bigint, OUT a_start bigint[], OUT a_count bigint[], OUT a_prev bigint[], OUT a_tat double precision[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_a record;
BEGIN
    now_us := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    INSERT INTO counters AS c (key)
    SELECT DISTINCT k COLLATE "C" FROM unnest(p_keys) AS k
     ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET key = excluded.key WHERE false;
    SELECT * INTO v_a FROM tollgate_reserve_apply(p_keys, p_algs, p_limits, p_windows,
        array_fill(0::bigint, ARRAY[cardinality(p_keys)]), p_costs, now_us);
    a_start := v_a.a_start;
    a_count := v_a.a_count;
    a_prev := v_a.a_prev;
    a_tat := v_a.a_tat;
END
$$;
