-- log.lua: one decision of the sliding window log, on Redis server TIME,
-- atomically. A request admitted at t counts in (t, t+period].
--
-- KEYS[1]  sorted set of admitted requests: score = µs, member = "C:n", C
--          the running weight total after this request (16 digits, zero
--          padded, so members of equal score sort in the order they came)
-- KEYS[2]  hash with n = the total weight in the set, s = the running total
--          C was drawn from (same hash tag as KEYS[1]: one Cluster slot)
-- ARGV[1]  period, µs     ARGV[2]  rate     ARGV[3]  n
-- ARGV[4]  ms the keys outlive their newest request
--
-- Every step costs O(log size) but the expiry of old requests (each request
-- expires once): a denial finds when enough weight leaves by a binary search
-- on the running totals, never by reading the whole log.
--
-- Returns {allowed (0/1), total after, retry-after µs, reset-after µs, now}.
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- A Redis clock that stepped back logs at the newest time, never before it:
-- the log stays in the order the running totals were drawn.
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #newest == 2 and tonumber(newest[2]) > now then
  now = tonumber(newest[2])
end
local cutoff = now - period

-- parse returns a member's running total and weight.
local function parse(member)
  local c, w = string.match(member, '^(%d+):(%d+)$')
  return tonumber(c) or 0, tonumber(w) or 1
end

local total = tonumber(redis.call('HGET', KEYS[2], 'n'))
if total == nil then
  -- No total (a fresh key, or the hash was lost): count the set itself, and
  -- carry the running total on from its newest member.
  total = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local _, w = parse(m)
    total = total + w
  end
  if #newest == 2 then
    local c = parse(newest[1])
    redis.call('HSET', KEYS[2], 's', c)
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #expired > 0 then
  for _, m in ipairs(expired) do
    local _, w = parse(m)
    total = total - w
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
end
if total < 0 then total = 0 end

local allowed = total + n <= rate
local retry = 0
if allowed and n > 0 then
  local c = redis.call('HINCRBY', KEYS[2], 's', n)
  redis.call('ZADD', KEYS[1], now, string.format('%016d:%d', c, n))
  total = total + n
elseif not allowed then
  -- The oldest requests must leave until total + n <= rate: need weight.
  -- The weight from the oldest through the member at rank i is C_i - base,
  -- base = C_0 - w_0: the member sought is the first whose C reaches
  -- base + need. Weights are at least 1, so it is at rank need-1 or before,
  -- exactly there when every weight is 1 (one probe); else a binary search.
  local need = total + n - rate
  local card = redis.call('ZCARD', KEYS[1])
  local function at(i)
    local m = redis.call('ZRANGE', KEYS[1], i, i)
    if #m == 0 then return nil end
    return parse(m[1])
  end
  if card > 0 then
    local c0, w0 = at(0)
    local target = c0 - w0 + need
    local lo, hi = 0, math.min(card, need) - 1
    local chi = at(hi)
    if chi < target then
      hi = card - 1 -- running totals of an older format: search them all
    elseif chi == target then
      lo = hi -- running totals grow strictly: nothing before reaches it
    end
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) >= target then hi = mid else lo = mid + 1 end
    end
    local m = redis.call('ZRANGE', KEYS[1], lo, lo, 'WITHSCORES')
    retry = tonumber(m[2]) + period - now
  end
end
redis.call('HSET', KEYS[2], 'n', total)

local reset = 0
newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #newest == 2 then
  reset = tonumber(newest[2]) + period - now
  local ttl = math.ceil(reset / 1000) + keep
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('DEL', KEYS[2])
end
return {allowed and 1 or 0, total, retry, reset, now}
