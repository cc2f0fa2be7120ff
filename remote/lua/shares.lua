-- shares.lua: Async mode's share protocol, the store's side: one op of a
-- node on each contested (key, limit), atomically, on Redis server TIME.
-- internal/storemodel is this script in Go, step for step, in the same
-- float64 arithmetic (Lua's numbers are doubles); a conformance test holds
-- the two to the same answers on a real redis-server. The protocol is
-- docs/protocol.md.
--
-- KEYS     one hash per (key, limit): m = the contest (epoch, expiry, pool
--          share and state, joins, the last call, quiet, fails, unknown,
--          the creator's shadow, the splits reserved for joins), xn = the creator, r:<node> = each node's
--          record (grant, lease, the last growth and its state, the last op
--          and what it was told).
-- ARGV     node, lease µs, call window µs, cooldown µs, recovery µs, then
--          per key 28
--          values: the limit (kind, interval ns, tolerance ns, capacity,
--          period µs, rate) and the op (epoch, held, keep, level, window,
--          count, prev, at, want, asked, need, fleet, pooled, join, leave,
--          serve, seq, full, shadow, shadow since, owed, applied).
-- Returns  now µs, then per key 18 values: 1, outcome, epoch, grant,
--          growth, pool state (4), lease end, expiry, until, lost, over,
--          replace, served, served at, 0; or for a key that failed: 0, the
--          error, then 16 zeros.
local node = ARGV[1]
local set = {lease = tonumber(ARGV[2]), window = tonumber(ARGV[3]), cooldown = tonumber(ARGV[4]),
  recovery = tonumber(ARGV[5])}
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local ONE = 32768
local PER = 28
local OUT = 18
local DONE, WAIT, CALL, NOROOM, ENDED = 0, 1, 2, 3, 4
local BUCKET, FIXED, SLIDING, METER = 0, 1, 2, 3
local MAXFAILS = 5
local CALLWAIT = 4
local META = '<ddddddddddddddddd'
local REC = '<ddddddddddddddd'
local out = {now}

local function emit(v)
  for i = 1, OUT do out[#out + 1] = v[i] or 0 end
end

local function clamp(v, lo, hi)
  if v < lo then return lo end
  if v > hi then return hi end
  return v
end

-- The arithmetic of shares (share.Params).

local function levelled(p) return p.kind == BUCKET or p.kind == METER end

local function decay(p, x, at, t)
  if t <= at then return x end
  if levelled(p) then
    local l = x.level - (t - at) * 1000
    if l < 0 then l = 0 end
    return {level = l, window = x.window, count = x.count, prev = x.prev}
  end
  local cur = math.floor(t / p.period)
  if x.window >= cur then return x end
  if x.window == cur - 1 and p.kind == SLIDING then
    return {level = 0, window = cur, count = 0, prev = x.count}
  end
  return {level = 0, window = cur, count = 0, prev = 0}
end

local function weigh(g1, a, g2, b)
  return math.ceil((g1 * a + g2 * b) / (g1 + g2))
end

local function merge(p, g1, x1, g2, x2)
  local g = g1 + g2
  if g <= 0 or g2 <= 0 then return x1 end
  if g1 <= 0 then return x2 end
  if levelled(p) then
    return {level = weigh(g1, x1.level, g2, x2.level), window = 0, count = 0, prev = 0}
  end
  if x1.window ~= x2.window then
    if x2.window > x1.window then x1, g1, x2, g2 = x2, g2, x1, g1 end
    return {level = 0, window = x1.window, count = weigh(g1, x1.count, g, 0), prev = weigh(g1, x1.prev, g, 0)}
  end
  return {level = 0, window = x1.window, count = weigh(g1, x1.count, g2, x2.count), prev = weigh(g1, x1.prev, g2, x2.prev)}
end

local function unit(p)
  if levelled(p) then return p.interval end
  return ONE
end

local function free(p, x, t)
  if levelled(p) then return p.tolerance - x.level end
  if p.kind == FIXED then return p.rate * ONE - x.count end
  local start = x.window * p.period
  local elapsed = clamp(t - start, 0, p.period - 1)
  local weighted = math.ceil(x.prev * (p.period - elapsed) / p.period)
  return p.rate * ONE - weighted - x.count
end

local function room(p, g, x, t)
  if g <= 0 then return 0 end
  if p.kind == METER then
    if g >= ONE and x.level <= 0 then return p.capacity end
    return 0
  end
  local f = free(p, x, t)
  if f <= 0 then return 0 end
  return math.floor(f * g / (unit(p) * ONE))
end

local function grow(p, w, g, x, pool, t)
  if p.kind == METER then
    if g >= ONE and x.level <= 0 then return 0 end
    if merge(p, g, x, ONE - g, pool).level <= 0 then return ONE - g end
    return -1
  end
  local fx = free(p, x, t)
  if fx < 0 then fx = 0 end
  local short = w * (unit(p) * ONE) - g * fx
  if short <= 0 then return 0 end
  local f = free(p, pool, t)
  if f <= 0 then return -1 end
  return math.ceil(short / f)
end

local function holds(p, w, g, x, d, pool, t)
  if p.kind == METER then
    return g + d >= ONE and merge(p, g, x, d, pool).level <= 0 and w <= p.capacity
  end
  local fx, fp = free(p, x, t), free(p, pool, t)
  if fx < 0 then fx = 0 end
  if fp < 0 then fp = 0 end
  return g * fx + d * fp >= w * (unit(p) * ONE)
end

local function when(p, g, w, x, t)
  if g <= 0 then return -1 end
  if p.kind == METER then
    if g < ONE or w > p.capacity then return -1 end
    local l = x.level
    if l < 0 then l = 0 end
    return t + math.floor((l + 999) / 1000)
  end
  local need = w * (unit(p) * ONE) / g
  if p.kind == BUCKET then
    local most = p.tolerance - need
    if most < 0 then return -1 end
    if x.level <= most then return t end
    return t + math.ceil((x.level - most) / 1000)
  end
  local most = p.rate * ONE - need
  if most < 0 then return -1 end
  if p.kind == FIXED then
    if x.count <= most then return t end
    return (x.window + 1) * p.period
  end
  local start = x.window * p.period
  local elapsed = clamp(t - start, 0, p.period - 1)
  if x.count <= most then
    if x.prev == 0 or x.prev * (p.period - elapsed) / p.period + x.count <= most then return t end
    local e = p.period * (1 - (most - x.count) / x.prev)
    if e < p.period then return start + math.ceil(e) end
  end
  local nxt = (x.window + 1) * p.period
  if x.count == 0 or x.count <= most then return nxt end
  return nxt + math.ceil(p.period * (1 - most / x.count))
end

local function spend(p, x, g, w)
  if g <= 0 or w <= 0 then return x end
  if levelled(p) then
    return {level = x.level + math.ceil(w * p.interval * ONE / g), window = x.window, count = x.count, prev = x.prev}
  end
  return {level = x.level, window = x.window, count = x.count + math.ceil(w * ONE * ONE / g), prev = x.prev}
end

local function spent(p, t)
  if levelled(p) then return {level = p.capacity * p.interval, window = 0, count = 0, prev = 0} end
  return {level = 0, window = math.floor(t / p.period), count = p.rate * ONE, prev = 0}
end

local function refill(p)
  if levelled(p) then return math.floor((p.capacity * p.interval + 999) / 1000) end
  return 2 * p.period
end

local function even(n)
  if n <= 1 then return ONE end
  -- math.Round(1/n * One): half away from zero, as Go's.
  return math.floor(1 / n * ONE + 0.5)
end

-- The contest's hash.

local function load(k)
  local raw = redis.call('HGETALL', k)
  if #raw == 0 then return nil end
  local h = {recs = {}, ids = {}, dirty = {}}
  for i = 1, #raw, 2 do
    local f, v = raw[i], raw[i + 1]
    if f == 'm' then
      local m = {struct.unpack(META, v)}
      h.epoch, h.expiry, h.pool = m[1], m[2], m[3]
      h.poolState = {level = m[4], window = m[5], count = m[6], prev = m[7]}
      h.poolAt, h.joins, h.callAt, h.quiet, h.fails = m[8], m[9], m[10], m[11], m[12]
      h.unknown, h.unknownUntil, h.exSince, h.exOK, h.reserved = m[13], m[14], m[15], m[16] == 1, m[17]
    elseif f == 'xn' then
      h.exNode = v
    elseif string.sub(f, 1, 2) == 'r:' then
      local r = {struct.unpack(REC, v)}
      local id = string.sub(f, 3)
      h.recs[id] = {grant = r[1], leaseEnd = r[2], growth = r[3],
        growthState = {level = r[4], window = r[5], count = r[6], prev = r[7]}, growthAt = r[8],
        seq = r[9], outcome = r[10], untl = r[11], served = r[12], servedAt = r[13], hold = r[14], holdUntil = r[15]}
      h.ids[#h.ids + 1] = id
    end
  end
  if h.epoch == nil then return nil end -- not a contest's hash
  if h.expiry <= now then
    redis.call('DEL', k) -- expired, to the µs: the contest has ended
    return nil
  end
  table.sort(h.ids)
  return h
end

local function fresh(p, t)
  return decay(p, {level = 0, window = 0, count = 0, prev = 0}, 0, t)
end

local function newHash(p, t)
  return {epoch = t, expiry = 0, pool = 0, poolState = fresh(p, t), poolAt = t, joins = 0, reserved = 0, callAt = 0, quiet = 0,
    fails = 0, unknown = 0, unknownUntil = 0, exSince = 0, exOK = false, exNode = '', recs = {}, ids = {}, dirty = {}}
end

local function newRec()
  return {grant = 0, leaseEnd = 0, growth = 0, growthState = {level = 0, window = 0, count = 0, prev = 0}, growthAt = 0,
    seq = 0, outcome = 0, untl = 0, served = 0, servedAt = 0, hold = 0, holdUntil = 0}
end

local function record(h, id)
  local r = h.recs[id]
  if r == nil then
    r = newRec()
    h.recs[id] = r
    h.ids[#h.ids + 1] = id
    table.sort(h.ids)
  end
  h.dirty[id] = true
  return r
end

local function save(k, h)
  local b = h.exOK and 1 or 0
  local args = {'m', struct.pack(META, h.epoch, h.expiry, h.pool, h.poolState.level, h.poolState.window,
    h.poolState.count, h.poolState.prev, h.poolAt, h.joins, h.callAt, h.quiet, h.fails, h.unknown, h.unknownUntil,
    h.exSince, b, h.reserved), 'xn', h.exNode or ''}
  for id, _ in pairs(h.dirty) do
    local r = h.recs[id]
    args[#args + 1] = 'r:' .. id
    args[#args + 1] = struct.pack(REC, r.grant, r.leaseEnd, r.growth, r.growthState.level, r.growthState.window,
      r.growthState.count, r.growthState.prev, r.growthAt, r.seq, r.outcome, r.untl, r.served, r.servedAt, r.hold,
      r.holdUntil)
  end
  redis.call('HSET', k, unpack(args))
  redis.call('PEXPIREAT', k, math.ceil(h.expiry / 1000))
end

local function give(p, h, g, x)
  if g <= 0 then return end
  local pool = decay(p, h.poolState, h.poolAt, now)
  if h.pool > 0 then
    h.poolState = merge(p, h.pool, pool, g, x)
  else
    h.poolState = x
  end
  h.poolAt = now
  h.pool = h.pool + g
end

local function extend(p, h)
  local e = now + 2 * set.lease + refill(p)
  if e > h.expiry then h.expiry = e end
  return h.expiry
end

local function holders(h, id)
  for _, other in ipairs(h.ids) do
    if other ~= id and (h.recs[other].grant > 0 or h.recs[other].hold > 0) then return true end
  end
  return false
end

local function granted(h)
  local g = 0
  for _, id in ipairs(h.ids) do g = g + h.recs[id].grant + h.recs[id].hold end
  return g
end

local function alone(h, id)
  return not holders(h, id) and h.joins == 0 and h.unknown == 0
end

local function untilOf(p, g, w, x)
  local t = when(p, g, w, x, now)
  if t >= 0 then
    if t < now then return now end
    return t
  end
  return now + set.cooldown
end

-- Every node but id holding a grant has reported since the last call.
local function answered(h, id)
  for _, other in ipairs(h.ids) do
    local r = h.recs[other]
    if other ~= id and r.grant > 0 and r.growthAt < h.callAt then return false end
  end
  return true
end

local function short(p, h, id)
  local others = holders(h, id)
  if h.joins > 0 and h.callAt == 0 then
    h.callAt = now
    return CALL, 0
  elseif h.joins > 0 then
    return WAIT, 0
  elseif not others then
    return NOROOM, now + set.cooldown
  elseif h.callAt ~= 0 and now - h.callAt < set.window then
    return WAIT, 0
  elseif h.callAt ~= 0 and now - h.callAt < CALLWAIT * set.window and not answered(h, id) then
    return WAIT, 0
  elseif now >= h.quiet then
    if h.callAt ~= 0 and h.callAt >= h.quiet and now - h.callAt < CALLWAIT * set.window then
      h.fails = math.min(h.fails + 1, MAXFAILS)
      h.quiet = now + set.cooldown * 2 ^ h.fails
      return NOROOM, h.quiet
    end
    h.callAt = now
    return CALL, 0
  end
  return NOROOM, h.quiet
end

-- A share a node holds that the store did not count: out of what is held
-- back for such nodes first, then out of the pool.
local function over(h, d)
  local take = math.min(d, h.unknown)
  h.unknown = h.unknown - take
  h.pool = h.pool - (d - take)
end

-- Hold back, for a lease, what the other nodes may hold beyond their grants
-- after deciding degraded, each in an even split.
local function owed(h, id, n)
  local e = even(n)
  local want, seen = 0, 0
  for _, other in ipairs(h.ids) do
    if other ~= id then
      seen = seen + 1
      want = want + math.max(e - h.recs[other].grant - h.recs[other].hold, 0)
    end
  end
  want = want + math.max(n - 1 - seen, 0) * e
  local add = math.min(math.max(want - h.unknown, 0), math.max(h.pool, 0))
  if add > 0 then
    h.pool = h.pool - add
    h.unknown = h.unknown + add
  end
  if h.unknown > 0 then h.unknownUntil = math.max(h.unknownUntil, now + set.lease + set.recovery) end
end

local function cap(h)
  local total = h.pool + h.unknown + h.reserved + granted(h)
  if total > ONE then h.pool = h.pool - (total - ONE) end
end

-- One op.
local function apply(k, p, op)
  local h = load(k)
  local r = {outcome = DONE, epoch = 0, grant = 0, growth = 0, pool = {level = 0, window = 0, count = 0, prev = 0},
    leaseEnd = 0, expiry = 0, untl = 0, lost = 0, over = 0, replace = 0, served = 0, servedAt = 0}
  local held = clamp(op.held, 0, ONE)
  local keep = clamp(op.keep, 0, held)
  if op.leave then keep = 0 end
  local state = decay(p, op.state, op.at, now)

  -- The same op again (its answer was lost, or a retry crossed it):
  -- answered as it was, whatever contest it names.
  local old = h and h.recs[node]
  if old and op.seq ~= 0 and old.seq == op.seq then
    r.outcome, r.untl, r.epoch, r.grant, r.leaseEnd = old.outcome, old.untl, h.epoch, old.grant, old.leaseEnd
    r.growth, r.pool, r.served, r.servedAt = old.growth, old.growthState, old.served, old.servedAt
    r.now = old.growthAt
    r.expiry = h.expiry
    return r
  end

  -- 1. Which contest.
  local isFresh = false
  if h == nil and op.epoch ~= 0 and held > 0 and not op.leave then
    h = newHash(p, now)
    h.unknown, h.unknownUntil = ONE - held, now + set.lease + set.recovery
    local r0 = record(h, node)
    r0.grant, r0.leaseEnd = held, now + set.lease
    r.lost = 1
  elseif h == nil and (op.leave or op.want <= 0) then
    r.outcome = ENDED
    return r
  elseif h == nil then
    h = newHash(p, now)
    local fleet = math.max(op.fleet, 1)
    if not op.pooled then
      h.joins = fleet - 1
      h.reserved = h.joins * even(fleet)
    end
    if op.epoch ~= 0 then held, keep = 0, 0 end
    h.pool = ONE - h.reserved - held
    local r0 = record(h, node)
    r0.grant, r0.leaseEnd = held, now + set.lease
    if op.epoch == 0 and not op.pooled and op.shadow >= 0 then
      h.exNode, h.exSince, h.exOK = node, op.shadowSince, true
    end
  elseif op.epoch ~= h.epoch and op.epoch ~= 0 and held > 0 and (h.joins == 0 or h.recs[node] ~= nil) then
    -- a grant of a contest the store lost (a node the contest still waits
    -- to hear from joins with it instead, below)
    local take = math.min(held, h.unknown)
    h.unknown = h.unknown - take
    h.pool = h.pool - (held - take)
    local r0 = record(h, node)
    r0.grant, r0.leaseEnd = held, now + set.lease
    r.lost = 1
  elseif op.epoch ~= h.epoch then
    isFresh = true
  end


  -- A store that lost writes it had answered (its record of the node is
  -- older than the last answer the node applied: a failover): the pool is
  -- taken as wholly spent now, as in a contest it lost.
  local known = h.recs[node]
  if not isFresh and op.applied ~= 0 and op.epoch == h.epoch and (known == nil or known.seq < op.applied) then
    h.poolState, h.poolAt = spent(p, now), now
    -- the node keeps no more than the store's record of it: what the lost
    -- writes granted it may have gone to another node since
    local recorded = 0
    if known ~= nil then recorded = known.grant + known.hold end
    held = math.min(held, recorded)
    keep = math.min(keep, held)
    r.lost = 1
  end

  -- 2. What lapsed: back to the pool as wholly spent, but for an even
  -- split, held back until the node could have recovered (it may be
  -- deciding degraded in one).
  local e = even(math.max(op.fleet, 1))
  for _, id in ipairs(h.ids) do
    local rec = h.recs[id]
    if rec.grant > 0 and rec.leaseEnd <= now then
      local hold = math.min(rec.grant, e)
      give(p, h, rec.grant - hold, decay(p, spent(p, rec.leaseEnd), rec.leaseEnd, now))
      rec.hold = rec.hold + hold
      rec.holdUntil = math.max(rec.holdUntil, rec.leaseEnd + set.recovery)
      rec.grant, rec.growth = 0, 0
      h.dirty[id] = true
    end
    if rec.hold > 0 and rec.holdUntil <= now then
      give(p, h, rec.hold, decay(p, spent(p, rec.holdUntil), rec.holdUntil, now))
      rec.hold = 0
      h.dirty[id] = true
    end
  end
  if h.unknown > 0 and h.unknownUntil <= now then
    give(p, h, h.unknown, decay(p, spent(p, h.unknownUntil), h.unknownUntil, now))
    h.unknown = 0
  end

  -- 3. The node's record against what it says it holds.
  local rec = h.recs[node]
  if rec == nil and isFresh then
    rec = record(h, node)
    rec.grant = held
    local take = 0
    if h.joins > 0 then
      take = math.min(held, h.reserved)
      h.reserved = h.reserved - take
      h.joins = h.joins - 1
      if h.joins == 0 and h.reserved > 0 then
        give(p, h, h.reserved, spent(p, now))
        h.reserved = 0
      end
    end
    if held > take then
      over(h, held - take)
      r.over = 1
    end
    if held > 0 and (op.full < 0 or op.full > h.exSince or keep > 0) then h.exOK = false end
  else
    rec = record(h, node)
    rec.grant, rec.hold = rec.grant + rec.hold, 0
    if held > rec.grant then
      over(h, held - rec.grant)
      r.over = 1
    elseif held < rec.grant then
      local d = rec.grant - held
      if rec.growth > 0 and d == rec.growth then
        give(p, h, d, decay(p, rec.growthState, rec.growthAt, now))
      else
        give(p, h, d, spent(p, now))
      end
    end
    rec.grant = held
  end
  rec.growth = 0
  if op.owed then owed(h, node, math.max(op.fleet, 1)) end

  -- The creator's shadow.
  if h.exOK and node == h.exNode and h.joins == 0 and op.shadow >= 0 and op.shadowSince >= h.exSince and
      not op.leave and held == rec.grant and h.unknown == 0 and not holders(h, node) then
    h.exOK = false
    h.pool = h.pool + held
    h.poolState = decay(p, {level = op.shadow, window = 0, count = 0, prev = 0}, op.at, now)
    h.poolAt = now
    rec.grant, held, keep = 0, 0, 0
    r.replace = 1
  elseif node == h.exNode and op.epoch == h.epoch and h.joins == 0 then
    h.exOK = false
  end

  -- 4. What it gives back; while the pool owes share, a node holding more
  -- than an even split pays the debt from the excess.
  if h.pool < 0 and keep > e then keep = math.max(keep + h.pool, e) end
  if held > keep then give(p, h, held - keep, state) end
  rec.grant = keep
  if op.leave then
    cap(h)
    rec.seq, rec.outcome, rec.growthAt = op.seq, DONE, now
    r.epoch = h.epoch
    r.expiry = extend(p, h)
    save(k, h)
    return r
  end

  -- 5. What it wants.
  local pool = decay(p, h.poolState, h.poolAt, now)
  local growth = 0
  if op.want > 0 and op.serve and keep == 0 then
    local at = math.min(math.max(op.asked, h.poolAt), now)
    local served = false
    if h.pool > 0 then
      local t = when(p, h.pool, op.want, decay(p, h.poolState, h.poolAt, at), at)
      if t >= 0 and t <= now then
        local x = decay(p, h.poolState, h.poolAt, t)
        h.poolState, h.poolAt = spend(p, x, h.pool, op.want), t
        pool = decay(p, h.poolState, h.poolAt, now)
        r.served, r.servedAt = op.want, t
        h.exOK = false
        served = true
      end
    end
    if not served then
      r.outcome, r.untl = short(p, h, node)
      if r.outcome == NOROOM and not holders(h, node) then
        r.untl = untilOf(p, h.pool, op.want, pool)
      end
    end
  elseif op.want > 0 then
    local d = grow(p, op.want, keep, state, pool, now)
    if d > 0 and d <= h.pool then
      growth = d
    elseif d ~= 0 then
      if h.pool > 0 and room(p, h.pool, pool, now) > 0 then growth = h.pool end
      if not holds(p, op.want, keep, state, growth, pool, now) then
        r.outcome, r.untl = short(p, h, node)
        if r.outcome == NOROOM and not holders(h, node) then
          r.untl = untilOf(p, keep + growth, op.want, merge(p, keep, state, growth, pool))
        end
      end
    end
  end
  if r.outcome == DONE and op.need > 0 and h.pool > growth then
    if alone(h, node) then
      growth = h.pool
    elseif op.need > keep + growth then
      growth = growth + math.min(op.need - keep - growth, h.pool - growth)
    end
  end
  if op.want > 0 and r.outcome == DONE then
    h.fails, h.quiet, h.callAt = 0, 0, 0
  end
  if growth > 0 then
    if node ~= h.exNode then h.exOK = false end
    h.pool = h.pool - growth
    rec.grant = rec.grant + growth
    rec.growth, rec.growthState = growth, pool
  end
  rec.growthAt, rec.seq, rec.outcome, rec.untl, rec.served, rec.servedAt = now, op.seq, r.outcome, r.untl, r.served, r.servedAt
  if rec.grant > 0 then rec.leaseEnd = now + set.lease end
  cap(h)
  r.epoch, r.grant, r.growth, r.pool, r.leaseEnd = h.epoch, rec.grant, growth, pool, rec.leaseEnd
  r.expiry = extend(p, h)
  save(k, h)
  return r
end

for i = 1, #KEYS do
  local a = 5 + (i - 1) * PER
  local n = function(j) return tonumber(ARGV[a + j]) end
  local p = {kind = n(1), interval = n(2), tolerance = n(3), capacity = n(4), period = n(5), rate = n(6)}
  local op = {epoch = n(7), held = n(8), keep = n(9), state = {level = n(10), window = n(11), count = n(12), prev = n(13)},
    at = n(14), want = n(15), asked = n(16), need = n(17), fleet = n(18), pooled = n(19) == 1, join = n(20) == 1,
    leave = n(21) == 1, serve = n(22) == 1, seq = n(23), full = n(24), shadow = n(25), shadowSince = n(26),
    owed = n(27) == 1, applied = n(28)}
  local ok, res = pcall(apply, KEYS[i], p, op)
  if ok then
    emit({1, res.outcome, res.epoch, res.grant, res.growth, res.pool.level, res.pool.window, res.pool.count,
      res.pool.prev, res.leaseEnd, res.expiry, res.untl, res.lost, res.over, res.replace, res.served, res.servedAt,
      res.now or now})
  else
    local msg = res
    if type(res) == 'table' then msg = res.err end
    emit({0, tostring(msg)})
  end
end
return out
