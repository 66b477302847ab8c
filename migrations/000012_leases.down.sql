DROP FUNCTION tollgate_renew(text, bytea, bigint, bigint);
DROP FUNCTION tollgate_acquire(text[], integer[], smallint[], bigint[], bigint[], bigint[], boolean[], text, bytea, bytea, bytea, bigint, bigint, bigint);
DROP FUNCTION tollgate_lease_lock(text, bytea);
DROP TABLE leases;
DELETE FROM policies WHERE algorithm = 'concurrency';
ALTER TABLE policies DROP CONSTRAINT policies_window_check;
ALTER TABLE policies DROP CONSTRAINT policies_algorithm_check;
ALTER TABLE policies ADD CONSTRAINT policies_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window', 'token_bucket'));
