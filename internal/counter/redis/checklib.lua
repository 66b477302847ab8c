-- checklib.lua is the counter arithmetic of the scripts that decide checks:
-- check.lua, which decides a batch of requests, and acquire.lua, which
-- decides a lease's ceilings as one request. The store prepends it to each.
--
-- decide decides one all-or-nothing request of counter items, in two tiers
-- when its first items are ceilings (counter.Request.Ceilings), where
-- advisory items (counter.Item.Advisory) never fail a tier. It reproduces
-- limit.Admit (internal/limit/limit.go) in the same order of floating-point
-- operations; Lua numbers are IEEE doubles, so integers below 2^53 (every
-- instant and product limit.MaxLimit allows) are exact, and so is Lua's
-- a % b (a - floor(a/b)*b) for such integers.
--
-- A request is laid out in a packed string (struct.pack, little-endian),
-- the keys of its items being the next of the script's KEYS:
--
--   header  B peek (1) or consume (0), B how many of the first items are
--           ceilings (0 to n), B n, the number of items, d now in Unix
--           microseconds, or -1 for the server's clock
--   item    B algorithm (1 fixed, 2 sliding, 3 token bucket), B 1 when it
--           is advisory (else 0), d limit, d window in microseconds, or a month: 0
--           for the calendar month UTC, minus its anchor (limit.Window's
--           Anchor, in µs) for a month anchored into it, d cost
--
-- Packed, the numbers cost one struct.unpack per item rather than a string
-- argument and a conversion each, and the store builds them without
-- formatting numbers.
--
-- A key holds its limit.State as 32 bytes, the little-endian doubles start,
-- count, prev and tat (struct.pack '<dddd'): exact, tat included, and read
-- and written in one call each. Text ("start count prev tat", %.17g) needed
-- string.match, four tonumber and string.format per key; the packed form ran
-- 1.4 (one item) to 1.7 (four items) times as many scripts per second.
--
-- Every request of a script sees what the requests before it kept: the
-- script keeps each key's state as the requests leave it (base) and writes
-- each changed key once, at the end (flush). A request keeps the new states
-- of all its admitted items when every enforced (not advisory) item is
-- admitted in consume mode; otherwise, when every enforced ceiling is
-- admitted (in either mode), the states its admitted ceilings left;
-- otherwise nothing. A refused item consumes nothing, so a key that only
-- refused (advisory) items named keeps its bytes and its expiry.
--
-- The scripts run for every check, so they avoid what costs most in Redis's
-- Lua: calls into C (math.*, tonumber, string.format), tables made per
-- request, and redis.call beyond one GET and one SET per key and script.

-- decide writes its constants as literals and reads the clock itself: a
-- script runs this whole chunk on every call, and each local a function
-- refers to is one more upvalue made for its closure each time (an EVALSHA
-- of one request took about 10.5 µs of the server's time with named
-- constants and a function for the clock, 9.8 µs without).

local DAY = 86400000000

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

-- anchorin returns when the month anchored at a (µs into a month) starts
-- in the calendar month [ms, me): the anchor's day, or the month's last
-- day when it is shorter, at the anchor's time of day (limit.monthStart).
local function anchorin(ms, me, a)
  local d = (a - a % DAY) / DAY
  local last = (me - ms) / DAY - 1
  if d > last then d = last end
  return ms + d * DAY + a % DAY
end

-- period returns the month anchored at a around t (limit.Window.Bounds);
-- a = 0 is the calendar month.
local function period(t, a)
  local ms, me = month(t)
  if a == 0 then return ms, me end
  local s = anchorin(ms, me, a)
  if t >= s then
    local ns, ne = month(me)
    return s, anchorin(ns, ne, a)
  end
  local ps, pe = month(ms - 1)
  return anchorin(ps, pe, a), s
end

-- The server's clock, read once per script: every request of a script
-- that leaves the instant to the server decides at the same one.
local servernow

-- What the script's requests have kept so far: base[key] is the key's
-- state as stored or as the last request that counted it left it, and
-- px[key] its PX once a request counted it.
local base, px = {}, {}

-- The request being decided: for item i, work[3i-2] is its key,
-- work[3i-1] the key's working state after it and work[3i] its PX when
-- admitted, else false. Reused from request to request: a script makes
-- three tables, however many requests it decides.
local work = {}

-- load returns key's state as the script has it, reading it on first use;
-- or nil and why when the key holds no counter state (another type, or
-- bytes of another length).
local function load(key)
  local cur = base[key]
  if cur then return cur end
  cur = redis.pcall('GET', key)
  if cur == false then
    -- A new counter: limit.State{}.
    cur = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'
  elseif type(cur) ~= 'string' then
    return nil, 'tollgate: ' .. cur.err .. ' at ' .. key
  elseif #cur ~= 32 then
    return nil, 'tollgate: malformed counter state at ' .. key
  end
  base[key] = cur
  return cur
end

-- decide decides the request whose header starts at spec[pos] and whose
-- items' keys are keys[k+1..k+n]. It appends to out, from out[nout+1], per
-- item the state the item saw (as stored or as the requests before it left
-- it, after the earlier admitted items of the request on the same key,
-- ceilings or not; 32 zero bytes for a new counter) and '\1' (admitted)
-- or '\0', and returns the new nout, the instant it decided at and whether
-- every enforced item was admitted; or nil and why when a key holds no
-- counter state, having kept nothing.
local function decide(spec, pos, keys, k, out, nout)
  local peek, nceil, n, t
  peek, nceil, n, t, pos = struct.unpack('<BBBd', spec, pos)
  local now = t
  if t < 0 then
    if servernow == nil then
      local c = redis.call('TIME')
      servernow = c[1] * 1000000 + c[2]
    end
    now = servernow
  end
  -- The month around now, worked out once per request and anchor (mw,
  -- the window that names it).
  local mw, mstart, mend
  -- Whether every enforced (not advisory) item so far was admitted.
  local all = true
  -- How many of the first items the request keeps the admitted ones of.
  local keep = 0
  for i = 1, n do
    local key = keys[k + i]
    local cur
    for j = 3 * i - 5, 1, -3 do
      if work[j] == key then cur = work[j + 1]; break end
    end
    if cur == nil then
      local err
      cur, err = load(key)
      if cur == nil then return nil, err end
    end
    local alg, advisory, lim, w, cost
    alg, advisory, lim, w, cost, pos = struct.unpack('<BBddd', spec, pos)
    local start, count, prev, tat = struct.unpack('<dddd', cur)
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
      local m = now
      if start > m then m = start end
      local interval = w / lim
      local off = tat - (m - start)
      if off < 0 then off = 0 end
      local nxt = off + interval * cost
      ok = nxt <= w + interval / 1048576
      if ok then
        ns, nc, np, nt = m, 0, 0, nxt
        -- m + ceil(nxt), adding whole numbers only so that it stays exact.
        local r = nxt % 1
        exp = m + (nxt - r)
        if r > 0 then exp = exp + 1 end
      end
    else
      -- limit.fixedStep; a start at or after the window's is a later window
      -- seen by a store whose clock ran ahead.
      local s
      if w <= 0 then
        if mw ~= w then mstart, mend = period(now, -w); mw = w end
        s = mstart
      else
        s = now - now % w
      end
      local c = 0
      if start >= s then s, c = start, count end
      ok = c + cost <= lim
      if ok then
        ns, nc, np, nt = s, c + cost, 0, 0
        if w > 0 then
          exp = s - s % w + w
        elseif s == mstart then
          exp = mend
        else
          local _
          _, exp = period(s, -w)
        end
      end
    end
    local at = 3 * i - 2
    work[at] = key
    out[nout + 1] = cur
    if ok then
      out[nout + 2] = '\1' -- admitted
      -- A later item on this key sees this one's tentative consumption.
      work[at + 1] = struct.pack('<dddd', ns, nc, np, nt)
      -- PX: until the expiry (limit.Expiry), in whole milliseconds up, and
      -- a grace of 1000 ms, past which the state no longer matters. Expiry
      -- is reckoned in the request's clock but Redis expires keys by its
      -- own: the grace covers a caller-given now that advances slower than
      -- real time (tests step by microseconds while milliseconds pass) and
      -- a server clock stepped back. A late expiry costs only memory.
      local d = exp - now
      local r = d % 1000
      local ms = (d - r) / 1000 + 1000
      if r > 0 then ms = ms + 1 end
      if ms < 1 then ms = 1 end
      work[at + 2] = ms
    else
      out[nout + 2] = '\0' -- refused
      if advisory ~= 1 then all = false end
      work[at + 1], work[at + 2] = cur, false
    end
    nout = nout + 2
    -- Every enforced ceiling was admitted: their states stand, whatever
    -- the policies after them answer.
    if i == nceil and all then keep = nceil end
  end
  if all and peek == 0 then keep = n end
  -- The last admitted item on a key, of those kept, holds its state; a key
  -- that only refused items named keeps its bytes and its expiry.
  for at = 1, 3 * keep, 3 do
    local ms = work[at + 2]
    if ms then
      local key = work[at]
      base[key], px[key] = work[at + 1], ms
    end
  end
  return nout, now, all
end

-- flush writes every key the script's requests counted, once each, with
-- the PX of the last request that counted it.
local function flush()
  for key, ms in pairs(px) do
    redis.call('SET', key, base[key], 'PX', ms)
  end
end
