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
--          number for this node (0: none); when the request is admitted it
--          is kept in q:<node> (the node's last eight), so a report of the
--          same request decided again in memory after this call timed out is
--          not applied twice
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
local seq = tonumber(ARGV[7]) or 0
local estimate = tonumber(ARGV[8]) or 0

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local level = 0
local qk = 'q:' .. ARGV[6]
local st = redis.call('HMGET', KEYS[1], 't', 'l', 'x', qk, 'e', 'f')
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
    local list, count = string.format('%d', seq), 1
    for q in string.gmatch(st[4] or '', '%d+') do
      if count >= 8 then break end
      list, count = list .. ' ' .. q, count + 1
    end
    redis.call('HSET', KEYS[1], qk, list)
  end
elseif lost == 1 then
  redis.call('HSET', KEYS[1], 't', now, 'l', level, 'x', math.floor(now / 1000) + math.ceil(level / 1000000) + 2 * keep)
  redis.call('PEXPIREAT', KEYS[1], math.floor(now / 1000) + math.ceil(level / 1000000) + 2 * keep)
end
return {allowed and 1 or 0, before, level, now, lost}
