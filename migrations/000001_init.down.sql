DROP TABLE IF EXISTS usage_minutes, audit, counters, policy_overrides, policies, api_keys, tenants, plans;
