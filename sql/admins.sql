-- name: CreateAdmin :one
-- CreateAdmin adds an admin; a taken email is a unique violation.
INSERT INTO admins (email, password_hash) VALUES (@email, @password_hash)
RETURNING id, email, password_hash, created_at, updated_at;

-- name: AdminByEmail :one
SELECT id, email, password_hash, created_at, updated_at FROM admins WHERE email = @email;

-- name: ListAdmins :many
-- ListAdmins lists every admin by email, without password hashes.
SELECT id, email, created_at FROM admins ORDER BY email;

-- name: SetAdminPassword :one
-- SetAdminPassword replaces an admin's password hash.
UPDATE admins SET password_hash = @password_hash, updated_at = now()
WHERE email = @email
RETURNING id, email, password_hash, created_at, updated_at;

-- name: DeleteAdminSessions :execrows
-- DeleteAdminSessions signs an admin out everywhere.
DELETE FROM admin_sessions WHERE admin_id = @admin_id;

-- name: CreateSession :exec
-- CreateSession stores a session last seen at last_seen_at (now when null).
INSERT INTO admin_sessions (token_hash, admin_id, expires_at, last_seen_at)
VALUES (@token_hash, @admin_id, @expires_at, COALESCE(sqlc.narg(last_seen_at)::timestamptz, now()));

-- name: SessionAdmin :one
-- SessionAdmin returns the admin of the session whose token hashes to
-- token_hash, unless it expired at or before now.
SELECT a.id, a.email, s.created_at, s.expires_at, s.last_seen_at
FROM admin_sessions AS s
JOIN admins AS a ON a.id = s.admin_id
WHERE s.token_hash = @token_hash AND s.expires_at > @now;

-- name: TouchSession :exec
-- TouchSession moves a session's last_seen_at forward to seen_at; never
-- back, so that a slow request cannot undo a later one's.
UPDATE admin_sessions SET last_seen_at = @seen_at
WHERE token_hash = @token_hash AND last_seen_at < @seen_at;

-- name: DeleteSession :exec
DELETE FROM admin_sessions WHERE token_hash = @token_hash;

-- name: PruneSessions :execrows
-- PruneSessions deletes up to max_rows sessions that expired before before.
DELETE FROM admin_sessions AS s
USING (
    SELECT admin_sessions.token_hash FROM admin_sessions
    WHERE admin_sessions.expires_at < @before
    ORDER BY admin_sessions.expires_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE s.token_hash = old.token_hash;
