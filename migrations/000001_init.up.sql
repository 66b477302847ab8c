-- Tollgate's first schema: plans, tenants, API keys, policies and overrides,
-- counters, audit and usage.

CREATE TABLE plans (
    name             text PRIMARY KEY,
    ip_per_minute    bigint NOT NULL CHECK (ip_per_minute > 0),
    quota_per_minute bigint NOT NULL CHECK (quota_per_minute > 0),
    quota_per_hour   bigint NOT NULL CHECK (quota_per_hour > 0),
    -- NULL means unlimited.
    monthly_checks   bigint CHECK (monthly_checks > 0),
    purchasable      boolean NOT NULL DEFAULT true,
    stripe_price_id  text UNIQUE,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

INSERT INTO plans (name, ip_per_minute, quota_per_minute, quota_per_hour, monthly_checks, purchasable) VALUES
    ('starter',                 600,     1200,    30000,   100000, true),
    ('pro',                   60000,   120000,  5000000, 50000000, true),
    ('growth',                60000,   120000,  5000000, 50000000, false),
    ('enterprise',           600000,  1200000, 50000000,     NULL, true),
    ('enterprise_dedicated', 600000,  1200000, 50000000,     NULL, false);

CREATE TABLE tenants (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                  text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    plan                  text NOT NULL REFERENCES plans (name),
    billing_status        text NOT NULL DEFAULT 'active' CHECK (billing_status IN
        ('active', 'trialing', 'past_due', 'unpaid', 'canceled', 'incomplete', 'incomplete_expired', 'paused')),
    -- Per-IP limit for this tenant's callers; 0 means the plan's.
    rate_limit_per_minute bigint NOT NULL DEFAULT 0 CHECK (rate_limit_per_minute >= 0),
    -- Tenant quota overrides; NULL means the effective plan's.
    quota_per_minute      bigint CHECK (quota_per_minute > 0),
    quota_per_hour        bigint CHECK (quota_per_hour > 0),
    stripe_customer_id     text UNIQUE,
    stripe_subscription_id text,
    -- Stripe "created" time of the newest billing event applied.
    billing_updated_at    timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- The public part of the key, used to find it; the secret is only hashed.
    prefix       text NOT NULL UNIQUE,
    hash         bytea NOT NULL,
    test         boolean NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE policies (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        text NOT NULL,
    "limit"     bigint NOT NULL CHECK ("limit" > 0),
    "window"    text NOT NULL,
    algorithm   text NOT NULL CHECK (algorithm IN ('fixed_window', 'sliding_window', 'token_bucket')),
    scope       text NOT NULL CHECK (scope IN ('subject', 'global')),
    fail_mode   text NOT NULL CHECK (fail_mode IN ('open', 'closed')),
    shadow      boolean NOT NULL DEFAULT false,
    alert_after bigint NOT NULL DEFAULT 0 CHECK (alert_after >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE policy_overrides (
    tenant_id  uuid NOT NULL,
    policy     text NOT NULL,
    pattern    text NOT NULL,
    "limit"    bigint NOT NULL CHECK ("limit" > 0),
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, policy, pattern),
    FOREIGN KEY (tenant_id, policy) REFERENCES policies (tenant_id, name) ON DELETE CASCADE
);

-- Counters of the PostgreSQL counter store (internal/counter/postgres). Keys
-- are opaque hashes; "C" collation makes their lock order a byte order.
CREATE TABLE counters (
    key        text COLLATE "C" PRIMARY KEY,
    start      bigint NOT NULL DEFAULT 0,
    count      bigint NOT NULL DEFAULT 0,
    prev       bigint NOT NULL DEFAULT 0,
    tat        double precision NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);
CREATE INDEX counters_expires_at ON counters (expires_at);

CREATE TABLE audit (
    id        bigserial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    tenant_id uuid REFERENCES tenants (id) ON DELETE SET NULL,
    actor     text NOT NULL,
    kind      text NOT NULL,
    detail    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_tenant_at ON audit (tenant_id, at DESC);
CREATE INDEX audit_kind_at ON audit (kind, at DESC);

-- Usage per tenant and minute, flushed in batches from memory.
CREATE TABLE usage_minutes (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    minute    timestamptz NOT NULL,
    live      boolean NOT NULL,
    -- "allowed", or the layer that refused: instance, ip, quota, allotment,
    -- sandbox, policy.
    outcome   text NOT NULL,
    checks    bigint NOT NULL CHECK (checks >= 0),
    PRIMARY KEY (tenant_id, minute, live, outcome)
);
CREATE INDEX usage_minutes_minute ON usage_minutes (minute);
