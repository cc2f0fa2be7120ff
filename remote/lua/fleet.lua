-- fleet.lua: a node's heartbeat, and the fleet's claims.
--
-- KEYS[1]  the fleet's sorted set: every node by the server µs it last beat
-- KEYS[2]  the claims by the server µs they last changed (sorted set)
-- KEYS[3]  the claims by the server µs they expire (sorted set)
-- KEYS[4]  per node, the server µs up to which it has processed the claims
--          (hash): a node processes a claim once it no longer decides the
--          key in its even share without telling Redis
-- All four share one Cluster hash tag.
--
-- ARGV     node, active window µs, the node's processed mark µs (-1: the
--          node leaves the fleet), the most claims to return, the µs from
--          which to return changed claims (exclusive), then per claim this
--          node adds or renews: member, expiry µs.
--
-- A claim says that a key is contested: some node wants more of it than an
-- even split of the fleet, so every node must stop deciding it alone. Nodes
-- learn of claims here, from the changes since they last looked.
--
-- Returns {now µs, active nodes, acked µs, the µs of the last change
-- returned (the next 'from'), then per claim returned: member, expiry µs}. acked is the earliest processed mark among active nodes: every
-- claim made before it is known to the whole fleet.
local node, active = ARGV[1], tonumber(ARGV[2])
local mark, limit, from = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local keep = math.ceil(2 * active / 1000)

if mark < 0 then -- leaving: the others divide by one node fewer at once
  redis.call('ZREM', KEYS[1], node)
  redis.call('HDEL', KEYS[4], node)
  return {now, redis.call('ZCARD', KEYS[1]), 0, tonumber(from) or 0}
end
redis.call('ZADD', KEYS[1], now, node)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - active)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - active)
  redis.call('HDEL', KEYS[4], unpack(gone))
end
redis.call('HSET', KEYS[4], node, mark)

-- Claims this node adds or renews. Each change gets a µs of its own, so a
-- page of changes never splits one instant.
local stamp = now
for i = 6, #ARGV, 2 do
  local member, expiry = ARGV[i], tonumber(ARGV[i + 1])
  redis.call('ZADD', KEYS[2], stamp, member)
  local old = tonumber(redis.call('ZSCORE', KEYS[3], member))
  if old == nil or old < expiry then redis.call('ZADD', KEYS[3], expiry, member) end
  stamp = stamp + 1
end

-- Claims that expired.
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZREM', KEYS[2], unpack(dead))
end

-- The earliest processed mark of the active nodes.
local nodes = redis.call('ZRANGE', KEYS[1], 0, -1)
local acked = nil
if #nodes > 0 then
  local marks = redis.call('HMGET', KEYS[4], unpack(nodes))
  for _, m in ipairs(marks) do
    local v = tonumber(m) or 0
    if acked == nil or v < acked then acked = v end
  end
end

local changed = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. from, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local out = {now, #nodes, acked or 0, tonumber(from) or 0}
if #changed > 0 then
  -- One call for the whole page, not one per claim.
  local members = {}
  for i = 1, #changed, 2 do members[#members + 1] = changed[i] end
  local expiries = redis.call('ZMSCORE', KEYS[3], unpack(members))
  for j, member in ipairs(members) do
    out[4] = tonumber(changed[2 * j])
    out[#out + 1] = member
    out[#out + 1] = tonumber(expiries[j]) or 0
  end
end
-- The fleet's keys live while nodes beat; the claims while any is unexpired.
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[4], keep)
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if #last == 2 then
  local ttl = math.ceil((tonumber(last[2]) - now) / 1000) + keep
  for _, i in ipairs({2, 3}) do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return out
