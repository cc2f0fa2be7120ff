-- gcra.lua: one decision of the token bucket (GCRA) or the leaky bucket, on
-- Redis server TIME, atomically.
--
-- KEYS[1]  the key's hash: t = server µs of the last update, l = ns the
--          theoretical arrival time (TAT) ran ahead of t (integers well below
--          2^53, exact in a Lua number), x = the ms at which the key expires,
--          so it is re-expired only when it must live longer. The reconcile
--          script keeps its node fields in the same hash.
-- ARGV[1]  emission interval, ns        ARGV[2]  burst tolerance, ns
-- ARGV[3]  n, the request's weight      ARGV[4]  mode: 0 token bucket,
--          1 leaky meter (admit only when drained), 2 leaky queue (reserve)
-- ARGV[5]  ms the key outlives a full bucket
--
-- Returns {allowed (0/1), level before (ns), level after (ns), now (µs)}:
-- the caller derives remaining, retry-after, reset-after and the delay.
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local keep = tonumber(ARGV[5])

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local level = 0
local st = redis.call('HMGET', KEYS[1], 't', 'l', 'x')
local t, l = tonumber(st[1]), tonumber(st[2])
if t and l then
  -- A Redis clock that stepped back behind the last update refills nothing
  -- (and adds no debt) until it has caught up.
  local elapsed = now - t
  if elapsed < 0 then elapsed = 0 end
  level = l - elapsed * 1000
  if level < 0 then level = 0 end
end

local before = level
local cost = n * interval
local allowed
if mode == 1 then
  allowed = level == 0
else
  allowed = level + cost <= tau
end
if allowed and n > 0 then
  level = level + cost
  local need = math.floor(now / 1000) + math.ceil(level / 1000000) + keep
  if (tonumber(st[3]) or 0) < need then
    local x = need + keep
    redis.call('HSET', KEYS[1], 't', now, 'l', level, 'x', x)
    redis.call('PEXPIREAT', KEYS[1], x)
  else
    redis.call('HSET', KEYS[1], 't', now, 'l', level)
  end
end
return {allowed and 1 or 0, before, level, now}
