-- reset.lua: forgive a key under one limit, for the whole fleet, on Redis
-- server TIME.
--
-- KEYS[1]  the key's exact state (Sync decisions)
-- KEYS[2]  the sliding window log's companion, or KEYS[1] again
-- KEYS[3]  the key's contest (shares.lua), or absent: Sync mode
-- ARGV     node, kind (0 bucket, 1 a window counter, 2 the sliding window
--          log), period µs (windows), for Sync mode the ms the fresh state
--          outlives the reset (0: none), and for Async mode the active
--          window µs (how long a reset with no contest is kept: rs, rx)
--
-- The exact state is deleted. In Sync mode a fresh state takes its place (a
-- full bucket, an empty window) for as long as another node's copy of the
-- old one could still say it was spent: a node's next decision sends that
-- copy as its estimate, and a state found gone is restored from it, which
-- would undo the reset on every node but the one that made it. The log
-- sends no estimate. A contest's pool is emptied (its state made
-- fresh), so the share nobody holds admits at once, and the store calls
-- the holders again at once if asked; the nodes holding
-- grants, and every node deciding the key alone, start their own state
-- afresh when they hear of the reset through the registry (the caller
-- sends it with its next heartbeat); until then, what a node gives back
-- returns to the pool fresh (shares.lua, rs). The ledger (what the fleet admitted)
-- is kept.
--
-- Returns {1 if there was anything to reset else 0, now µs}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local had = redis.call('DEL', KEYS[1], KEYS[2])
local kind, period = tonumber(ARGV[2]), tonumber(ARGV[3])
if KEYS[3] == nil then
  local fresh = tonumber(ARGV[4]) or 0
  if fresh > 0 and kind ~= 2 then
    local x = math.floor(now / 1000) + fresh
    if kind == 0 then
      redis.call('HSET', KEYS[1], 't', now, 'l', 0, 'x', x)
    else
      redis.call('HSET', KEYS[1], 'w', 0, 'c', 0, 'p', 0, 'x', x) -- a window long gone: the next one is empty
    end
    redis.call('PEXPIREAT', KEYS[1], x)
  end
  return {had > 0 and 1 or 0, now}
end

-- shares.lua's contest, and an earlier release's (without the sums)
local META, OLDMETA = '<dddddddddddddddddddd', '<ddddddddddddddddd'
local raw = redis.call('HGET', KEYS[3], 'm')
if raw then
  local format, n = OLDMETA, 17
  if #raw >= 160 then format, n = META, 20 end
  local m = {struct.unpack(format, raw)}
  if m[2] > now then
    local window = 0
    if kind ~= 0 then window = math.floor(now / period) end
    m[4], m[5], m[6], m[7], m[8], m[16] = 0, window, 0, 0, now, 0
    -- The holders start afresh and have room to give again: calls that
    -- came back empty before no longer hold the next one back.
    m[10], m[11], m[12] = 0, 0, 0
    -- rs: an op of a node that has not heard of it yet gives back its
    -- state as fresh (shares.lua).
    redis.call('HSET', KEYS[3], 'm', struct.pack(format, unpack(m, 1, n)), 'rs', now)
    return {1, now}
  end
end
-- No contest (or one that has ended): the reset is kept an active window
-- (rs, until rx) all the same. A node that has not heard of it may make
-- the key's contest meanwhile with what it admitted alone before it (a
-- pooled key's spend, when the fleet grew): the contest takes that as
-- from before the reset, and charges nothing of it.
local active = tonumber(ARGV[5]) or 0
if active > 0 then
  if raw then redis.call('DEL', KEYS[3]) end
  redis.call('HSET', KEYS[3], 'rs', now, 'rx', now + active)
  redis.call('PEXPIREAT', KEYS[3], math.ceil((now + active) / 1000))
end
return {had > 0 and 1 or 0, now}
