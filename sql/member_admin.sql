-- name: SetMemberDisabled :one
-- SetMemberDisabled disables a member of the tenant (keeping the first
-- instant it was disabled at) or enables it again.
UPDATE members
SET disabled_at = CASE WHEN @disabled::boolean THEN COALESCE(disabled_at, @now) END, updated_at = @now
WHERE id = @id AND tenant_id = @tenant_id
RETURNING *;
