DROP FUNCTION tollgate_check_fixed_packed(text[], integer[], bigint[], bigint[], bigint[], bigint);
