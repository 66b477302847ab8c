DROP FUNCTION tollgate_check_fixed(text[], integer[], bigint[], bigint[], bigint[], bigint);
