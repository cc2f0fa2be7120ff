-- reset.lua: forgive a key under one limit, for the whole fleet, on Redis
-- server TIME.
--
-- KEYS[1]  the key's exact state (Sync decisions, and Async escalations)
-- KEYS[2]  the sliding window log's companion, or KEYS[1] again
-- KEYS[3]  the key's shares (contest.lua), or absent: Sync mode
-- ARGV     node, kind (0 bucket, else a window), period µs (windows), keep
--          ms (how long a share hash made here lives if no node reports)
--
-- The exact state is deleted. The shares' hash gets Z = now: a node whose
-- record predates Z (or that first reports within the active window after
-- it, holding an even split it decided alone) is told, in its next answer,
-- to start the key afresh (contest.lua, flag 32). The pool's state is
-- emptied, and the calling node's record marked as seen now, since it has
-- forgotten the key itself. The ledger (what the fleet admitted) is kept.
--
-- Returns {1 if there was anything to reset else 0, now µs}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local had = redis.call('DEL', KEYS[1], KEYS[2])
if KEYS[3] == nil then return {had > 0 and 1 or 0, now} end

local node, kind, period, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local REC = '<ddddddddddd'
local existed = redis.call('EXISTS', KEYS[3]) == 1
local w = {'Z', now}
local p = redis.call('HGET', KEYS[3], 'P')
if p then
  local ps = struct.unpack('<ddddd', p)
  local pa = 0
  if kind ~= 0 then pa = math.floor(now / period) end
  w[#w + 1], w[#w + 2] = 'P', struct.pack('<ddddd', ps, pa, 0, 0, now)
end
local mine = 'n:' .. node
local rec = redis.call('HGET', KEYS[3], mine)
if rec then
  local r = {struct.unpack(REC, rec)}
  r[10] = now
  w[#w + 1], w[#w + 2] = mine, struct.pack(REC, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11])
end
redis.call('HSET', KEYS[3], unpack(w))
if not existed then redis.call('PEXPIRE', KEYS[3], keep) end
if existed then had = had + 1 end
return {had > 0 and 1 or 0, now}
