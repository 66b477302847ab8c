ALTER TABLE api_keys DROP COLUMN name, DROP COLUMN expires_at;
