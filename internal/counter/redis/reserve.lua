-- reserve.lua reserves and settles (counter.Reserver); the store runs it
-- as checklib.lua, then this, so that a reservation's request is decided
-- by the checks' own arithmetic (decide) in the same script that records
-- it.
--
-- A group's reservations live in three keys that share its hash tag:
--
--   RV  a hash: reservation id -> its record (below)
--   RL  a sorted set of the live (unsettled) ids, scored by expiry (µs)
--   RS  a sorted set of the settled ids, scored by the instant until which
--       their outcome is kept
--
-- A record is packed little-endian (struct.pack): a header '<BBBddd' of
-- settled (0 or 1), release on expiry (0 or 1), n charges, expiry, used and
-- the settlement's instant; then per charge '<BddddddddH' of algorithm,
-- limit, window, amount, the start of the window charged (the state's
-- Start after the charge), the counter's state once settled (start, count,
-- prev, tat: zero until then), the length of its counter key and the key.
-- The counter keys are the group's (prefix{group}:key): a settlement reads
-- and writes them by the names in the record, which share the hash tag of
-- the script's declared keys, so on a cluster they are in its slot.
--
-- Every call first deals with the group's reservations due by now: a
-- live one past its expiry is dropped, giving its amounts back at its
-- expiry instant when it releases on expiry (adjust, as a settlement of 0
-- would); a settled one no longer kept is forgotten. So an expiry is
-- applied once, by whichever call of any instance comes first, in order of
-- expiry then id.
--
-- reserve  KEYS[1..n] the request's counter keys, KEYS[n+1..n+3] RV, RL,
--          RS; ARGV[2] the request (checklib.lua), ARGV[3] the id,
--          ARGV[4] the ttl (µs), ARGV[5] 1 to release on expiry,
--          ARGV[6] the cap on live reservations (0: none). Returns
--          {reply, held, full, expiry}: reply as check.lua's for the one
--          request, 1 when the reservation is held, 1 when the group was
--          full (the request then decided as a peek), its expiry or 0.
--          An id the group holds is an error reply, 'tollgate:
--          reservation id in use'.
-- settle   KEYS[1..3] RV, RL, RS; ARGV[2] now in Unix µs or '' for the
--          server's clock, ARGV[3] the id, ARGV[4] used. Returns {0} when
--          there is no such reservation, else {status, record} with
--          status 1 settled now, 2 settled before with the same used, 3
--          settled before with another; the record as settled.
-- read     KEYS[1..3] RV, RL, RS; ARGV[2] now in Unix µs or '' for the
--          server's clock, ARGV[3] the id. Returns {} when the group
--          holds no such reservation at now (never made, expired
--          unsettled, its outcome no longer kept), else {record}. It
--          writes nothing: what is due is left to the next reserve or
--          settle.
-- reserved KEYS[1..2] RV, RL; ARGV[2] now as for settle, ARGV[3..] counter
--          keys. Returns per key the sum of the amounts the live
--          reservations (expiring after now) hold on it. It writes nothing.
--
-- ARGV[5] of settle is how long a settled outcome is kept at least (µs),
-- ARGV[6] how many the group keeps at most (counter.SettleRef.KeptLimit).
-- The three keys expire a second after the last outcome kept, or 61 days
-- after the last live expiry (a release due then still gives back to a
-- sliding window of 30 days) when nobody touches the group before.

local LIVE_GRACE_MS = 61 * 86400000
local GRACE_MS = 1000
local ZERO = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'

-- px is the PX of a key whose state means nothing after exp (µs), from now.
local function px(exp, now, grace)
  local d = exp - now
  local r = d % 1000
  local ms = (d - r) / 1000 + grace
  if r > 0 then ms = ms + 1 end
  if ms < 1 then ms = 1 end
  return ms
end

-- adjust is limit.Adjust on the packed state cur; it returns the new
-- packed state and limit.Expiry of it.
local function adjust(alg, cur, now, delta, charged, lim, w)
  local start, count, prev, tat = struct.unpack('<dddd', cur)
  local exp
  if alg == 2 then
    local s = now - now % w
    if start >= s then
      -- The same window, or a later one seen by a clock that ran ahead.
    elseif start == s - w then
      start, count, prev, tat = s, 0, count, 0
    else
      start, count, prev, tat = s, 0, 0, 0
    end
    if delta >= 0 then
      count = count + delta
    elseif charged == start then
      count = count + delta
      if count < 0 then count = 0 end
    elseif charged == start - w then
      prev = prev + delta
      if prev < 0 then prev = 0 end
    end
    exp = start + 2 * w
  elseif alg == 3 then
    local m = now
    if start > m then m = start end
    local interval = w / lim
    local off = tat - (m - start)
    if off < 0 then off = 0 end
    off = off + interval * delta
    if off < 0 then off = 0 end
    start, count, prev, tat = m, 0, 0, off
    local r = off % 1
    exp = m + (off - r)
    if r > 0 then exp = exp + 1 end
  else
    local s
    if w <= 0 then
      s = period(now, -w)
    else
      s = now - now % w
    end
    if start >= s then s = start else count = 0 end
    if delta >= 0 then
      count = count + delta
    elseif charged == s then
      count = count + delta
      if count < 0 then count = 0 end
    end
    start, prev, tat = s, 0, 0
    if w > 0 then
      exp = s - s % w + w
    else
      local _
      _, exp = period(s, -w)
    end
  end
  return struct.pack('<dddd', start, count, prev, tat), exp
end

-- apply adjusts the counters of record rec's charges, in order, by used
-- in place of each amount (release: by minus each amount) at instant at,
-- writing them with PX reckoned from now, and returns the record as
-- settled with used at at.
local function apply(rec, at, now, used, release)
  local _, rel, n, exp, _, _, pos = struct.unpack('<BBBddd', rec)
  local out = {struct.pack('<BBBddd', 1, rel, n, exp, used, at)}
  for i = 1, n do
    local alg, lim, w, amt, chg, kl
    alg, lim, w, amt, chg, _, _, _, _, kl, pos = struct.unpack('<BddddddddH', rec, pos)
    local key = string.sub(rec, pos, pos + kl - 1)
    pos = pos + kl
    local cur = redis.call('GET', key)
    if cur == false then cur = ZERO end
    if #cur ~= 32 then
      return nil, 'tollgate: malformed counter state at ' .. key
    end
    local delta = used - amt
    if release then delta = -amt end
    local st, sexp = adjust(alg, cur, at, delta, chg, lim, w)
    redis.call('SET', key, st, 'PX', px(sexp, now, GRACE_MS))
    out[i + 1] = struct.pack('<Bdddd', alg, lim, w, amt, chg) .. st .. struct.pack('<H', kl) .. key
  end
  return table.concat(out)
end

-- expire deals with the group's reservations due by now.
local function expire(rv, rl, rs, now)
  local gone = redis.call('ZRANGEBYSCORE', rs, '-inf', now)
  for i = 1, #gone do
    redis.call('HDEL', rv, gone[i])
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', rs, '-inf', now) end
  local due = redis.call('ZRANGEBYSCORE', rl, '-inf', now, 'WITHSCORES')
  for i = 1, #due, 2 do
    local rec = redis.call('HGET', rv, due[i])
    if rec and string.byte(rec, 2) == 1 then
      local _, err = apply(rec, due[i + 1] + 0, now, 0, true)
      if err then return err end
    end
    redis.call('HDEL', rv, due[i])
  end
  if #due > 0 then redis.call('ZREMRANGEBYSCORE', rl, '-inf', now) end
  return nil
end

-- keep sets the three keys to expire after what they hold, from now.
local function keep(rv, rl, rs, now)
  local ms = 0
  local last = redis.call('ZRANGE', rl, -1, -1, 'WITHSCORES')
  if #last == 2 then ms = px(last[2] + 0, now, LIVE_GRACE_MS) end
  last = redis.call('ZRANGE', rs, -1, -1, 'WITHSCORES')
  if #last == 2 then
    local s = px(last[2] + 0, now, GRACE_MS)
    if s > ms then ms = s end
  end
  if ms > 0 then
    redis.call('PEXPIRE', rv, ms)
    redis.call('PEXPIRE', rl, ms)
    redis.call('PEXPIRE', rs, ms)
  end
end

if ARGV[1] == 'reserve' then
  local spec = ARGV[2]
  local _, nceil, n, t = struct.unpack('<BBBd', spec)
  local now = t
  if t < 0 then
    local c = redis.call('TIME')
    servernow = c[1] * 1000000 + c[2]
    now = servernow
  end
  local rv, rl, rs = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
  local id, ttl, rel, glim = ARGV[3], ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
  local err = expire(rv, rl, rs, now)
  if err then return redis.error_reply('ERR ' .. err) end
  -- Refused before anything is written: a script's error does not undo
  -- its writes.
  if redis.call('HEXISTS', rv, id) == 1 then
    return redis.error_reply('ERR tollgate: reservation id in use')
  end
  local full = 0
  if glim > 0 and redis.call('ZCARD', rl) >= glim then
    -- The ceilings count as a check's, the policies are not charged: the
    -- request is decided as a peek.
    full = 1
    spec = '\1' .. string.sub(spec, 2)
  end
  local out = {struct.pack('<d', now)}
  local nout, v, all = decide(spec, 1, KEYS, 0, out, 1)
  if not nout then
    -- v is why.
    return redis.error_reply('ERR ' .. v)
  end
  flush()
  local reply = table.concat(out, '', 1, nout)
  if not all or full == 1 then
    keep(rv, rl, rs, now)
    return {reply, 0, full, 0}
  end
  -- The policy items admitted are charged: each with the start of the
  -- state its own admission left (work, decide's), the window charged.
  local exp = now + ttl
  local parts, m = {}, 0
  local pos = 12 + 26 * nceil
  for i = nceil + 1, n do
    local alg, lim, w, cost
    alg, _, lim, w, cost, pos = struct.unpack('<BBddd', spec, pos)
    if out[2 * i + 1] == '\1' then
      m = m + 1
      local chg = struct.unpack('<d', work[3 * i - 1])
      local key = KEYS[i]
      parts[m + 1] = struct.pack('<Bdddd', alg, lim, w, cost, chg) .. ZERO .. struct.pack('<H', #key) .. key
    end
  end
  parts[1] = struct.pack('<BBBddd', 0, rel, m, exp, 0, 0)
  redis.call('HSET', rv, id, table.concat(parts))
  redis.call('ZADD', rl, exp, id)
  keep(rv, rl, rs, now)
  return {reply, 1, 0, exp}
elseif ARGV[1] == 'settle' then
  local rv, rl, rs = KEYS[1], KEYS[2], KEYS[3]
  local now
  if ARGV[2] == '' then
    local c = redis.call('TIME')
    now = c[1] * 1000000 + c[2]
  else
    now = ARGV[2] + 0
  end
  local id, used, kept = ARGV[3], ARGV[4] + 0, ARGV[5] + 0
  local err = expire(rv, rl, rs, now)
  if err then return redis.error_reply('ERR ' .. err) end
  local rec = redis.call('HGET', rv, id)
  if not rec then
    keep(rv, rl, rs, now)
    return {0}
  end
  if string.byte(rec, 1) == 1 then
    local _, _, _, _, was = struct.unpack('<BBBdd', rec)
    if was == used then return {2, rec} end
    return {3, rec}
  end
  local done
  done, err = apply(rec, now, now, used, false)
  if not done then return redis.error_reply('ERR ' .. err) end
  local _, _, _, exp = struct.unpack('<BBBd', rec)
  local until_ = now + kept
  if exp > until_ then until_ = exp end
  redis.call('HSET', rv, id, done)
  redis.call('ZREM', rl, id)
  redis.call('ZADD', rs, until_, id)
  -- Past the group's share of kept outcomes (ARGV[6], 0: none), its
  -- oldest are forgotten (by score, then id), never this one.
  local kmax = tonumber(ARGV[6]) or 0
  local over = redis.call('ZCARD', rs) - kmax
  if kmax > 0 and over > 0 then
    local old = redis.call('ZRANGE', rs, 0, over)
    for j = 1, #old do
      if over > 0 and old[j] ~= id then
        redis.call('ZREM', rs, old[j])
        redis.call('HDEL', rv, old[j])
        over = over - 1
      end
    end
  end
  keep(rv, rl, rs, now)
  return {1, done}
elseif ARGV[1] == 'read' then
  local rv, rs = KEYS[1], KEYS[3]
  local now
  if ARGV[2] == '' then
    local c = redis.call('TIME')
    now = c[1] * 1000000 + c[2]
  else
    now = ARGV[2] + 0
  end
  local id = ARGV[3]
  local rec = redis.call('HGET', rv, id)
  if not rec then return {} end
  if string.byte(rec, 1) == 1 then
    local until_ = redis.call('ZSCORE', rs, id)
    if not until_ or tonumber(until_) <= now then return {} end
  else
    local _, _, _, exp = struct.unpack('<BBBd', rec)
    if exp <= now then return {} end
  end
  return {rec}
elseif ARGV[1] == 'reserved' then
  -- Reads only: the expiries due are left to the next reserve or settle.
  local rv, rl = KEYS[1], KEYS[2]
  local now
  if ARGV[2] == '' then
    local c = redis.call('TIME')
    now = c[1] * 1000000 + c[2]
  else
    now = ARGV[2] + 0
  end
  local sums, at = {}, {}
  for i = 3, #ARGV do
    sums[i - 2] = 0
    at[ARGV[i]] = true
  end
  local live = redis.call('ZRANGEBYSCORE', rl, '(' .. now, '+inf')
  for j = 1, #live do
    local rec = redis.call('HGET', rv, live[j])
    if rec and string.byte(rec, 1) == 0 then
      local _, _, n, _, _, _, pos = struct.unpack('<BBBddd', rec)
      for _ = 1, n do
        local amt, kl
        _, _, _, amt, _, _, _, _, _, kl, pos = struct.unpack('<BddddddddH', rec, pos)
        local key = string.sub(rec, pos, pos + kl - 1)
        pos = pos + kl
        if at[key] then
          for i = 3, #ARGV do
            if ARGV[i] == key then sums[i - 2] = sums[i - 2] + amt end
          end
        end
      end
    end
  end
  return sums
elseif ARGV[1] == 'charge' then
  -- counter.Charger: KEYS[i] is item i's counter, ARGV[2] the request
  -- (checklib.lua's layout; advisory ignored). Each cost is added with
  -- adjust, in order, past the limit if need be. Returns {now, the state
  -- after each item, 32 bytes each}.
  local spec = ARGV[2]
  local _, _, n, t, pos = struct.unpack('<BBBd', spec)
  local now = t
  if t < 0 then
    local c = redis.call('TIME')
    now = c[1] * 1000000 + c[2]
  end
  local out = {}
  for i = 1, n do
    local alg, lim, w, cost
    alg, _, lim, w, cost, pos = struct.unpack('<BBddd', spec, pos)
    local cur = redis.call('GET', KEYS[i])
    if cur == false then cur = ZERO end
    if #cur ~= 32 then
      return redis.error_reply('ERR tollgate: malformed counter state at ' .. KEYS[i])
    end
    local st, exp = adjust(alg, cur, now, cost, 0, lim, w)
    redis.call('SET', KEYS[i], st, 'PX', px(exp, now, GRACE_MS))
    out[i] = st
  end
  return {now, table.concat(out)}
end
return redis.error_reply('ERR tollgate: unknown reservation operation')
