ALTER TABLE webhook_endpoints DROP COLUMN secret_key_id;
