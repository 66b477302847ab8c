-- Admin sessions also end after a while without use (internal/dashboard's
-- idle timeout): last_seen_at is the last authenticated request, written at
-- most about once a minute per session, so that reading pages costs no
-- write per request. Rows of earlier sessions start idle from now.
ALTER TABLE admin_sessions ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();
