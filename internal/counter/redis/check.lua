-- check.lua decides a batch of requests (counter.Request), in the order
-- given, each as checklib.lua's decide does; the store runs it as
-- checklib.lua, then this. A request sees what the requests before it in
-- the batch kept, as if each had been a script of its own, and every key
-- is written once, at the end.
--
-- KEYS     the keys of every item of every request, in order (a key may
--          appear many times)
-- ARGV[1]  the requests' layouts (checklib.lua), one after the other
--
-- Returns reply when every request was decided, else {reply, why, ...}
-- with why for each request that was not, in order. reply holds, per
-- request, its instant (d, Unix µs) then per item its state (32 bytes) and
-- 1 byte, admitted or not (checklib.lua's decide); or, for a request not
-- decided (a key of it holds no counter state), the instant -1 alone. Such
-- a request kept nothing; the others are unaffected.
--
-- The store bounds the items of a batch, so that no script holds the
-- server long.

local spec = ARGV[1]
local out, nout = {}, 0
local failed = nil
local pos, k = 1, 0
local size = #spec
-- The packed instants of the batch, which are all one unless the caller
-- gives them.
local lastnow, packed
while pos <= size do
  local n = struct.unpack('B', spec, pos + 2)
  -- out[at] is the request's instant, its items follow.
  local at = nout + 1
  local upto, now = decide(spec, pos, KEYS, k, out, at)
  if upto then
    if now ~= lastnow then lastnow, packed = now, struct.pack('<d', now) end
    out[at] = packed
    nout = upto
  else
    -- now is why.
    failed = failed or {''}
    failed[#failed + 1] = now
    out[at] = struct.pack('<d', -1)
    nout = at
  end
  pos, k = pos + 11 + 26 * n, k + n
end
flush()
local reply = table.concat(out, '', 1, nout)
if failed then
  failed[1] = reply
  return failed
end
return reply
