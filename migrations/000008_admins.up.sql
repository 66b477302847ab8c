-- The operators' dashboard (/admin): admin accounts, their server-side
-- sessions, and the minutes in which the service answered without its shared
-- counter store (degraded), which the overview draws.

-- An operator who may sign in to the dashboard. email is stored lower-cased
-- and trimmed (internal/dashboard normalises it); password_hash is an
-- argon2id hash in the PHC string format
-- ($argon2id$v=19$m=…,t=…,p=…$salt$hash), never the password.
CREATE TABLE admins (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email         text NOT NULL UNIQUE CHECK (email = lower(btrim(email)) AND length(email) BETWEEN 3 AND 254),
    password_hash text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A signed-in session. The cookie holds 32 random bytes; only their SHA-256
-- is kept, so that a read of this table signs no one in. A session ends at
-- expires_at, at sign-out (the row is deleted) or when the admin's password
-- changes (every row of the admin is deleted).
CREATE TABLE admin_sessions (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    admin_id   uuid NOT NULL REFERENCES admins (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX admin_sessions_admin ON admin_sessions (admin_id);
CREATE INDEX admin_sessions_expires_at ON admin_sessions (expires_at);

-- Answers given without the shared counter store, per UTC minute, summed
-- over every instance (each flushes its own counts every few seconds).
CREATE TABLE degraded_minutes (
    minute  timestamptz PRIMARY KEY,
    answers bigint NOT NULL CHECK (answers > 0)
);
