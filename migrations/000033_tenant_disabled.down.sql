ALTER TABLE tenants DROP COLUMN IF EXISTS disabled_reason, DROP COLUMN IF EXISTS disabled_at;
