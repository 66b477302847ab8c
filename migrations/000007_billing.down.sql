DROP TABLE billing_usage_reports;
DROP TABLE billing_accounts;
DROP TABLE stripe_events;
