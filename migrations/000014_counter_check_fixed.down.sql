DROP FUNCTION tollgate_check_fixed(text[], bigint[], bigint[], bigint[], bigint);
