-- A key's name says what it is for ("checkout service", "staging"), for the
-- operators who list keys; empty for keys made before names. expires_at,
-- when set, is the moment the key stops working: from then on it is refused
-- like a revoked key (401), with a problem detail saying it expired.
ALTER TABLE api_keys
    ADD COLUMN name text NOT NULL DEFAULT '' CHECK (char_length(name) <= 100),
    ADD COLUMN expires_at timestamptz;
