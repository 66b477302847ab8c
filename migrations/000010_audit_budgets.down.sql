-- Aggregate alerts have no meaning without their column: they go with it.
DELETE FROM alerts WHERE subject_key = '*';
ALTER TABLE alerts DROP COLUMN subjects;
DROP TABLE IF EXISTS alert_overflow, alert_days, refusal_minutes;
DROP INDEX IF EXISTS audit_at;
