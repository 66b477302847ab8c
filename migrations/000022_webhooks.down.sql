DROP TRIGGER alerts_webhook_triggered ON alerts;
DROP FUNCTION webhook_alert_triggered();
DROP TRIGGER api_keys_webhook_revoked ON api_keys;
DROP FUNCTION webhook_key_revoked();
DROP TABLE webhook_deliveries;
DROP FUNCTION webhook_notify_delivery();
DROP TABLE webhook_events;
DROP FUNCTION webhook_fan_out();
DROP TABLE webhook_endpoints;
