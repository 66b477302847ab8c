ALTER TABLE policies
    DROP CONSTRAINT IF EXISTS policies_budget_check,
    DROP COLUMN IF EXISTS on_expiry,
    DROP COLUMN IF EXISTS unit;
