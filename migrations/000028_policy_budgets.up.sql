-- A policy may describe a budget of reservations (POST /v1/reservations,
-- issue 40): the unit it counts, for display ("tokens", "cents"), and what
-- an unsettled reservation comes to at its expiry: kept at its full amount
-- ('settle') or given back ('release'). A concurrency policy holds leases,
-- not reservations, and keeps the defaults.
ALTER TABLE policies
    ADD COLUMN unit text NOT NULL DEFAULT '' CHECK (unit ~ '^[a-z_]{0,16}$'),
    ADD COLUMN on_expiry text NOT NULL DEFAULT 'settle' CHECK (on_expiry IN ('settle', 'release')),
    ADD CONSTRAINT policies_budget_check CHECK (algorithm <> 'concurrency' OR (unit = '' AND on_expiry = 'settle'));
