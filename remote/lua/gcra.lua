-- gcra.lua: one decision of the token bucket (GCRA) or the leaky bucket, on
-- Redis server TIME, atomically: an allow, a reservation, or the cancelling
-- of a reservation (golang.org/x/time/rate's ReserveN and CancelAt).
--
-- KEYS[1]  the key's hash: t = server µs of the last update, l = ns the
--          theoretical arrival time (TAT) ran ahead of t (integers well below
--          2^53, exact in a Lua number), x = the ms at which the key expires,
--          so it is re-expired only when it must live longer, and e, f = when
--          the latest admitted request acts (x/time/rate's lastEvent), as
--          whole µs and the ns beyond them. The reconcile script keeps its
--          node fields in the same hash.
-- ARGV[1]  emission interval, ns        ARGV[2]  burst tolerance, ns
-- ARGV[3]  n, the request's weight      ARGV[4]  mode: 0 token bucket,
--          1 leaky meter (admit only when drained), 2 leaky queue (reserve),
--          3 token reserve, 4 cancel a reservation
-- ARGV[5]  ms the key outlives a full bucket
-- ARGV[6]  node                          ARGV[7]  the decision's sequence
--          number for this node (0: none), and after a colon the node's low
--          mark; when the request is admitted it is kept in q:<node> (every
--          one above the low mark; without one, the node's last eight), so a
--          report of the same request decided again in memory after this
--          call timed out is not applied twice; a decision the node already
--          reported as timed out (d:<node>, see reconcile.lua) is refused and
--          changes nothing
-- ARGV[8]  the node's estimate of the level, ns (0: none): when the key's
--          state is gone (evicted, deleted) while the node knew it spent, it
--          is restored to at least that, and the reply says so
-- ARGV[9]  modes 2 and 3: the longest wait admitted, ns (at most 2^52);
--          mode 4: when the reservation acts, whole µs
-- ARGV[10] mode 4: and the ns beyond them
--
-- Returns {allowed (0/1), level before (ns), level after (ns), now (µs)}:
-- the caller derives remaining, retry-after, reset-after and the delay. A
-- cancel returns 1 when it gave something back.
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local keep = tonumber(ARGV[5])
-- ARGV[7] is "seq" or "seq:low": the decision's sequence number and the
-- node's low mark (every decision of the node at or below it is settled).
local seq, low
do
  local a, b = string.match(ARGV[7] or '', '^(%d+):?(%d*)$')
  seq, low = tonumber(a) or 0, tonumber(b)
end
local estimate = tonumber(ARGV[8]) or 0

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local level = 0
local qk = 'q:' .. ARGV[6]
local st = redis.call('HMGET', KEYS[1], 't', 'l', 'x', qk, 'e', 'f', 'd:' .. ARGV[6])
-- A decision the node reported as timed out before it arrived here (d:<node>,
-- see reconcile.lua) was counted from the node's memory: it changes nothing.
local fenced = seq > 0 and st[7] and string.find(' ' .. st[7] .. ' ', ' ' .. string.format('%d', seq) .. ' ', 1, true)
local t, l = tonumber(st[1]), tonumber(st[2])
local lost = 0
if t and l then
  -- A Redis clock that stepped back behind the last update refills nothing
  -- (and adds no debt) until it has caught up.
  local elapsed = now - t
  if elapsed < 0 then elapsed = 0 end
  level = l - elapsed * 1000
  if level < 0 then level = 0 end
elseif estimate > 0 then
  level, lost = estimate, 1 -- the state vanished under us: restore what this node knows
end

local before = level
local cost = n * interval
local allowed
local act = 0 -- ns from now at which an admitted request acts
if mode == 4 then
  -- x/time/rate's CancelAt: nothing once the reservation could act, else
  -- its cost less what later reservations count on.
  act = (tonumber(ARGV[9]) - now) * 1000 + tonumber(ARGV[10])
  local last = -1e15 -- none recorded: long past
  if st[5] then last = (tonumber(st[5]) - now) * 1000 + (tonumber(st[6]) or 0) end
  local restore = cost - (last - act)
  if act < 0 or n <= 0 or restore <= 0 then
    return {0, before, level, now}
  end
  level = level - restore
  if level < 0 then level = 0 end
  if last == act and act - cost >= 0 then
    act = act - cost
  else
    act = last
  end
  allowed = true
elseif mode == 1 then
  allowed = level == 0
elseif mode == 2 then
  allowed = level + cost <= tau and level <= tonumber(ARGV[9])
  act = level
elseif mode == 3 then
  act = level + cost - tau
  if act < 0 then act = 0 end
  allowed = act <= tonumber(ARGV[9])
else
  allowed = level + cost <= tau
end
if fenced then allowed = false end
if allowed and n > 0 then
  if mode ~= 4 then level = level + cost end
  local need = math.floor(now / 1000) + math.ceil(level / 1000000) + keep
  local au = now + math.floor(act / 1000)
  local an = act % 1000
  if (tonumber(st[3]) or 0) < need then
    local x = need + keep
    redis.call('HSET', KEYS[1], 't', now, 'l', level, 'x', x, 'e', au, 'f', an)
    redis.call('PEXPIREAT', KEYS[1], x)
  else
    redis.call('HSET', KEYS[1], 't', now, 'l', level, 'e', au, 'f', an)
  end
  if seq > 0 then
    -- Keep the admitted decisions above the node's low mark (all of them: a
    -- report may name any as timed out), newest first; without a low mark
    -- the last eight. A bound no node reaches keeps a key's record finite.
    local list = {string.format('%d', seq)}
    for q in string.gmatch(st[4] or '', '%d+') do
      if low then
        if #list >= 65536 then break end
        if tonumber(q) > low then list[#list + 1] = q end
      else
        if #list >= 8 then break end
        list[#list + 1] = q
      end
    end
    redis.call('HSET', KEYS[1], qk, table.concat(list, ' '))
  end
elseif lost == 1 then
  redis.call('HSET', KEYS[1], 't', now, 'l', level, 'x', math.floor(now / 1000) + math.ceil(level / 1000000) + 2 * keep)
  redis.call('PEXPIREAT', KEYS[1], math.floor(now / 1000) + math.ceil(level / 1000000) + 2 * keep)
end
return {allowed and 1 or 0, before, level, now, lost}
