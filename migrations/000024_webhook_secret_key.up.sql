-- The id of the key that sealed each endpoint's secret (webhooks.Sealer's
-- KeyID: a MAC under the key, which tells nothing of it). An instance claims
-- only the deliveries of endpoints whose secret it can open, so that one
-- started with another TOLLGATE_PEPPER leaves them to the others instead of
-- spending their attempts on failures. NULL for the secrets sealed before
-- this migration, until an instance that opens one labels it.
ALTER TABLE webhook_endpoints ADD COLUMN secret_key_id bytea CHECK (length(secret_key_id) = 8);
