-- name: CountRefusals :many
-- CountRefusals adds refusals per (tenant, policy, subject key, hour). Run it
-- in the transaction that claimed the batch id (ClaimBatch) and locked the
-- tenants' days (LockAlertDays). A subject gets counts of its own on a UTC
-- day when it has some that day already, or while its tenant's day has room
-- for more watched subjects (as given per tenant and day, taken in order of
-- time); the refusals of the others, and rows whose subject key is already
-- '*', are added to their policy's aggregate row of the hour (subject key
-- '*'), so that one tenant's rows stay bounded whatever its subjects and
-- every refusal is counted. The arrays are parallel and name each row at
-- most once; rows are upserted in key order so that concurrent calls cannot
-- deadlock; rows of tenants that no longer exist are dropped. It returns,
-- per subject (not '*'), whether it is watched that day.
WITH input AS (
    SELECT i.tenant_id, i.policy, i.subject_key, i.hour, i.day, i.refusals
    FROM (SELECT
        unnest(@tenant_ids::uuid[]) AS tenant_id,
        unnest(@policies::text[]) AS policy,
        unnest(@subject_keys::text[]) AS subject_key,
        unnest(@hours::timestamptz[]) AS hour,
        unnest(@days::timestamptz[]) AS day,
        unnest(@refusals::bigint[]) AS refusals
    ) AS i
    WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
), room AS (
    SELECT
        unnest(@room_tenant_ids::uuid[]) AS tenant_id,
        unnest(@room_days::timestamptz[]) AS day,
        unnest(@rooms::bigint[]) AS room
), subjects AS (
    -- Each probe of "counted that day already" is a range of the primary key.
    SELECT i.tenant_id, i.policy, i.subject_key, i.day, min(i.hour) AS first_hour,
        (i.subject_key = '*' OR EXISTS (
            SELECT 1 FROM refusal_hours AS h
            WHERE h.tenant_id = i.tenant_id AND h.policy = i.policy AND h.subject_key = i.subject_key
              AND h.hour >= i.day AND h.hour < i.day + interval '1 day'
        )) AS known
    FROM input AS i
    GROUP BY i.tenant_id, i.policy, i.subject_key, i.day
), judged AS (
    SELECT s.tenant_id, s.policy, s.subject_key, s.day, s.known,
        (s.known OR row_number() OVER (PARTITION BY s.tenant_id, s.day, s.known ORDER BY s.first_hour, s.policy, s.subject_key) <= r.room) AS watched
    FROM subjects AS s
    JOIN room AS r ON r.tenant_id = s.tenant_id AND r.day = s.day
), counted AS (
    INSERT INTO refusal_hours AS h (tenant_id, policy, subject_key, hour, refusals)
    SELECT c.tenant_id, c.policy, c.subject_key, c.hour, sum(c.refusals)::bigint
    FROM (
        SELECT i.tenant_id, i.policy, CASE WHEN j.watched THEN i.subject_key ELSE '*' END AS subject_key, i.hour, i.refusals
        FROM input AS i
        JOIN judged AS j
          ON j.tenant_id = i.tenant_id AND j.policy = i.policy AND j.subject_key = i.subject_key AND j.day = i.day
    ) AS c
    GROUP BY c.tenant_id, c.policy, c.subject_key, c.hour
    ORDER BY c.tenant_id, c.policy, c.subject_key, c.hour
    ON CONFLICT (tenant_id, policy, subject_key, hour)
    DO UPDATE SET refusals = h.refusals + EXCLUDED.refusals
), spent AS (
    UPDATE alert_days AS d
    SET watched = d.watched + n.watched
    FROM (
        SELECT j.tenant_id, (j.day AT TIME ZONE 'UTC')::date AS day, count(*)::integer AS watched
        FROM judged AS j
        WHERE j.watched AND NOT j.known
        GROUP BY j.tenant_id, j.day
    ) AS n
    WHERE d.tenant_id = n.tenant_id AND d.day = n.day
)
SELECT j.tenant_id::uuid AS tenant_id, j.policy::text AS policy, j.subject_key::text AS subject_key,
    j.day::timestamptz AS day, j.watched::boolean AS watched
FROM judged AS j
WHERE j.subject_key <> '*';

-- name: LockAlertDays :many
-- LockAlertDays makes the row of each (tenant, day) and locks it until the
-- transaction ends, in key order, so that one tenant's alert budget of a day
-- is spent by one flush at a time whatever the number of instances; it
-- returns the alerts raised so far. The pairs must be distinct; tenants that
-- no longer exist are left out.
INSERT INTO alert_days AS d (tenant_id, day)
SELECT i.tenant_id, i.day
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@days::date[]) AS day
) AS i
WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.day
ON CONFLICT (tenant_id, day) DO UPDATE SET raised = d.raised
RETURNING d.tenant_id, d.day, d.raised, d.watched;

-- name: RaiseAlerts :one
-- RaiseAlerts raises or updates the alert of each (tenant, policy, subject
-- key) whose refusals in the 24 hourly buckets up to at (the bucket of at and
-- the 23 before it) reach alert_after: one row per UTC day of at. A subject
-- that has no alert that day gets one only while its tenant's day has room
-- (as given per tenant and day, taken in order of time); past that, it is
-- counted once in its policy's aggregate alert of the day (subject_key '*',
-- subjects the number of them). Run it in the transaction that locked the
-- days (LockAlertDays), after CountRefusals has committed, so that it sees
-- the counts of every instance committed before it and the alerts of every
-- flush that spent the day's budget before. Returns the number of alerts
-- raised or updated, aggregates included.
WITH input AS (
    SELECT i.tenant_id, i.policy, i.subject_key, i.alert_after, i.at, i.day, i.shadow
    FROM (SELECT
        unnest(@tenant_ids::uuid[]) AS tenant_id,
        unnest(@policies::text[]) AS policy,
        unnest(@subject_keys::text[]) AS subject_key,
        unnest(@alert_after::bigint[]) AS alert_after,
        unnest(@ats::timestamptz[]) AS at,
        unnest(@days::date[]) AS day,
        unnest(@shadow::boolean[]) AS shadow
    ) AS i
    WHERE i.alert_after > 0 AND i.subject_key <> '*'
      AND EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
), room AS (
    SELECT
        unnest(@room_tenant_ids::uuid[]) AS tenant_id,
        unnest(@room_days::date[]) AS day,
        unnest(@rooms::bigint[]) AS room
), reached AS (
    SELECT i.tenant_id, i.policy, i.subject_key, i.alert_after, i.at, i.day, i.shadow, s.total, r.room,
        EXISTS (
            SELECT 1 FROM alerts AS a
            WHERE a.tenant_id = i.tenant_id AND a.policy = i.policy
              AND a.subject_key = i.subject_key AND a.day = i.day
        ) AS known
    FROM input AS i
    JOIN room AS r ON r.tenant_id = i.tenant_id AND r.day = i.day
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(h.refusals), 0)::bigint AS total
        FROM refusal_hours AS h
        WHERE h.tenant_id = i.tenant_id AND h.policy = i.policy AND h.subject_key = i.subject_key
          AND h.hour > i.at - interval '24 hours' AND h.hour <= i.at
    ) AS s
    WHERE s.total >= i.alert_after
), ranked AS (
    SELECT reached.*,
        row_number() OVER (PARTITION BY tenant_id, day, known ORDER BY at, policy, subject_key) AS rank
    FROM reached
), listed AS (
    INSERT INTO alerts AS a (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow)
    SELECT tenant_id, policy, subject_key, day, at, at, total, alert_after, shadow
    FROM ranked
    WHERE known OR rank <= room
    ORDER BY tenant_id, policy, subject_key, day
    ON CONFLICT (tenant_id, policy, subject_key, day) DO UPDATE SET
        first_at = least(a.first_at, EXCLUDED.first_at),
        last_at = greatest(a.last_at, EXCLUDED.last_at),
        count = CASE WHEN EXCLUDED.last_at >= a.last_at THEN EXCLUDED.count ELSE a.count END,
        alert_after = EXCLUDED.alert_after,
        shadow = EXCLUDED.shadow
    RETURNING 1
), spent AS (
    UPDATE alert_days AS d
    SET raised = d.raised + n.raised
    FROM (
        SELECT tenant_id, day, count(*)::integer AS raised
        FROM ranked
        WHERE NOT known AND rank <= room
        GROUP BY tenant_id, day
    ) AS n
    WHERE d.tenant_id = n.tenant_id AND d.day = n.day
), over AS (
    -- Subjects past the budget that no aggregate counts yet. The lock on
    -- the day keeps other flushes from counting them meanwhile, so the
    -- snapshot's answer holds; each is a probe of the primary key.
    SELECT r.tenant_id, r.policy, r.subject_key, r.day, r.at, r.total, r.alert_after, r.shadow
    FROM ranked AS r
    WHERE NOT r.known AND r.rank > r.room
      AND NOT EXISTS (
          SELECT 1 FROM alert_overflow AS x
          WHERE x.tenant_id = r.tenant_id AND x.policy = r.policy
            AND x.subject_key = r.subject_key AND x.day = r.day
      )
), counted AS (
    INSERT INTO alert_overflow (tenant_id, policy, subject_key, day)
    SELECT tenant_id, policy, subject_key, day FROM over
    ORDER BY tenant_id, policy, subject_key, day
    ON CONFLICT DO NOTHING
), grouped AS (
    INSERT INTO alerts AS a (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow, subjects)
    SELECT tenant_id, policy, '*', day, min(at), max(at), sum(total)::bigint,
        max(alert_after), bool_and(shadow), count(*)
    FROM over
    GROUP BY tenant_id, policy, day
    ORDER BY tenant_id, policy, day
    ON CONFLICT (tenant_id, policy, subject_key, day) DO UPDATE SET
        first_at = least(a.first_at, EXCLUDED.first_at),
        last_at = greatest(a.last_at, EXCLUDED.last_at),
        count = a.count + EXCLUDED.count,
        subjects = a.subjects + EXCLUDED.subjects,
        alert_after = EXCLUDED.alert_after,
        shadow = EXCLUDED.shadow
    RETURNING 1
)
SELECT ((SELECT count(*) FROM listed) + (SELECT count(*) FROM grouped))::bigint AS alerts;

-- name: SetUnwatchedAlerts :execrows
-- SetUnwatchedAlerts makes each (tenant, policy, day) whose aggregate hourly
-- counts (subject key '*': subjects past the day's watch budget) hold
-- refusals show them in its aggregate alert of the day, made when absent
-- (counting no subject past the alert budget then). A day's unwatched
-- refusals only grow, so the larger of two sums wins. The triples must be
-- distinct; days are the UTC midnights; tenants that no longer exist are
-- left out.
WITH input AS (
    SELECT
        unnest(@tenant_ids::uuid[]) AS tenant_id,
        unnest(@policies::text[]) AS policy,
        unnest(@days::timestamptz[]) AS day,
        unnest(@first_ats::timestamptz[]) AS first_at,
        unnest(@last_ats::timestamptz[]) AS last_at,
        unnest(@alert_after::bigint[]) AS alert_after,
        unnest(@shadow::boolean[]) AS shadow
), sums AS (
    SELECT i.tenant_id, i.policy, i.day, i.first_at, i.last_at, i.alert_after, i.shadow, s.unwatched
    FROM input AS i
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(h.refusals), 0)::bigint AS unwatched
        FROM refusal_hours AS h
        WHERE h.tenant_id = i.tenant_id AND h.policy = i.policy AND h.subject_key = '*'
          AND h.hour >= i.day AND h.hour < i.day + interval '1 day'
    ) AS s
    WHERE s.unwatched > 0 AND i.alert_after > 0
      AND EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
)
INSERT INTO alerts AS a (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow, subjects, unwatched)
SELECT tenant_id, policy, '*', (day AT TIME ZONE 'UTC')::date, first_at, last_at, 0, alert_after, shadow, 0, unwatched
FROM sums
ORDER BY tenant_id, policy, day
ON CONFLICT (tenant_id, policy, subject_key, day) DO UPDATE SET
    first_at = least(a.first_at, EXCLUDED.first_at),
    last_at = greatest(a.last_at, EXCLUDED.last_at),
    unwatched = greatest(a.unwatched, EXCLUDED.unwatched),
    alert_after = EXCLUDED.alert_after,
    shadow = EXCLUDED.shadow;

-- name: ListAlerts :many
-- ListAlerts returns a tenant's alerts whose last refusal is at or after
-- since, latest first.
SELECT policy, subject_key, day, first_at, last_at, count, alert_after, shadow, subjects, unwatched
FROM alerts
WHERE tenant_id = @tenant_id AND last_at >= @since
ORDER BY last_at DESC, policy, subject_key
LIMIT @max_rows;

-- name: PruneRefusalHours :execrows
-- PruneRefusalHours deletes up to max_rows hourly counts older than before.
DELETE FROM refusal_hours AS h
USING (
    SELECT tenant_id, policy, subject_key, hour FROM refusal_hours
    WHERE refusal_hours.hour < @before
    ORDER BY hour
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE h.tenant_id = old.tenant_id AND h.policy = old.policy
  AND h.subject_key = old.subject_key AND h.hour = old.hour;

-- name: PruneAlerts :execrows
-- PruneAlerts deletes up to max_rows alerts whose latest refusal counted is
-- before before. No index leads with last_at, so the rows are not ordered:
-- the scan stops at the first max_rows it finds.
DELETE FROM alerts AS a
USING (
    SELECT tenant_id, policy, subject_key, day FROM alerts
    WHERE alerts.last_at < @before
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE a.tenant_id = old.tenant_id AND a.policy = old.policy
  AND a.subject_key = old.subject_key AND a.day = old.day;

-- name: PruneAlertDays :execrows
-- PruneAlertDays deletes up to max_rows alert budget rows of days before
-- before.
DELETE FROM alert_days AS d
USING (
    SELECT tenant_id, day FROM alert_days
    WHERE alert_days.day < @before::date
    ORDER BY day
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE d.tenant_id = old.tenant_id AND d.day = old.day;

-- name: PruneAlertOverflow :execrows
-- PruneAlertOverflow deletes up to max_rows subjects counted in aggregate
-- alerts of days before before.
DELETE FROM alert_overflow AS o
USING (
    SELECT tenant_id, policy, subject_key, day FROM alert_overflow
    WHERE alert_overflow.day < @before::date
    ORDER BY day
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE o.tenant_id = old.tenant_id AND o.policy = old.policy
  AND o.subject_key = old.subject_key AND o.day = old.day;
