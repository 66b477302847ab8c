-- acquire.lua decides a lease request (counter.Acquire) in one script:
-- first its ceilings, with check.lua itself, as one request in consume
-- mode whose items are all ceilings; then, when every enforced ceiling is
-- admitted, a lease among at most limit live leases of its key. The store
-- runs it as leaselib.lua, then this, with check.lua put in place of the
-- include line below.
--
-- KEYS[1..n]      the ceilings' counter keys, as check.lua takes them
-- KEYS[n+1..n+3]  the group's LX, IDS and EXP keys (leaselib.lua)
-- ARGV[1..3+5n]   the ceilings, as check.lua takes them ("consume", now
--                 or '', n, then five values per item)
-- ARGV[4+5n..]    the lease id, key, tally ('' for none), limit, and ttl
--                 in µs
--
-- Returns check.lua's reply, then: 1 or 0 (the lease taken), the live
-- leases of the key after it (0 when a ceiling refused), and the lease's
-- expiry when taken, else the earliest expiry among the live leases (0
-- when none, or when a ceiling refused). An id the group still holds live
-- is an error reply: 'tollgate: lease id in use'.

local NCEIL = ARGV[3] + 0
local ALLKEYS = KEYS

-- ceilings runs check.lua on the ceilings' keys alone: check.lua reads
-- KEYS, which here is this local table.
local function ceilings()
  local KEYS = {}
  for i = 1, NCEIL do KEYS[i] = ALLKEYS[i] end
  -- @include check.lua
end

local lx, ids, exps = ALLKEYS[NCEIL + 1], ALLKEYS[NCEIL + 2], ALLKEYS[NCEIL + 3]
local b = 3 + 5 * NCEIL
local id, key, tally = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
local lim, ttl = ARGV[b + 4] + 0, ARGV[b + 5] + 0

-- An id in use is refused before anything is written: a script's error
-- does not undo its writes.
local held = redis.call('ZSCORE', exps, id)
if held and held + 0 > clock(2) then
  return redis.error_reply('ERR tollgate: lease id in use')
end

local out = ceilings()
if out.err then return out end
local nout = #out
for i = 1, NCEIL do
  if out[2 * i + 1] == 0 and ARGV[5 * i + 3] ~= '1' then
    out[nout + 1], out[nout + 2], out[nout + 3] = 0, 0, 0
    return out
  end
end

local now = out[1]
prune(lx, ids, exps, now)
-- An expired lease of the same id is forgotten.
forget(lx, ids, exps, id)
local kp = prefix('K', key)
local n, first = live(lx, kp, now)
if n < lim then
  local exp = now + ttl
  put(lx, ids, exps, id, key, tally, exp)
  keep(lx, ids, exps, now)
  out[nout + 1], out[nout + 2], out[nout + 3] = 1, n + 1, exp
else
  out[nout + 1], out[nout + 2], out[nout + 3] = 0, n, first or 0
end
return out
