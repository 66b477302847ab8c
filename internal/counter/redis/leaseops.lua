-- leaseops.lua renews, releases and counts leases, and resets a key; the
-- store runs it as leaselib.lua, then this.
--
-- KEYS[1..3]  the group's LX, IDS and EXP keys (leaselib.lua)
-- ARGV[1]     the operation, ARGV[2] now in Unix µs or '' for the server's
--             clock, then:
--   renew    ARGV[3] id, ARGV[4] ttl in µs; returns the new expiry, or 0
--            when the lease is not live
--   release  ARGV[3] id; returns 1 when the lease was live, else 0
--   held     ARGV[3..] tallies; returns the live leases of each
--   reset    KEYS[4] a counter key to delete, ARGV[3] the key whose
--            leases go, live or not; returns 0

local lx, ids, exps = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local now = clock(2)

if op == 'held' then
  local out = {}
  for i = 3, #ARGV do
    out[i - 2] = live(lx, prefix('T', ARGV[i]), now)
  end
  return out
end

if op == 'reset' then
  redis.call('DEL', KEYS[4])
  local p = prefix('K', ARGV[3])
  local ms = redis.call('ZRANGEBYLEX', lx, '[' .. p, '(' .. p .. 'g')
  for i = 1, #ms do
    forget(lx, ids, exps, string.sub(ms[i], #p + 18))
  end
  return 0
end

prune(lx, ids, exps, now)
if op == 'renew' then
  local id = ARGV[3]
  local e = redis.call('ZSCORE', exps, id)
  if not e then return 0 end
  if e + 0 <= now then
    forget(lx, ids, exps, id)
    return 0
  end
  local v = redis.call('HGET', ids, id)
  local c = string.find(v, ':', 1, true)
  local n = tonumber(string.sub(v, 1, c - 1))
  local km = string.sub(v, c + 1, c + n)
  local tm = string.sub(v, c + n + 1)
  -- The key and tally, as put wrote them: the K member is K..#key..':'..key
  -- then 16 hex digits, ':' and the id.
  local kp = string.sub(km, 1, #km - #id - 17)
  local key = string.sub(kp, string.find(kp, ':', 1, true) + 1)
  local tally = ''
  if tm ~= '' then
    local tp = string.sub(tm, 1, #tm - #id - 17)
    tally = string.sub(tp, string.find(tp, ':', 1, true) + 1)
  end
  forget(lx, ids, exps, id)
  local exp = now + ARGV[4]
  put(lx, ids, exps, id, key, tally, exp)
  keep(lx, ids, exps, now)
  return exp
elseif op == 'release' then
  local e = forget(lx, ids, exps, ARGV[3])
  keep(lx, ids, exps, now)
  if e and e > now then return 1 end
  return 0
end
return redis.error_reply('ERR tollgate: unknown lease operation')
