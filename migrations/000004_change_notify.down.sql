DROP TRIGGER IF EXISTS policy_overrides_notify_change ON policy_overrides;
DROP TRIGGER IF EXISTS policies_notify_change ON policies;
DROP TRIGGER IF EXISTS plans_notify_change ON plans;
DROP TRIGGER IF EXISTS api_keys_notify_update ON api_keys;
DROP TRIGGER IF EXISTS api_keys_notify_change ON api_keys;
DROP TRIGGER IF EXISTS tenants_notify_change ON tenants;
DROP FUNCTION IF EXISTS tollgate_notify_change();
