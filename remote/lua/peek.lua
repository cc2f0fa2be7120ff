-- peek.lua: what a decision would find, on Redis server TIME, atomically,
-- writing nothing: no command below writes, and a test holds Redis's count
-- of changes still across peeks of every algorithm.
--
-- ARGV[1] 'hash': KEYS[1] is the key's hash (gcra.lua, window.lua); the
--         fields ARGV[2..] are read. Returns {now (µs), value...}, a field
--         missing as nil. The caller decides from them as the scripts do.
-- ARGV[1] 'log': KEYS[1] and KEYS[2] are the sliding window log's sorted set
--         and hash (log.lua); ARGV[2] period µs, ARGV[3] rate, ARGV[4] n.
--         Returns what log.lua would return for a request of weight n now,
--         {allowed (0/1), total after, retry-after µs, reset-after µs, now},
--         without expiring anything: the requests that left the window are
--         the lowest ranks, skipped rather than removed.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

if ARGV[1] == 'hash' then
  local fields = {}
  for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
  local out = {now}
  local vals = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, #fields do out[i + 1] = vals[i] end
  return out
end

local period = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local n = tonumber(ARGV[4])

local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #newest == 2 and tonumber(newest[2]) > now then
  now = tonumber(newest[2]) -- log.lua logs at the newest time, never before it
end
local cutoff = now - period

-- weight returns a member's running total and weight ("C:n").
local function weight(member)
  local c, w = string.match(member, '^(%d+):(%d+)$')
  return tonumber(c) or 0, tonumber(w) or 1
end

local total = tonumber(redis.call('HGET', KEYS[2], 'n'))
if total == nil then
  total = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local _, w = weight(m)
    total = total + w
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
for _, m in ipairs(expired) do
  local _, w = weight(m)
  total = total - w
end
if total < 0 then total = 0 end
local skip = #expired -- the ranks log.lua would have removed

local allowed = total + n <= rate
local retry = 0
local reset = 0
if #newest == 2 and tonumber(newest[2]) > cutoff then
  reset = tonumber(newest[2]) + period - now
end
if allowed and n > 0 then
  total = total + n
  reset = period -- it would be logged now, the newest
elseif not allowed then
  -- As log.lua: the first live member whose running total reaches the
  -- weight that must leave, by rank, past the skipped ones.
  local need = total + n - rate
  local card = redis.call('ZCARD', KEYS[1]) - skip
  local function at(i)
    local m = redis.call('ZRANGE', KEYS[1], skip + i, skip + i)
    if #m == 0 then return nil end
    return weight(m[1])
  end
  if card > 0 then
    local c0, w0 = at(0)
    local target = c0 - w0 + need
    local lo, hi = 0, math.min(card, need) - 1
    local chi = at(hi)
    if chi < target then
      hi = card - 1
    elseif chi == target then
      lo = hi
    end
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) >= target then hi = mid else lo = mid + 1 end
    end
    local m = redis.call('ZRANGE', KEYS[1], skip + lo, skip + lo, 'WITHSCORES')
    retry = tonumber(m[2]) + period - now
  end
end
return {allowed and 1 or 0, total, retry, reset, now}
