DROP FUNCTION tollgate_reserve_sweep(integer, bigint);
DROP FUNCTION tollgate_settle(text, bytea, bigint, bigint, bigint);
DROP FUNCTION tollgate_reserve(text[], integer[], smallint[], bigint[], bigint[], bigint[], boolean[], integer, bytea[],
    text, bytea, bigint, boolean, bigint, bigint);
DROP FUNCTION tollgate_reserve_expire(text, bigint);
DROP FUNCTION tollgate_reserve_lock(text, text[], bigint);
DROP FUNCTION tollgate_reserve_apply(text[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint);
DROP FUNCTION tollgate_adjust(smallint, bigint, bigint, bigint, double precision, bigint, bigint, bigint, bigint, bigint);
DROP TABLE reservations;
