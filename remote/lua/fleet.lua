-- fleet.lua: a node's heartbeat (Sync mode).
--
-- KEYS[1]  the fleet's sorted set: every node by the server µs it last beat
-- KEYS[2]  per node, the server µs up to which it has processed the claims
--          (hash): a node processes a claim once it no longer decides the
--          key in its even share without telling Redis
-- Both share one Cluster hash tag.
--
-- ARGV     node, active window µs, the node's processed mark µs (-1: the
--          node leaves the fleet).
--
-- Returns {now µs, active nodes, acked µs}. acked is the earliest processed
-- mark among active nodes: every claim made before it is known to the whole
-- fleet.
local node, active = ARGV[1], tonumber(ARGV[2])
local mark = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local keep = math.ceil(2 * active / 1000)

if mark < 0 then -- leaving: the others divide by one node fewer at once
  redis.call('ZREM', KEYS[1], node)
  redis.call('HDEL', KEYS[2], node)
  return {now, redis.call('ZCARD', KEYS[1]), 0}
end
redis.call('ZADD', KEYS[1], now, node)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - active)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - active)
  redis.call('HDEL', KEYS[2], unpack(gone))
end
redis.call('HSET', KEYS[2], node, mark)

-- The earliest processed mark of the active nodes.
local nodes = redis.call('ZRANGE', KEYS[1], 0, -1)
local acked = nil
if #nodes > 0 then
  local marks = redis.call('HMGET', KEYS[2], unpack(nodes))
  for _, m in ipairs(marks) do
    local v = tonumber(m) or 0
    if acked == nil or v < acked then acked = v end
  end
end

-- The fleet's keys live while nodes beat.
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return {now, #nodes, acked or 0}
