DROP FUNCTION IF EXISTS tollgate_charge(text[], smallint[], bigint[], bigint[], bigint[], bigint);
