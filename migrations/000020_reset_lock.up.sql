-- tollgate_reset forgets a counter (its row key p_counter_key) and the
-- leases of (p_grp, p_key), under the key's lease lock (tollgate_lease_lock),
-- taken first. Without it a reset deleting a key's leases and a batch of
-- tollgate_lease_ops working on the same key could each wait for lease rows
-- the other held, a deadlock PostgreSQL breaks only after deadlock_timeout
-- (a second), while the batch held the tenant's ceiling rows that every
-- instance's checks need: a flood of resets and acquires on one hot subject
-- stalled the whole store for that second. With the lock, a reset waits
-- for the key's batch in flight, or the batch for the reset, never both.
CREATE FUNCTION tollgate_reset(p_grp text, p_key bytea, p_counter_key text) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM tollgate_lease_lock(p_grp, p_key);
    DELETE FROM counters AS c WHERE c.key = p_counter_key;
    DELETE FROM leases AS l WHERE l.grp = p_grp AND l.key = p_key;
END
$$;
