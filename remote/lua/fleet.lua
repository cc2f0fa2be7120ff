-- fleet.lua: a node's heartbeat. The fleet's sorted set holds every node by
-- the server µs it last beat; nodes silent for longer than the active window
-- are dropped.
--
-- KEYS[1]  the fleet's sorted set     ARGV[1]  node     ARGV[2]  active µs
--
-- Returns {now µs, active nodes}. Its TIME also feeds the node's clock offset.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local active = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - active)
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * active / 1000))
return {now, redis.call('ZCARD', KEYS[1])}
