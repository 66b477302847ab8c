-- name: LockTenantWebhooks :one
-- LockTenantWebhooks locks a tenant's row against other endpoint
-- creations until the transaction ends, so that its count of endpoints
-- holds (the insert that follows runs on a fresh snapshot).
SELECT id FROM tenants WHERE id = @tenant_id FOR NO KEY UPDATE;

-- name: CountWebhookEndpoints :one
SELECT count(*)::integer FROM webhook_endpoints WHERE tenant_id = @tenant_id;

-- name: CreateWebhookEndpoint :one
INSERT INTO webhook_endpoints (tenant_id, url, events, secret, secret_key_id)
VALUES (@tenant_id, @url, @events::text[], @secret, @secret_key_id)
RETURNING *;

-- name: ListWebhookEndpoints :many
SELECT * FROM webhook_endpoints WHERE tenant_id = @tenant_id ORDER BY created_at, id;

-- name: GetWebhookEndpoint :one
SELECT * FROM webhook_endpoints WHERE tenant_id = @tenant_id AND id = @id;

-- name: DeleteWebhookEndpoint :execrows
DELETE FROM webhook_endpoints WHERE tenant_id = @tenant_id AND id = @id;

-- name: RotateWebhookSecret :one
-- RotateWebhookSecret puts a new secret in place; the one it replaces signs
-- too until previous_expires_at.
UPDATE webhook_endpoints
SET previous_secret = secret, previous_expires_at = @previous_expires_at,
    secret = @secret, secret_key_id = @secret_key_id, updated_at = now()
WHERE tenant_id = @tenant_id AND id = @id
RETURNING *;

-- name: SetWebhookEndpointEnabled :one
-- SetWebhookEndpointEnabled enables an endpoint (forgetting why it was
-- disabled and its failures) or disables it with a reason. Deliveries
-- waiting for a disabled endpoint wait until it is enabled again.
UPDATE webhook_endpoints
SET enabled = @enabled,
    disabled_reason = CASE WHEN @enabled::boolean THEN '' ELSE @reason::text END,
    failing_since = CASE WHEN @enabled::boolean THEN NULL ELSE failing_since END,
    updated_at = now()
WHERE tenant_id = @tenant_id AND id = @id
RETURNING *;

-- name: InsertWebhookEvent :one
-- InsertWebhookEvent writes an event to the outbox once per idempotency
-- key; the trigger makes its deliveries. Returns no row when the key was
-- taken.
INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
VALUES (@tenant_id, @type, @data, @idempotency_key)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, created_at;

-- name: InsertWebhookDelivery :one
-- InsertWebhookDelivery makes a delivery: pending, or dropped when its
-- endpoint already has 1,000 waiting (migration 000025).
INSERT INTO webhook_deliveries (event_id, endpoint_id, tenant_id)
VALUES (@event_id, @endpoint_id, @tenant_id)
RETURNING id, status;

-- name: ClaimWebhookDeliveries :many
-- ClaimWebhookDeliveries claims due deliveries for this instance until
-- claim_until, at most max_deliveries (its free slots):
--   - oldest due first across endpoints, except that a tenant with fewer
--     deliveries in flight on this instance (in_flight holds the tenant
--     of each) comes before one with more, so that a freed slot goes to
--     the tenant holding fewest, not to the longest backlog;
--   - at most per_tenant of a tenant's deliveries in flight on this
--     instance, those it has counted;
--   - at most per_endpoint in flight per endpoint across every instance
--     (the endpoints' rows are locked while they are counted, and
--     endpoints another instance is claiming for are skipped);
--   - only of endpoints whose secret was sealed under key_id, the key of
--     this instance: one that cannot sign a delivery never claims it.
-- A claim that runs out (its instance died) makes the delivery due again.
-- Its cost is a few index probes per endpoint with deliveries not settled
-- (migration 000023), whatever the backlog of any of them.
WITH RECURSIVE heads AS (
    -- Each endpoint with deliveries not settled and the oldest of them
    -- (due, or the first to fall due: those in flight wait until their
    -- claim runs out), one index probe each, in endpoint order: an
    -- endpoint with nothing waiting costs nothing, one with a backlog no
    -- more than one without.
    (SELECT d.endpoint_id, d.next_attempt_at FROM webhook_deliveries AS d
     WHERE d.next_attempt_at IS NOT NULL
     ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.next_attempt_at FROM heads AS h
    CROSS JOIN LATERAL (
        SELECT d.endpoint_id, d.next_attempt_at FROM webhook_deliveries AS d
        WHERE d.next_attempt_at IS NOT NULL AND d.endpoint_id > h.endpoint_id
        ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1
    ) AS n
), busy AS (
    SELECT b.tenant_id, count(*)::integer AS n FROM unnest(@in_flight::uuid[]) AS b (tenant_id) GROUP BY b.tenant_id
), ep AS MATERIALIZED (
    SELECT e.id, e.tenant_id, coalesce(busy.n, 0) AS tenant_busy, sending.n AS sending
    FROM heads
    JOIN webhook_endpoints AS e ON e.id = heads.endpoint_id
    CROSS JOIN LATERAL (
        SELECT count(*)::integer AS n FROM webhook_deliveries AS x
        WHERE x.endpoint_id = e.id AND x.status = 'sending' AND x.next_attempt_at > now()
    ) AS sending
    LEFT JOIN busy ON busy.tenant_id = e.tenant_id
    WHERE heads.next_attempt_at <= now() AND e.enabled AND e.secret_key_id = @key_id
      AND coalesce(busy.n, 0) < @per_tenant::integer
      AND sending.n < @per_endpoint::integer
    ORDER BY coalesce(busy.n, 0), heads.next_attempt_at, e.id
    LIMIT @max_deliveries::integer
    FOR NO KEY UPDATE OF e SKIP LOCKED
), picked AS (
    -- The endpoint's row lock keeps other claimers off its deliveries.
    SELECT r.id FROM (
        SELECT q.id, q.next_attempt_at, q.tenant_busy,
            row_number() OVER (PARTITION BY q.tenant_id ORDER BY q.next_attempt_at, q.id) AS tn
        FROM (
            SELECT d.id, d.next_attempt_at, ep.tenant_id, ep.tenant_busy,
                ep.sending + row_number() OVER (PARTITION BY ep.id ORDER BY d.next_attempt_at, d.id) AS en
            FROM ep
            CROSS JOIN LATERAL (
                SELECT x.id, x.next_attempt_at FROM webhook_deliveries AS x
                WHERE x.endpoint_id = ep.id AND x.next_attempt_at <= now()
                ORDER BY x.next_attempt_at, x.id
                LIMIT @per_endpoint::integer
            ) AS d
        ) AS q
        WHERE q.en <= @per_endpoint::integer
    ) AS r
    WHERE r.tenant_busy + r.tn <= @per_tenant::integer
    -- Round robin across tenants: the first of each before the second
    -- of any, oldest due first among them.
    ORDER BY r.tenant_busy + r.tn, r.next_attempt_at, r.id
    LIMIT @max_deliveries::integer
)
UPDATE webhook_deliveries AS d
SET status = 'sending', attempts = d.attempts + 1, next_attempt_at = @claim_until, last_attempt_at = now()
FROM picked, webhook_events AS ev, webhook_endpoints AS e
WHERE d.id = picked.id AND ev.id = d.event_id AND e.id = d.endpoint_id
  -- Checked again on the row's latest version: an instance whose
  -- snapshot predates another's claim (it locked the endpoint just after
  -- that claim committed) must not claim the same delivery.
  AND d.next_attempt_at <= now()
RETURNING d.id, d.attempts, d.tenant_id, ev.id AS event_id, ev.type, ev.data, ev.created_at AS event_at,
    e.id AS endpoint_id, e.url, e.secret, e.previous_secret, e.previous_expires_at;

-- name: DeliveredWebhook :exec
-- DeliveredWebhook settles a delivery that the receiver accepted; its
-- endpoint is no longer failing.
WITH d AS (
    UPDATE webhook_deliveries AS w
    SET status = 'delivered', next_attempt_at = NULL, delivered_at = now(),
        last_status_code = @status_code, last_latency_ms = @latency_ms, last_error = '',
        response_excerpt = @response_excerpt
    WHERE w.id = @id
    RETURNING w.endpoint_id
)
UPDATE webhook_endpoints AS e SET failing_since = NULL
FROM d WHERE e.id = d.endpoint_id AND e.failing_since IS NOT NULL;

-- name: FailedWebhook :exec
-- FailedWebhook records a failed attempt: the delivery waits until
-- next_attempt_at, or is given up (status failed) when that is NULL. The
-- endpoint is failing since its first failure after a success, and is
-- disabled, with disable_reason, once that is older than disable_after.
WITH d AS (
    UPDATE webhook_deliveries AS w
    SET status = CASE WHEN sqlc.narg('next_attempt_at')::timestamptz IS NULL THEN 'failed' ELSE 'retrying' END,
        next_attempt_at = sqlc.narg('next_attempt_at')::timestamptz,
        last_status_code = sqlc.narg('status_code'), last_latency_ms = @latency_ms,
        last_error = @last_error, response_excerpt = @response_excerpt
    WHERE w.id = @id
    RETURNING w.endpoint_id
)
UPDATE webhook_endpoints AS e
SET failing_since = coalesce(e.failing_since, now()),
    enabled = e.enabled AND coalesce(e.failing_since, now()) > now() - @disable_after::interval,
    disabled_reason = CASE WHEN e.enabled AND coalesce(e.failing_since, now()) <= now() - @disable_after::interval
        THEN @disable_reason::text ELSE e.disabled_reason END,
    updated_at = now()
FROM d WHERE e.id = d.endpoint_id;

-- name: ListWebhookDeliveries :many
-- ListWebhookDeliveries is an endpoint's delivery log, newest first.
SELECT d.id, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.last_status_code,
    d.last_latency_ms, d.last_error, d.response_excerpt, d.created_at, d.delivered_at,
    ev.id AS event_id, ev.type
FROM webhook_deliveries AS d
JOIN webhook_events AS ev ON ev.id = d.event_id
WHERE d.tenant_id = @tenant_id AND d.endpoint_id = @endpoint_id
ORDER BY d.created_at DESC, d.id DESC
LIMIT @max_rows;

-- name: ResendWebhookDelivery :execrows
-- ResendWebhookDelivery makes a settled delivery due now, with a fresh
-- schedule of retries, when its endpoint has room. One being sent or
-- waiting is left as it is.
UPDATE webhook_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = now(), last_error = ''
WHERE tenant_id = @tenant_id AND endpoint_id = @endpoint_id AND id = @id
  AND status IN ('delivered', 'failed', 'dropped') AND NOT webhook_endpoint_full(endpoint_id);

-- name: WebhookDeliveryState :one
-- WebhookDeliveryState says why a delivery was not sent again: whether it
-- is settled, and whether its endpoint has 1,000 waiting.
SELECT (next_attempt_at IS NULL)::boolean AS settled, webhook_endpoint_full(endpoint_id) AS full
FROM webhook_deliveries WHERE tenant_id = @tenant_id AND endpoint_id = @endpoint_id AND id = @id;

-- name: EmitAllotmentThresholds :execrows
-- EmitAllotmentThresholds writes allotment.threshold events for every
-- tenant whose live checks this month (outcomes that count, as
-- usage.CountsAsCheck) reached one of the percents of its effective plan's
-- allotment, once per tenant, month and percent (the idempotency key):
-- instances that sweep at once write each event once. A status in
-- keep_statuses keeps the purchased plan, any other resolves as starter;
-- growth is pro (tenant.EffectivePlanName). month names the month in keys
-- (2026-05).
WITH used AS (
    SELECT u.tenant_id, sum(u.checks)::bigint AS checks
    FROM usage_minutes AS u
    WHERE u.minute >= @month_start AND u.minute < @month_end
      AND u.live AND u.checked AND u.outcome = ANY (@counting_outcomes::text[])
    GROUP BY u.tenant_id
), crossed AS (
    SELECT t.id AS tenant_id, used.checks, p.monthly_checks, pct.percent
    FROM used
    JOIN tenants AS t ON t.id = used.tenant_id
    JOIN plans AS p ON p.name = CASE
        WHEN t.billing_status = ANY (@keep_statuses::text[]) THEN (CASE t.plan WHEN 'growth' THEN 'pro' ELSE t.plan END)
        ELSE 'starter' END
    CROSS JOIN unnest(@percents::integer[]) AS pct (percent)
    WHERE p.monthly_checks IS NOT NULL AND used.checks * 100 >= p.monthly_checks * pct.percent
)
INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
SELECT tenant_id, 'allotment.threshold', jsonb_build_object(
    'percent', percent, 'checks_used', checks, 'checks_allotment', monthly_checks,
    'period_start', @month_start::timestamptz, 'period_end', @month_end::timestamptz),
    'allotment.threshold:' || tenant_id || ':' || @month::text || ':' || percent
FROM crossed
ORDER BY tenant_id, percent
ON CONFLICT (idempotency_key) DO NOTHING;

-- name: EmitAlertResolutions :execrows
-- EmitAlertResolutions writes alert.resolved for every alert of the last
-- days (alerts of days from first_day) with no later alert of its subject
-- whose subject then went a whole UTC day (up to yesterday, the last one
-- that has ended) without a refusal: resolved_on is the first such day.
-- Once per alert (the idempotency key).
WITH open AS (
    SELECT a.tenant_id, a.policy, a.subject_key, a.day
    FROM alerts AS a
    WHERE a.day >= @first_day::date AND a.day < @yesterday::date
      AND NOT EXISTS (
          SELECT 1 FROM alerts AS later
          WHERE later.tenant_id = a.tenant_id AND later.policy = a.policy
            AND later.subject_key = a.subject_key AND later.day > a.day
      )
), quiet AS (
    SELECT o.*, (
        SELECT min(q.day)::date FROM generate_series(o.day + 1, @yesterday::date, interval '1 day') AS q (day)
        WHERE NOT EXISTS (
            SELECT 1 FROM refusal_hours AS h
            WHERE h.tenant_id = o.tenant_id AND h.policy = o.policy AND h.subject_key = o.subject_key
              AND h.hour >= q.day AT TIME ZONE 'UTC' AND h.hour < (q.day + interval '1 day') AT TIME ZONE 'UTC'
        )
    ) AS resolved_on
    FROM open AS o
)
INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
SELECT tenant_id, 'alert.resolved', jsonb_build_object(
    'policy', policy, 'subject_digest', subject_key, 'day', day, 'resolved_on', resolved_on),
    'alert.resolved:' || tenant_id || ':' || policy || ':' || subject_key || ':' || day
FROM quiet
WHERE resolved_on IS NOT NULL
ORDER BY tenant_id, policy, subject_key, day
ON CONFLICT (idempotency_key) DO NOTHING;

-- name: PruneWebhookEvents :execrows
-- PruneWebhookEvents deletes up to max_rows events made before before
-- whose deliveries are all settled, with their deliveries.
DELETE FROM webhook_events AS ev
WHERE ev.id IN (
    SELECT e.id FROM webhook_events AS e
    WHERE e.created_at < @before
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.event_id = e.id AND d.next_attempt_at IS NOT NULL)
    ORDER BY e.created_at
    LIMIT @max_rows
);

-- name: WebhookOutbox :one
-- WebhookOutbox counts the deliveries not settled (waiting, being sent, or
-- waiting to be tried again: the partial index of due deliveries), those
-- dropped for want of room, with the tenant of the last, and the enabled
-- endpoints with deliveries due whose secret was not sealed under key_id,
-- which an instance with that key does not claim.
SELECT
    (SELECT count(*) FROM webhook_deliveries WHERE next_attempt_at IS NOT NULL) AS unsettled,
    (SELECT count(*) FROM webhook_deliveries WHERE status = 'dropped') AS dropped,
    (SELECT d.tenant_id FROM webhook_deliveries AS d WHERE d.status = 'dropped'
     ORDER BY d.created_at DESC LIMIT 1) AS last_dropped_tenant,
    (SELECT count(*) FROM webhook_endpoints AS e
     WHERE e.enabled AND e.secret_key_id IS DISTINCT FROM @key_id
       AND EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.endpoint_id = e.id AND d.next_attempt_at <= now())
    ) AS other_key;

-- name: UnlabelledWebhookSecrets :many
-- UnlabelledWebhookSecrets are the secrets sealed before their key had an
-- id (migration 000024).
SELECT id, secret FROM webhook_endpoints WHERE secret_key_id IS NULL ORDER BY id;

-- name: LabelWebhookSecret :execrows
-- LabelWebhookSecret records the id of the key that opens an endpoint's
-- secret, unless the secret changed meanwhile.
UPDATE webhook_endpoints SET secret_key_id = @secret_key_id
WHERE id = @id AND secret = @secret AND secret_key_id IS NULL;
