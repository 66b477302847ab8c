-- An operator may disable a whole tenant (issue 41): while disabled_at is
-- set, every key of it is refused with 403 (after the key is proven
-- valid), its console members cannot sign in and their sessions stop
-- working. Nothing else changes: enabling (disabled_at back to NULL)
-- restores keys, policies, members and counters as they were.
-- disabled_reason is the operator's note, shown to operators only; ''
-- when none was given. The tenants trigger (000004) tells every instance's
-- cache of the change.
ALTER TABLE tenants
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN disabled_reason text NOT NULL DEFAULT '' CHECK (length(disabled_reason) <= 200);
