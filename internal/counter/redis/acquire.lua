-- acquire.lua decides a lease request (counter.Acquire) in one script:
-- first its ceilings, with checklib.lua's decide, as one request in
-- consume mode whose items are all ceilings; then, when every enforced
-- ceiling is admitted, a lease among at most limit live leases of its key.
-- The store runs it as leaselib.lua, checklib.lua, then this.
--
-- KEYS[1..n]      the ceilings' counter keys
-- KEYS[n+1..n+3]  the group's LX, IDS and EXP keys (leaselib.lua)
-- ARGV[1]         the ceilings' request, laid out as checklib.lua says
-- ARGV[2..7]      the lease id, key, tally ('' for none), limit, ttl in
--                 µs, and the cap on the group's live leases (0: none)
--
-- Returns {reply, taken, live, expiry, full}: reply as check.lua's for the
-- one request; 1 or 0 (the lease taken); the live leases of the key after
-- it (0 when a ceiling refused); the lease's expiry when taken, else the
-- earliest expiry among the live leases (0 when none, or when a ceiling
-- refused); and 1 when refused because the group holds its cap of live
-- leases, else 0. An id the group still holds live is an error reply:
-- 'tollgate: lease id in use'; so is a ceiling's key that holds no
-- counter state.

local spec = ARGV[1]
local _, _, n, t = struct.unpack('<BBBd', spec)
-- The lease's instant, which decide uses for the ceilings too.
local now = t
if t < 0 then
  local c = redis.call('TIME')
  servernow = c[1] * 1000000 + c[2]
  now = servernow
end
local lx, ids, exps = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
local id, key, tally = ARGV[2], ARGV[3], ARGV[4]
local lim, ttl, glim = ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0

-- An id in use is refused before anything is written: a script's error
-- does not undo its writes.
local held = redis.call('ZSCORE', exps, id)
if held and held + 0 > now then
  return redis.error_reply('ERR tollgate: lease id in use')
end

local out = {struct.pack('<d', now)}
local nout, v, all = decide(spec, 1, KEYS, 0, out, 1)
if not nout then
  -- v is why.
  return redis.error_reply('ERR ' .. v)
end
flush()
local reply = table.concat(out, '', 1, nout)
if not all then
  return {reply, 0, 0, 0, 0}
end

prune(lx, ids, exps, now)
-- An expired lease of the same id is forgotten.
forget(lx, ids, exps, id)
local kp = prefix('K', key)
local live_n, first = live(lx, kp, now)
if live_n >= lim then
  return {reply, 0, live_n, first or 0, 0}
end
-- Every lease of the group is in EXP, by expiry: those after now are live.
if glim > 0 and redis.call('ZCOUNT', exps, '(' .. now, '+inf') >= glim then
  return {reply, 0, live_n, first or 0, 1}
end
local exp = now + ttl
put(lx, ids, exps, id, key, tally, exp)
keep(lx, ids, exps, now)
return {reply, 1, live_n + 1, exp, 0}
