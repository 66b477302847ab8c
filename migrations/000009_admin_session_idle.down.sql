ALTER TABLE admin_sessions DROP COLUMN last_seen_at;
