DROP TRIGGER IF EXISTS envoy_domains_notify_change ON envoy_domains;
-- The sequence goes with the table that owns it.
DROP TABLE IF EXISTS envoy_domains;
