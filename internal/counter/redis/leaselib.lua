-- leaselib.lua is the part of the lease scripts (acquire.lua, leaseops.lua)
-- that both share: how a group's leases are laid out in its three keys, and
-- the helpers that keep them. The store prepends it to each.
--
-- A group's leases live in three keys that share its hash tag:
--
--   LX  a sorted set of score 0 ordered by its members' bytes: for each
--       lease, member K..#key..':'..key..EXP..':'..id, and when it has a
--       tally, member T..#tally..':'..tally..EXP..':'..id, where EXP is its
--       expiry in Unix µs as 16 hex digits (so that byte order is time
--       order). The live leases of a key are one range of members, from
--       its prefix and the hex of now+1 to its prefix and 'g' (past every
--       hex digit); the length in front of a key or tally keeps one from
--       reading as another's prefix, whatever their bytes.
--   IDS a hash: lease id -> #K-member..':'..K-member..T-member, so that a
--       lease found by its id can be taken out of LX.
--   EXP a sorted set: lease id, scored by its expiry, to find expired
--       leases to forget, oldest first.
--
-- A lease is live while its expiry is after now. Expired leases count for
-- nothing; each script that changes a group forgets up to PRUNE of them,
-- and the three keys expire GRACE_MS after the group's latest lease does.

local PRUNE = 16
local GRACE_MS = 1000

local function hex(us)
  return string.format('%016x', us)
end

-- prefix returns the members' prefix of key k in the K ('K') or T ('T')
-- range.
local function prefix(kind, k)
  return kind .. #k .. ':' .. k
end

-- forget takes lease id out of the three keys and returns its expiry (nil
-- when the group does not know it).
local function forget(lx, ids, exps, id)
  local e = redis.call('ZSCORE', exps, id)
  local v = redis.call('HGET', ids, id)
  if v then
    local c = string.find(v, ':', 1, true)
    local n = tonumber(string.sub(v, 1, c - 1))
    local km = string.sub(v, c + 1, c + n)
    local tm = string.sub(v, c + n + 1)
    if tm ~= '' then
      redis.call('ZREM', lx, km, tm)
    else
      redis.call('ZREM', lx, km)
    end
    redis.call('HDEL', ids, id)
  end
  redis.call('ZREM', exps, id)
  if e then return e + 0 end
  return nil
end

-- put records lease id of key (and tally, '' for none) with expiry exp.
local function put(lx, ids, exps, id, key, tally, exp)
  local km = prefix('K', key) .. hex(exp) .. ':' .. id
  local tm = ''
  if tally ~= '' then
    tm = prefix('T', tally) .. hex(exp) .. ':' .. id
    redis.call('ZADD', lx, 0, km, 0, tm)
  else
    redis.call('ZADD', lx, 0, km)
  end
  redis.call('HSET', ids, id, #km .. ':' .. km .. tm)
  redis.call('ZADD', exps, exp, id)
end

-- prune forgets up to PRUNE leases that expired by now.
local function prune(lx, ids, exps, now)
  local gone = redis.call('ZRANGEBYSCORE', exps, '-inf', now, 'LIMIT', 0, PRUNE)
  for i = 1, #gone do
    forget(lx, ids, exps, gone[i])
  end
end

-- keep sets the three keys to expire GRACE_MS after the group's latest
-- lease, reckoned from now (the request's clock, like check.lua's keys).
local function keep(lx, ids, exps, now)
  local last = redis.call('ZRANGE', exps, -1, -1, 'WITHSCORES')
  local ms = GRACE_MS
  if #last == 2 then
    local d = last[2] - now
    if d > 0 then
      local r = d % 1000
      ms = (d - r) / 1000 + GRACE_MS
      if r > 0 then ms = ms + 1 end
    end
  end
  redis.call('PEXPIRE', lx, ms)
  redis.call('PEXPIRE', ids, ms)
  redis.call('PEXPIRE', exps, ms)
end

-- live counts the live leases of the members' prefix p at now, and returns
-- the earliest expiry among them (nil when none).
local function live(lx, p, now)
  local lo, hi = '[' .. p .. hex(now + 1), '(' .. p .. 'g'
  local n = redis.call('ZLEXCOUNT', lx, lo, hi)
  if n == 0 then return 0, nil end
  local first = redis.call('ZRANGEBYLEX', lx, lo, hi, 'LIMIT', 0, 1)
  return n, tonumber(string.sub(first[1], #p + 1, #p + 16), 16)
end

-- clock returns the instant a script decides at: ARGV[i] in Unix µs, or
-- the server's clock when it is ''.
local function clock(i)
  if ARGV[i] == '' then
    local t = redis.call('TIME')
    return t[1] * 1000000 + t[2]
  end
  return ARGV[i] + 0
end
