-- log.lua: one decision of the sliding window log, on Redis server TIME,
-- atomically. A request admitted at t counts in (t, t+period].
--
-- KEYS[1]  sorted set of admitted requests: score = µs, member = "seq:n"
-- KEYS[2]  hash with n = the total weight in the set, s = a sequence for
--          unique members (same hash tag as KEYS[1]: one Cluster slot)
-- ARGV[1]  period, µs     ARGV[2]  rate     ARGV[3]  n
-- ARGV[4]  ms the keys outlive their newest request
--
-- Returns {allowed (0/1), total after, retry-after µs, reset-after µs, now}.
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local cutoff = now - period

local function weight(member)
  return tonumber(string.match(member, ':(%d+)$')) or 1
end

local total = tonumber(redis.call('HGET', KEYS[2], 'n'))
if total == nil then
  -- No total (a fresh key, or the hash was lost): count the set itself.
  total = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    total = total + weight(m)
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #expired > 0 then
  for _, m in ipairs(expired) do
    total = total - weight(m)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
end
if total < 0 then total = 0 end

local allowed = total + n <= rate
local retry = 0
if allowed and n > 0 then
  local seq = redis.call('HINCRBY', KEYS[2], 's', 1)
  redis.call('ZADD', KEYS[1], now, seq .. ':' .. n)
  total = total + n
elseif not allowed then
  local left = total
  local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    left = left - weight(all[i])
    if left + n <= rate then
      retry = tonumber(all[i + 1]) + period - now
      break
    end
  end
end
redis.call('HSET', KEYS[2], 'n', total)

local reset = 0
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #newest == 2 then
  reset = tonumber(newest[2]) + period - now
  local ttl = math.ceil(reset / 1000) + keep
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('DEL', KEYS[2])
end
return {allowed and 1 or 0, total, retry, reset, now}
