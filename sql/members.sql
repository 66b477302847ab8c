-- The console's members, sessions and mailed tokens (migration 000032).
-- Every statement that takes a member id takes the tenant id too and
-- matches both, so that no id of another tenant reaches a row.

-- name: CreateMember :one
-- CreateMember adds a member; a taken email is a unique violation.
INSERT INTO members (tenant_id, email, password_hash, role, confirmed_at)
VALUES (@tenant_id, @email, sqlc.narg(password_hash), @role, sqlc.narg(confirmed_at))
RETURNING *;

-- name: MemberByEmail :one
SELECT * FROM members WHERE email = lower(btrim(@email::text));

-- name: MemberByID :one
SELECT * FROM members WHERE id = @id AND tenant_id = @tenant_id;

-- name: ListMembers :many
SELECT * FROM members WHERE tenant_id = @tenant_id ORDER BY email;

-- name: ConfirmMember :one
-- ConfirmMember marks a member confirmed at now, unless confirmed already
-- (no row then): a second confirm token, mailed again, confirms nothing.
UPDATE members SET confirmed_at = @now, updated_at = @now
WHERE id = @id AND tenant_id = @tenant_id AND confirmed_at IS NULL
RETURNING *;

-- name: SetMemberPassword :one
-- SetMemberPassword replaces a member's password hash; confirm also marks
-- the address proved (an accepted invitation), keeping a first
-- confirmation.
UPDATE members
SET password_hash = @password_hash, updated_at = @now,
    confirmed_at = CASE WHEN @confirm::boolean THEN COALESCE(confirmed_at, @now) ELSE confirmed_at END
WHERE id = @id AND tenant_id = @tenant_id
RETURNING *;

-- name: LockTenantOwners :many
-- LockTenantOwners locks a tenant's owners, in id order so that two
-- removals wait for each other instead of deadlocking, and says which can
-- sign in (a password set, not disabled).
SELECT id, (password_hash IS NOT NULL AND disabled_at IS NULL)::boolean AS active
FROM members WHERE tenant_id = @tenant_id AND role = 'owner'
ORDER BY id
FOR UPDATE;

-- name: DeleteMember :execrows
DELETE FROM members WHERE id = @id AND tenant_id = @tenant_id;

-- name: CreateMemberToken :execrows
-- CreateMemberToken stores a mailed token of the member, when the member
-- is the tenant's (no row otherwise).
INSERT INTO member_tokens (token_hash, purpose, member_id, created_at, expires_at)
SELECT @token_hash, @purpose, m.id, @now, @expires_at
FROM members AS m WHERE m.id = @member_id AND m.tenant_id = @tenant_id;

-- name: UseMemberToken :one
-- UseMemberToken spends a token of purpose that has not been used and has
-- not expired at now, and returns its member: the check and the spending
-- are one statement, so a second use (or a racing one, which waits for the
-- first's row lock and then finds used_at set) finds no row.
UPDATE member_tokens AS t SET used_at = @now
FROM members AS m
WHERE t.token_hash = @token_hash AND t.purpose = @purpose AND t.used_at IS NULL
  AND t.expires_at > @now AND m.id = t.member_id
RETURNING m.id, m.tenant_id;

-- name: PeekMemberToken :one
-- PeekMemberToken returns the member of a token of purpose that has not
-- been used and has not expired at now, without spending it: what a
-- mailed link's page shows before the form that spends it.
SELECT sqlc.embed(m)
FROM member_tokens AS t
JOIN members AS m ON m.id = t.member_id
WHERE t.token_hash = @token_hash AND t.purpose = @purpose AND t.used_at IS NULL
  AND t.expires_at > @now;

-- name: CreateMemberSession :execrows
-- CreateMemberSession stores a session of the member, when the member is
-- the tenant's (no row otherwise).
INSERT INTO member_sessions (token_hash, member_id, created_at, expires_at)
SELECT @token_hash, m.id, @now, @expires_at
FROM members AS m WHERE m.id = @member_id AND m.tenant_id = @tenant_id;

-- name: SessionMember :one
-- SessionMember returns the member of the session whose token hashes to
-- token_hash, unless it expired at or before now or the member is
-- disabled.
SELECT sqlc.embed(m), s.created_at AS session_created_at, s.expires_at AS session_expires_at
FROM member_sessions AS s
JOIN members AS m ON m.id = s.member_id
WHERE s.token_hash = @token_hash AND s.expires_at > @now AND m.disabled_at IS NULL;

-- name: DeleteMemberSession :exec
DELETE FROM member_sessions WHERE token_hash = @token_hash;

-- name: DeleteMemberSessions :execrows
-- DeleteMemberSessions signs a member of the tenant out everywhere.
DELETE FROM member_sessions AS s
USING members AS m
WHERE s.member_id = m.id AND m.id = @member_id AND m.tenant_id = @tenant_id;
