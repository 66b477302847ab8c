-- check.lua decides one all-or-nothing batch of counter items atomically, in
-- two tiers when the first items are ceilings (counter.Request.Ceilings),
-- where advisory items (counter.Item.Advisory) never fail a tier.
-- It reproduces limit.Admit (internal/limit/limit.go) in the same order of
-- floating-point operations; Lua numbers are IEEE doubles, so integers below
-- 2^53 (every instant and product limit.MaxLimit allows) are exact, and so
-- is Lua's a % b (a - floor(a/b)*b) for such integers.
--
-- KEYS[i]  the counter key of item i (several items may share a key)
-- ARGV[1]  "consume" or "peek"
-- ARGV[2]  now in Unix microseconds, or "" for the server's clock
-- ARGV[3]  how many of the first items are ceilings (0 to #KEYS)
-- ARGV[5i-1], ARGV[5i], ARGV[5i+1], ARGV[5i+2], ARGV[5i+3]  item i:
--          algorithm (1 fixed, 2 sliding, 3 token bucket), limit, window in
--          microseconds (0 = calendar month UTC), cost, and 1 when it is
--          advisory (else 0)
--
-- A key holds its limit.State as 32 bytes, the little-endian doubles start,
-- count, prev and tat (struct.pack '<dddd'): exact, tat included, and read
-- and written in one call each. Text ("start count prev tat", %.17g) needed
-- string.match, four tonumber and string.format per key; the packed form ran
-- 1.4 (one item) to 1.7 (four items) times as many scripts per second.
--
-- Returns {now, then per item: state, admitted}: the state the item saw (as
-- stored; after earlier admitted items of the batch on the same key, ceilings
-- or not; 32 zero bytes for a new counter) and 1 or 0. Every key is written
-- when every enforced (not advisory) item is admitted in consume mode;
-- otherwise, when every enforced ceiling is admitted (in either mode), the
-- ceilings' keys are written with the states the ceilings left; otherwise
-- nothing is. A refused item consumes nothing, so a key that only refused
-- (advisory) items named keeps its bytes and its expiry.
--
-- The script runs for every check, so it avoids what costs most in Redis's
-- Lua: calls into C (math.*, tonumber, string.format), tables, and
-- redis.call beyond one GET and one SET per key.

local ZERO = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'
local DAY = 86400000000

-- GRACE_MS outlives a key's expiry (limit.Expiry), past which its state no
-- longer matters. Expiry is reckoned in the request's clock but Redis
-- expires keys by its own: the grace covers a caller-given now that advances
-- slower than real time (tests step by microseconds while milliseconds pass)
-- and a server clock stepped back. A late expiry costs only memory.
local GRACE_MS = 1000

-- month returns the UTC calendar month around t (µs): Howard Hinnant's
-- civil_from_days, with floor division written (x - x % k) / k.
local function month(t)
  local z = (t - t % DAY) / DAY + 719468
  local doe = z % 146097
  local era = (z - doe) / 146097
  local a = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524 - (doe - doe % 146096) / 146096
  local yoe = (a - a % 365) / 365
  local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
  local b = 5 * doy + 2
  local mp = (b - b % 153) / 153
  local c = 153 * mp + 2
  local d = doy - (c - c % 5) / 5 + 1
  local y = yoe + era * 400
  local m, days
  if mp < 10 then m = mp + 3 else m = mp - 9; y = y + 1 end
  if m == 2 then
    if (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 then days = 29 else days = 28 end
  elseif m == 4 or m == 6 or m == 9 or m == 11 then
    days = 30
  else
    days = 31
  end
  local start = (t - t % DAY) - (d - 1) * DAY
  return start, start + days * DAY
end

local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = ARGV[2] + 0
end
local consume = ARGV[1] == 'consume'
local nceil = ARGV[3] + 0

-- The month around now, worked out once per batch.
local mstart, mend

local states = {} -- key -> its working state, packed
local ttls = {}   -- key -> PX for the state after its last item
local order = {}  -- keys in order of first use
local out = {now}
local nout = 1
-- Whether every enforced (not advisory) item so far was admitted.
local all = true
-- What the ceilings leave, once they are all admitted: the first nkept keys
-- of order, their states and expiries. Tables are made only then.
local nkept = 0
local kstates, kttls
for i = 1, #KEYS do
  local key = KEYS[i]
  local cur = states[key]
  if cur == nil then
    cur = redis.call('GET', key) or ZERO
    if #cur ~= 32 then
      return redis.error_reply('ERR tollgate: malformed counter state at ' .. key)
    end
    order[#order + 1] = key
  end
  local start, count, prev, tat = struct.unpack('<dddd', cur)
  local alg, lim, w, cost = ARGV[5 * i - 1] + 0, ARGV[5 * i] + 0, ARGV[5 * i + 1] + 0, ARGV[5 * i + 2] + 0
  local ok, ns, nc, np, nt, exp
  if alg == 2 then
    -- limit.slidingStep: prev·((w−elapsed)/w) + curr.
    local s, c, p, q = now - now % w, 0, 0, 0
    if start >= s then
      s, c, p, q = start, count, prev, tat
    elseif start == s - w then
      p = count
    end
    local elapsed = now - s
    if elapsed < 0 then elapsed = 0 end
    local est = p * ((w - elapsed) / w) + c
    ok = est + cost <= lim
    if ok then
      ns, nc, np, nt = s, c + cost, p, q
      exp = s + 2 * w
    end
  elseif alg == 3 then
    -- limit.gcraStep, with limit.gcraCapacity: the window plus
    -- interval/2^20 of slack for the rounding of w/limit.
    local n = now
    if start > n then n = start end
    local interval = w / lim
    local off = tat - (n - start)
    if off < 0 then off = 0 end
    local nxt = off + interval * cost
    ok = nxt <= w + interval / 1048576
    if ok then
      ns, nc, np, nt = n, 0, 0, nxt
      -- n + ceil(nxt), adding whole numbers only so that it stays exact.
      local r = nxt % 1
      exp = n + (nxt - r)
      if r > 0 then exp = exp + 1 end
    end
  else
    -- limit.fixedStep; a start at or after the window's is a later window
    -- seen by a store whose clock ran ahead.
    local s
    if w == 0 then
      if mstart == nil then mstart, mend = month(now) end
      s = mstart
    else
      s = now - now % w
    end
    local c = 0
    if start >= s then s, c = start, count end
    ok = c + cost <= lim
    if ok then
      ns, nc, np, nt = s, c + cost, 0, 0
      if w ~= 0 then
        exp = s - s % w + w
      elseif s == mstart then
        exp = mend
      else
        local _
        _, exp = month(s)
      end
    end
  end
  out[nout + 1] = cur
  if ok then
    out[nout + 2] = 1
    -- A later item on this key sees this one's tentative consumption.
    states[key] = struct.pack('<dddd', ns, nc, np, nt)
    local d = exp - now
    local r = d % 1000
    local ms = (d - r) / 1000 + GRACE_MS
    if r > 0 then ms = ms + 1 end
    if ms < 1 then ms = 1 end
    ttls[key] = ms
  else
    out[nout + 2] = 0
    if ARGV[5 * i + 3] ~= '1' then all = false end
    states[key] = cur
  end
  nout = nout + 2
  if i == nceil and all then
    -- Every enforced ceiling was admitted, so each of their keys has a
    -- state and an expiry (a key that only refused advisory ceilings named
    -- has none, and is not written); the policies after them may still
    -- change them.
    nkept = #order
    kstates, kttls = {}, {}
    for j = 1, nkept do
      local k = order[j]
      kstates[j], kttls[j] = states[k], ttls[k]
    end
  end
end

-- A key without an expiry was named by refused advisory items alone.
if all and consume then
  for i = 1, #order do
    local key = order[i]
    local ms = ttls[key]
    if ms then redis.call('SET', key, states[key], 'PX', ms) end
  end
else
  for j = 1, nkept do
    local ms = kttls[j]
    if ms then redis.call('SET', order[j], kstates[j], 'PX', ms) end
  end
end
return out
