DROP TABLE IF EXISTS audit_minutes;
-- Aggregates that count no subject have no meaning without their column.
DELETE FROM alerts WHERE subject_key = '*' AND (subjects = 0 OR count = 0);
ALTER TABLE alerts
    DROP CONSTRAINT alerts_count_check,
    DROP CONSTRAINT alerts_subjects_check,
    ADD CONSTRAINT alerts_count_check CHECK (count > 0),
    ADD CONSTRAINT alerts_subjects_check CHECK (subjects > 0),
    DROP COLUMN unwatched;
ALTER TABLE alert_days DROP COLUMN watched;
