DROP FUNCTION tollgate_lease_ops(text[], integer[], integer[], smallint[], bigint[], bigint[], bigint[], boolean[],
    boolean[], integer[], smallint[], integer[], text[], bytea[], bytea[], bytea[], bigint[], bigint[], bigint[], bigint);
DROP TABLE lease_groups;
