-- fleet.lua: a node's heartbeat (Sync mode).
--
-- KEYS[1]  the fleet's sorted set: every node by the server µs it last beat
--
-- ARGV     node, active window µs, 1 when the node leaves the fleet (it is
--          closing), else 0.
--
-- Returns {now µs, active nodes}.
local node, active, leave = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

if leave == '1' then -- the others divide by one node fewer at once
  redis.call('ZREM', KEYS[1], node)
  return {now, redis.call('ZCARD', KEYS[1])}
end
redis.call('ZADD', KEYS[1], now, node)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - active)
-- The fleet's key lives while nodes beat.
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * active / 1000))
return {now, redis.call('ZCARD', KEYS[1])}
