DROP FUNCTION tollgate_reset(text, bytea, text);
