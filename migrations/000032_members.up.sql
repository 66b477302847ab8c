-- The console (issue 41): the people of a tenant who sign in with an email
-- and a password, their server-side sessions, and the one-use tokens mailed
-- to them (confirm an address, reset a password, accept an invitation).
-- internal/console holds the types; pgstore.Members keeps these tables.

-- A member of a tenant. One account per email: an address belongs to one
-- member of one tenant (UNIQUE below), so that signing in by email names
-- one account; someone who works for two tenants uses two addresses.
-- email is stored lower-cased and trimmed, as admins' is; password_hash is
-- an argon2id hash in PHC string format, NULL while an invited member has
-- not yet set a password. confirmed_at is when the member proved the
-- address (the tenant's live key comes with the owner's confirmation);
-- disabled_at, when set, keeps the member from signing in.
CREATE TABLE members (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    email         text NOT NULL UNIQUE CHECK (email = lower(btrim(email)) AND length(email) BETWEEN 3 AND 254),
    password_hash text CHECK (password_hash LIKE '$argon2id$%'),
    role          text NOT NULL CHECK (role IN ('owner', 'developer')),
    confirmed_at  timestamptz,
    disabled_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX members_tenant ON members (tenant_id, email);

-- A signed-in member, as admin_sessions: the cookie holds 32 random bytes
-- and only their SHA-256 is kept. A session ends at expires_at, at sign-out
-- or when the member's password changes (every row of the member goes).
CREATE TABLE member_sessions (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    member_id  uuid NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX member_sessions_member ON member_sessions (member_id);
CREATE INDEX member_sessions_expires_at ON member_sessions (expires_at);

-- A token mailed to a member: the mail holds 32 random bytes, this table
-- their SHA-256. A token works once and only before expires_at, for its
-- purpose only: the statement that accepts it sets used_at and checks all
-- three (used_at IS NULL, expires_at, purpose), so that two requests racing
-- with one token cannot both get in.
CREATE TABLE member_tokens (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    purpose    text NOT NULL CHECK (purpose IN ('confirm', 'reset', 'invite')),
    member_id  uuid NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX member_tokens_member ON member_tokens (member_id);
CREATE INDEX member_tokens_expires_at ON member_tokens (expires_at);
