DROP FUNCTION IF EXISTS tollgate_check(text[], integer[], integer[], smallint[], bigint[], bigint[], bigint[], boolean[], boolean[], integer[], bigint);
DROP FUNCTION IF EXISTS tollgate_month_start(bigint, integer);
