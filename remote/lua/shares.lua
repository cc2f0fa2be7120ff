-- shares.lua: Async mode's share protocol, the store's side: one op of a
-- node on each contested (key, limit), atomically, on Redis server TIME.
-- internal/storemodel is this script in Go, step for step, in the same
-- float64 arithmetic (Lua's numbers are doubles); a conformance test holds
-- the two to the same answers on a real redis-server. The protocol is
-- docs/protocol.md.
--
-- KEYS     one hash per (key, limit): m = the contest (epoch, expiry, pool
--          share and state, joins, the last call, quiet, fails, unknown,
--          the creator's shadow, the splits reserved for joins, and what
--          lets an op read only its own record: the sum of every record's
--          grant and hold, the earliest any of them lapses, the expiry
--          last set on the key), xn = the creator, r:<node> = each node's
--          record (grant, lease, the last growth and its state, the last op
--          and what it was told, what is held back for it, the latest call
--          it answered with nothing to spare), rs = the µs of the contest's
--          last reset (reset.lua).
-- ARGV     node, lease µs, call window µs, cooldown µs, recovery µs, home
--          lease µs, the number of departures the node knows of and each's
--          node and µs (share.Settings.Gone), the channel calls are published
--          on ('': none), then per key one argument, 30
--          values packed as little-endian doubles (OPARGS: one
--          struct.unpack, where 28 tonumbers cost Redis about 5% of the
--          op): the limit (kind, interval ns, tolerance ns,
--          capacity, period µs, rate) and the op (epoch, held, keep, level,
--          window, count, prev, at, want, asked, need, fleet, pooled, join,
--          leave, serve (0: no; else 1 + the weight of each request served,
--          0 when they differ), seq, full, shadow, shadow since, owed,
--          applied, heard, reset heard), followed by the key's registry
--          member (registry.lua), which names it in a call published.
-- Returns  now µs, then per key 20 values: 1, outcome, epoch, grant,
--          growth, pool state (4), lease end, expiry, until, lost, over,
--          replace, served, served at, now, exact (no room until then, and
--          nobody else holds any of the key), the contest's last reset (rs,
--          0: none); or for a key that failed: 0, the error, then 18 zeros.
--
-- A call the script answers (Call) is published on the channel at once, as
-- registry.lua would publish it (member, epoch, call, expiry, the contest's
-- last reset):
-- the holders hear it a round trip sooner than through the node's
-- heartbeat, which then records it in the registry without publishing it
-- again (a node that cannot hear the channel reads it there).
--
-- An op reads and writes the contest and its own record (HMGET, HSET):
-- every other record only when one may have lapsed (the earliest lapse has
-- come), when it asks after a call (who has answered), or when it reports
-- an outage (what the others hold). The steps and their order are the
-- model's, so the floating point sums come out the same.
local node = ARGV[1]
local LEASE, WINDOW, COOLDOWN, RECOVERY = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local HOMELEASE = math.max(tonumber(ARGV[6]), LEASE)
-- GONE: node → the µs it left the fleet.
local GONE, NGONE = {}, tonumber(ARGV[7])
for i = 1, NGONE do GONE[ARGV[6 + 2 * i]] = tonumber(ARGV[7 + 2 * i]) end
local CHANNEL = ARGV[8 + 2 * NGONE] or ''
local FIRST = 8 + 2 * NGONE -- the ARGV before the first op's
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local ONE = 32768
local DONE, WAIT, CALL, NOROOM, ENDED = 0, 1, 2, 3, 4
local BUCKET, FIXED, SLIDING, METER = 0, 1, 2, 3
local MAXFAILS, CALLWAIT = 5, 4
local STALE = 1000000 -- storemodel.StaleSeqAhead
local INF = math.huge
local META = '<dddddddddddddddddddd'
local OLDMETA = '<ddddddddddddddddd' -- an earlier release's contest: no sums
local REC = '<dddddddddddddddd'
local OLDREC = '<ddddddddddddddd' -- an earlier release's record: no heard
local OPARGS = '<' .. string.rep('d', 30) -- an op's values (ARGV above)
local rk = 'r:' .. node

-- The fast path: a request the pool serves (Serve) on a token bucket's
-- contest that no node holds any of, nothing held back, nothing lapsing
-- (per-client keys spread over the fleet, a key under its limit whose
-- nodes hold nothing), or that makes a pooled key's contest (a per-client
-- key's first request). It is the general path below step for step for that
-- case, in locals: the general path's forty functions are made anew on
-- every call (closures), and with its tables they were a third of what
-- such an op cost Redis. It answers nil, having written nothing, for any op
-- or contest outside the case (and what it read of the contest, which the
-- general path then reads no more); the general path then applies the op.
-- A test counts the ops it answers (remote's UseClockKey).
-- failed is a key's answer when its op raised err: 0, the error, 18 zeros.
local function failed(err)
  local msg = err
  if type(err) == 'table' then msg = err.err end
  return {0, tostring(msg), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end

-- recValues are a record's 16 values: an earlier release's record (15, no
-- heard) reads as one that heard no call.
local function recValues(v)
  if #v < 8 * 16 then
    local r = {struct.unpack(OLDREC, v)}
    return r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15], 0
  end
  return struct.unpack(REC, v)
end

-- markedReset is the reset reset.lua keeps of a key with no contest, from
-- the fields v read (HMGET m, xn, r:node, la, rs, rx): rs while rx has not
-- passed, else 0.
local function markedReset(v)
  if v[5] and tonumber(v[6] or 0) > now then return tonumber(v[5]) end
  return 0
end

local fastWrote -- set once serveFast has written the contest
local function serveFast(k, a)
  local kind, interval, tolerance, capacity, _, _, epoch, held, keep, _, _, _, _, _, want, asked, need, _,
    pooled, _, leave, serve, seq, _, shadow, _, owedOp, applied, heard, _ = struct.unpack(OPARGS, a)
  -- (Epoch 0: a node that has not joined the contest, holding nothing; not
  -- one carrying what it admitted alone, which charges the pool.)
  -- (Each test as the general path writes it, so that a value that is not
  -- a number compares the same.)
  if kind ~= BUCKET or not (serve >= 1) or held ~= 0 or keep ~= 0 or not (want > 0) or leave == 1 or
      owedOp == 1 or epoch == 0 and shadow > 0 then
    return nil
  end
  local each = math.max(serve - 1, 0)
  local refill = math.floor((capacity * interval + 999) / 1000) -- p.refill
  -- decay (a level, in ns, drained by µs)
  local function at(x, from, t)
    if t <= from then return x end
    local l = x - (t - from) * 1000
    if l < 0 then l = 0 end
    return l
  end
  -- when: the µs from t on at which share g at level x has room for w
  local function fits(g, w, x, t)
    if g <= 0 then return -1 end
    local most = tolerance - w * (interval * ONE) / g
    if most < 0 then return -1 end
    if x <= most then return t end
    return t + math.ceil((x - most) / 1000)
  end
  local v = redis.call('HMGET', k, 'm', 'xn', rk, 'la', 'rs', 'rx')
  if not v[1] then
    -- No contest: this request makes it (a per-client key's first request,
    -- or its first since its contest ended), its pool the whole limit, full
    -- when the request was made; served whole, its node is its home unless
    -- it needs nothing. (Not a key with an even split, whose contest holds
    -- splits back for the fleet; not a node carrying what it admitted
    -- alone, nor one that held the key in a contest now gone.)
    if epoch ~= 0 or pooled ~= 1 or shadow > 0 then return nil, v end
    local rs = markedReset(v)
    local poolAt = now
    if asked > 0 and asked < now then poolAt = math.max(asked, now - WINDOW) end
    local from = math.min(math.max(asked, poolAt), now)
    local t = fits(ONE, want, at(0, poolAt, from), from)
    if not (t >= 0 and t <= now) then return nil, v end
    local x1 = at(0, poolAt, t) + math.ceil(want * interval * ONE / ONE) -- the general path's sum, its pool the whole limit
    local level = at(x1, t, now)
    local grant, leaseEnd, lapse, lease, gs1 = 0, now + LEASE, INF, LEASE, 0
    if need > 0 then
      grant, leaseEnd, lapse, lease, gs1 = ONE, now + HOMELEASE, now + HOMELEASE, HOMELEASE, level
    end
    local expiry = now + 2 * lease + refill
    local ttl = expiry + LEASE
    redis.call('HSET', k, 'm', struct.pack(META, now, expiry, ONE - grant, x1, 0, 0, 0, t, 0, 0, 0, 0, 0, 0, 0, 0, 0, grant,
      lapse, ttl), 'la', string.format('%d %s', now, node), 'rs', rs,
      rk, struct.pack(REC, grant, leaseEnd, grant, gs1, 0, 0, 0, now, seq, DONE, 0, want, t, 0, 0, heard))
    fastWrote = true
    redis.call('PEXPIREAT', k, math.ceil(ttl / 1000))
    -- answered fast
    return {1, DONE, now, grant, grant, level, 0, 0, 0, leaseEnd, expiry, 0, 0, 0, 0, want, t, now, 0, rs}
  end
  if #v[1] < 160 or (v[2] or '') == node then return nil, v end -- an earlier release's contest, or its creator's
  local hEpoch, expiry, pool, ps1, ps2, ps3, ps4, poolAt, joins, callAt, quiet, fails, unknown, unknownUntil,
    exSince, exOK, reserved, hHeld, lapse, ttl = struct.unpack(META, v[1])
  if expiry <= now or epoch ~= 0 and hEpoch ~= epoch or hHeld ~= 0 or unknown ~= 0 or joins ~= 0 or reserved ~= 0 or
      lapse <= now then
    return nil, v
  end
  local grant, leaseEnd, growth, gs1, gs2, gs3, gs4, growthAt, rSeq, outcome, untl, served, servedAt, hold,
    holdUntil = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  if v[3] then
    grant, leaseEnd, growth, gs1, gs2, gs3, gs4, growthAt, rSeq, outcome, untl, served, servedAt, hold,
      holdUntil = recValues(v[3])
    if seq ~= 0 and (rSeq == seq or seq < rSeq and rSeq <= now + STALE) then return nil, v end -- a replay, a late copy
    if grant ~= 0 or hold ~= 0 then return nil, v end
  end
  if applied ~= 0 and (not v[3] or rSeq < applied) then return nil, v end -- a store that lost writes
  -- 5. What it wants: served from the pool.
  local level = at(ps1, poolAt, now)
  outcome, untl, served, servedAt = DONE, 0, 0, 0
  local exact, whole = 0, false
  local from = math.min(math.max(asked, poolAt), now)
  if pool > 0 then
    local t = fits(pool, want, at(ps1, poolAt, from), from)
    if t >= 0 and t <= now then
      ps1, poolAt = at(ps1, poolAt, t) + math.ceil(want * interval * ONE / pool), t
      level = at(ps1, poolAt, now)
      served, servedAt, exOK, whole = want, t, 0, true
    end
  end
  if not whole and pool > 0 then
    local f = tolerance - level
    local w = 0
    if f > 0 and each > 0 then
      w = math.min(math.floor(f * pool / (interval * ONE)), want - each)
      w = math.floor(w / each) * each
    end
    if w > 0 then
      level = level + math.ceil(w * interval * ONE / pool)
      ps1, poolAt = level, now
      served, servedAt, exOK = w, now, 0
    end
  end
  if not whole then
    -- No room, and nobody else holds any: until the pool's own refill.
    local nextWant = want - served
    if each > 0 and nextWant > each then nextWant = each end
    local t = fits(pool, nextWant, level, now)
    exact = 1
    if nextWant ~= 1 or pooled ~= 1 then exact = 0 end
    if t >= 0 then
      if t < now then untl = now else untl = t end
    else
      untl, exact = now + COOLDOWN, 0
    end
    outcome = NOROOM
  end
  -- The home rule: nobody holds any of it; a home is made unless another
  -- node asked last, within half a home lease (the general path reads every
  -- record to know).
  if need > 0 and pool > 0 then
    local t, who = string.match(v[4] or '', '^(%S+) (.*)$')
    if not (who and who ~= node and tonumber(t) > now - math.floor(HOMELEASE / 2)) then return nil, v end
  end
  if outcome == DONE then fails, quiet, callAt = 0, 0, 0 end
  if pool + unknown + reserved + hHeld > ONE then pool = pool - (pool + unknown + reserved + hHeld - ONE) end
  local e = now + 2 * LEASE + refill
  if e > expiry then expiry = e end
  local keepTTL = ttl
  if expiry > ttl then ttl = expiry + LEASE end
  redis.call('HSET', k, 'm', struct.pack(META, hEpoch, expiry, pool, ps1, ps2, ps3, ps4, poolAt, joins, callAt, quiet,
    fails, unknown, unknownUntil, exSince, exOK == 1 and 1 or 0, reserved, hHeld, lapse, ttl), 'la', string.format('%d %s', now, node),
    rk, struct.pack(REC, grant, leaseEnd, 0, gs1, gs2, gs3, gs4, now, seq, outcome, untl, served, servedAt, hold,
      holdUntil, heard))
  fastWrote = true -- from here on, answered: an error is the op's answer, as on the general path
  if ttl > keepTTL then redis.call('PEXPIREAT', k, math.ceil(ttl / 1000)) end
  -- answered fast
  return {1, outcome, hEpoch, grant, 0, level, ps2, ps3, ps4, leaseEnd, expiry, untl, 0, 0, 0, served, servedAt, now,
    exact, tonumber(v[5]) or 0}
end

-- Every op the fast path can answer is answered first, then the others
-- take the general path: each op reads and writes its own key alone, so
-- the order of different keys' ops changes nothing. (A call that names a
-- key twice, which a node never sends, takes the general path whole, in
-- order.)
local fast, nfast, read = {}, 0, {}
-- Each key once, each op's argument whole: else the general path takes the
-- call whole (it stops at an argument it cannot read, having written
-- nothing for the ops after it).
local usable, seen = true, {}
for i = 1, #KEYS do
  local a = ARGV[FIRST + i]
  if seen[KEYS[i]] or type(a) ~= 'string' or #a < 8 * 30 then usable = false end
  seen[KEYS[i]] = true
end
for i = 1, usable and #KEYS or 0 do
  fastWrote = false
  local ok, res, v = pcall(serveFast, KEYS[i], ARGV[FIRST + i])
  if ok and res then
    fast[i], nfast = res, nfast + 1
  elseif not ok and fastWrote then
    -- It failed after writing (as the general path would have): that error
    -- is the op's answer; applied again, the op would count twice.
    fast[i], nfast = failed(res), nfast + 1
  elseif ok then
    read[i] = v
  end
end
if nfast == #KEYS then
  local out = {now}
  for i = 1, #KEYS do
    for _, x in ipairs(fast[i]) do out[#out + 1] = x end
  end
  return out
end

-- The arithmetic of shares (share.Params). A state is {level, window,
-- count, prev}.

local function decay(p, x, at, t)
  if t <= at then return x end
  if p.level then
    local l = x[1] - (t - at) * 1000
    if l < 0 then l = 0 end
    return {l, x[2], x[3], x[4]}
  end
  local cur = math.floor(t / p.period)
  if x[2] >= cur then return x end
  if x[2] == cur - 1 and p.kind == SLIDING then return {0, cur, 0, x[3]} end
  return {0, cur, 0, 0}
end

local function merge(p, g1, x1, g2, x2)
  local g = g1 + g2
  if g <= 0 or g2 <= 0 then return x1 end
  if g1 <= 0 then return x2 end
  if p.level then
    return {math.ceil((g1 * x1[1] + g2 * x2[1]) / g), 0, 0, 0}
  end
  if x1[2] ~= x2[2] then
    if x2[2] > x1[2] then x1, g1 = x2, g2 end
    return {0, x1[2], math.ceil((g1 * x1[3] + g * 0) / (g1 + g)), math.ceil((g1 * x1[4] + g * 0) / (g1 + g))}
  end
  return {0, x1[2], math.ceil((g1 * x1[3] + g2 * x2[3]) / g), math.ceil((g1 * x1[4] + g2 * x2[4]) / g)}
end

local function free(p, x, t)
  if p.level then return p.tolerance - x[1] end
  if p.kind == FIXED then return p.rate * ONE - x[3] end
  local elapsed = t - x[2] * p.period
  if elapsed < 0 then elapsed = 0 elseif elapsed > p.period - 1 then elapsed = p.period - 1 end
  return p.rate * ONE - math.ceil(x[4] * (p.period - elapsed) / p.period) - x[3]
end

-- when(p, g, w, x, t): the µs from t on at which share g in state x has
-- room for w, or -1 when it never will.
local function when(p, g, w, x, t)
  if g <= 0 then return -1 end
  if p.kind == METER then
    if g < ONE or w > p.capacity then return -1 end
    local l = x[1]
    if l < 0 then l = 0 end
    return t + math.floor((l + 999) / 1000)
  end
  local need = w * (p.unit * ONE) / g
  if p.kind == BUCKET then
    local most = p.tolerance - need
    if most < 0 then return -1 end
    if x[1] <= most then return t end
    return t + math.ceil((x[1] - most) / 1000)
  end
  local most = p.rate * ONE - need
  if most < 0 then return -1 end
  if p.kind == FIXED then
    if x[3] <= most then return t end
    return (x[2] + 1) * p.period
  end
  local start = x[2] * p.period
  local elapsed = t - start
  if elapsed < 0 then elapsed = 0 elseif elapsed > p.period - 1 then elapsed = p.period - 1 end
  if x[3] <= most then
    if x[4] == 0 or x[4] * (p.period - elapsed) / p.period + x[3] <= most then return t end
    local e = p.period * (1 - (most - x[3]) / x[4])
    if e < p.period then return start + math.ceil(e) end
  end
  local nxt = (x[2] + 1) * p.period
  if x[3] == 0 or x[3] <= most then return nxt end
  return nxt + math.ceil(p.period * (1 - most / x[3]))
end

-- fresh is a state nothing was spent of, as of now: what a reset makes.
local function fresh(p)
  return decay(p, {0, 0, 0, 0}, 0, now)
end

local function spent(p, t)
  if p.level then return {p.capacity * p.interval, 0, 0, 0} end
  return {0, math.floor(t / p.period), p.rate * ONE, 0}
end

local function even(n)
  if n <= 1 then return ONE end
  return math.floor(1 / n * ONE + 0.5) -- math.Round(1/n * One): half away from zero, as Go's
end

-- The contest's hash.

local function unrec(v)
  local r = {recValues(v)}
  return {grant = r[1], leaseEnd = r[2], growth = r[3], gs = {r[4], r[5], r[6], r[7]}, growthAt = r[8],
    seq = r[9], outcome = r[10], untl = r[11], served = r[12], servedAt = r[13], hold = r[14], holdUntil = r[15],
    heard = r[16]}
end

local function newRec()
  return {grant = 0, leaseEnd = 0, growth = 0, gs = {0, 0, 0, 0}, growthAt = 0,
    seq = 0, outcome = 0, untl = 0, served = 0, servedAt = 0, hold = 0, holdUntil = 0, heard = 0}
end

-- setShare sets a record's grant and hold, keeping the contest's sum of
-- them and its earliest lapse.
local function setShare(h, r, grant, hold)
  h.held = h.held + (grant - r.grant) + (hold - r.hold)
  r.grant, r.hold = grant, hold
end

local function noteLapse(h, r)
  if r.grant > 0 and r.leaseEnd < h.lapse then h.lapse = r.leaseEnd end
  if r.hold > 0 and r.holdUntil < h.lapse then h.lapse = r.holdUntil end
end

-- all reads every record of h, once: the others' too.
local function all(h)
  if h.whole then return end
  h.whole = true
  local raw = redis.call('HGETALL', h.key)
  for i = 1, #raw, 2 do
    local f = raw[i]
    if string.sub(f, 1, 2) == 'r:' then
      local id = string.sub(f, 3)
      if h.recs[id] == nil then h.recs[id] = unrec(raw[i + 1]) end
    end
  end
end

-- The contest (h) with its own record only; every record once all() ran.
-- v: the contest's fields as the fast path read them (nil: read them).
local function load(k, v)
  v = v or redis.call('HMGET', k, 'm', 'xn', rk, 'la', 'rs', 'rx')
  if not v[1] then
    -- no contest; a reset of it is kept an active window, for the contest
    -- an op makes
    return nil, false, markedReset(v)
  end
  local aggregates = #v[1] >= 160
  local m
  if aggregates then m = {struct.unpack(META, v[1])} else m = {struct.unpack(OLDMETA, v[1])} end
  local h = {key = k, epoch = m[1], expiry = m[2], pool = m[3], ps = {m[4], m[5], m[6], m[7]},
    poolAt = m[8], joins = m[9], callAt = m[10], quiet = m[11], fails = m[12], unknown = m[13],
    unknownUntil = m[14], exSince = m[15], exOK = m[16] == 1, reserved = m[17], held = 0, lapse = INF,
    ttl = 0, exNode = v[2] or '', recs = {}, dirty = {}, whole = false, xnDirty = false, la = v[4] or false,
    resetAt = tonumber(v[5]) or 0}
  if h.expiry <= now then
    redis.call('DEL', k) -- expired, to the µs: the contest has ended
    return nil, true
  end
  if v[3] then h.recs[node] = unrec(v[3]) end
  if aggregates then
    h.held, h.lapse, h.ttl = m[18], m[19], m[20]
  else
    -- Written by a node of an earlier release (a rolling upgrade): the
    -- sums are made from every record.
    all(h)
    for _, r in pairs(h.recs) do
      h.held = h.held + r.grant + r.hold
      noteLapse(h, r)
    end
  end
  return h
end

-- ids returns the nodes of h's records in order (all() ran).
local function ids(h)
  local out = {}
  for id, _ in pairs(h.recs) do out[#out + 1] = id end
  table.sort(out)
  return out
end

local function newHash(p, t, k)
  return {key = k, epoch = t, expiry = 0, pool = 0, ps = decay(p, {0, 0, 0, 0}, 0, t), poolAt = t, joins = 0,
    reserved = 0, callAt = 0, quiet = 0, fails = 0, unknown = 0, unknownUntil = 0, exSince = 0, exOK = false,
    exNode = '', held = 0, lapse = INF, ttl = 0, recs = {}, dirty = {}, whole = true, xnDirty = false, la = false,
    resetAt = 0}
end

-- record is node id's record, made if absent; it will be written.
local function record(h, id)
  local r = h.recs[id]
  if r == nil then
    r = newRec()
    h.recs[id] = r
  end
  h.dirty[id] = true
  return r
end

local function save(h)
  local args = {'m', ''}
  if h.rsDirty then
    args[#args + 1] = 'rs'
    args[#args + 1] = h.resetAt
  end
  if h.xnDirty then
    args[#args + 1] = 'xn'
    args[#args + 1] = h.exNode
  end
  if h.laDirty then
    args[#args + 1] = 'la'
    args[#args + 1] = h.la
  end
  for id, _ in pairs(h.dirty) do
    local r = h.recs[id]
    noteLapse(h, r)
    args[#args + 1] = 'r:' .. id
    args[#args + 1] = struct.pack(REC, r.grant, r.leaseEnd, r.growth, r.gs[1], r.gs[2], r.gs[3], r.gs[4], r.growthAt,
      r.seq, r.outcome, r.untl, r.served, r.servedAt, r.hold, r.holdUntil, r.heard)
  end
  local ttl = h.ttl
  if h.expiry > ttl then ttl = h.expiry + LEASE end
  args[2] = struct.pack(META, h.epoch, h.expiry, h.pool, h.ps[1], h.ps[2], h.ps[3], h.ps[4], h.poolAt,
    h.joins, h.callAt, h.quiet, h.fails, h.unknown, h.unknownUntil, h.exSince, h.exOK and 1 or 0, h.reserved,
    h.held, h.lapse, ttl)
  redis.call('HSET', h.key, unpack(args))
  if ttl > h.ttl then
    -- The key outlives the contest's expiry by up to a lease (load treats
    -- it as gone at the expiry): re-expired once a lease, not every op.
    redis.call('PEXPIREAT', h.key, math.ceil(ttl / 1000))
  end
end

local function give(p, h, g, x)
  if g <= 0 then return end
  local pool = decay(p, h.ps, h.poolAt, now)
  if h.pool > 0 then h.ps = merge(p, h.pool, pool, g, x) else h.ps = x end
  h.poolAt = now
  h.pool = h.pool + g
end

local function extend(p, h, lease)
  local e = now + 2 * lease + p.refill
  if e > h.expiry then h.expiry = e end
  return h.expiry
end

-- others reports whether a node but id holds a grant or a hold of h.
local function others(h, id)
  local r = h.recs[id]
  if r then return h.held - r.grant - r.hold > 0 end
  return h.held > 0
end

-- askedElsewhere reports whether the last op of a node but id, if after
-- since, asked for room on h: it was served, grew, or was told to wait or
-- that there was no room. The key has demand elsewhere. (A node's later op,
-- a give or a renewal, hides an earlier ask.) It reads every record.
local function askedElsewhere(h, id, since)
  all(h)
  for rid, r in pairs(h.recs) do
    if rid ~= id and r.growthAt > since and (r.served > 0 or r.growth > 0 or r.outcome ~= DONE) then return true end
  end
  return false
end

-- askedLast reports whether the last op that asked for room on h (la: "µs
-- node") was another node's, after since: read without the records.
local function askedLast(h, id, since)
  if not h.la then return false end
  local t, who = string.match(h.la, '^(%S+) (.*)$')
  return who ~= id and tonumber(t) > since
end

-- goneHeld reports whether a node gone from the fleet (GONE) holds a
-- grant of h it has not reported since it left: it reads the gone nodes'
-- records alone, not every record.
local function goneHeld(h)
  local fields, who = {}, {}
  for id, _ in pairs(GONE) do
    if id ~= node and h.recs[id] == nil then
      fields[#fields + 1] = 'r:' .. id
      who[#who + 1] = id
    end
  end
  if #fields > 0 and not h.whole then
    local vals = redis.call('HMGET', h.key, unpack(fields))
    for i, v in ipairs(vals) do
      if v then h.recs[who[i]] = unrec(v) end
    end
  end
  for id, left in pairs(GONE) do
    local r = h.recs[id]
    if id ~= node and r and r.grant > 0 and r.growthAt < left and left <= now then return true end
  end
  return false
end

-- untilOf is when share g of h in state x has room for w (at the
-- earliest now), and 1 when that is exact; or, when it never will, a
-- cooldown's end, and 0. Not exact while h holds shares back that will
-- join the pool (unknown, reserved for joins): a larger pool may have the
-- room sooner; nor for more than one request's weight, since a lighter
-- request may fit sooner; nor for a key with an even split (pooled false),
-- whose room nodes may hold in their splits.
local function untilOf(p, h, g, w, x, pooled)
  local t = when(p, g, w, x, now)
  local exact = 1
  if h.unknown > 0 or h.reserved > 0 or w ~= 1 or not pooled then exact = 0 end
  if t >= 0 then
    if t < now then return now, exact end
    return t, exact
  end
  return now + COOLDOWN, 0
end

-- Every node but id holding a grant has reported since the last call.
local function answered(h, id)
  all(h)
  for other, r in pairs(h.recs) do
    if other ~= id and r.grant > 0 and r.growthAt < h.callAt then return false end
  end
  return true
end

-- heard reports whether every node but id holding a grant has answered the
-- last call with nothing to spare: its last op was made after it heard the
-- call while it refused requests alone for want of room (the op's heard),
-- or asked for room after the call and was not given it. No room will come
-- from them: the asker is told so, rather than wait out the call's window.
-- It reads every record.
local function heard(h, id)
  all(h)
  for other, r in pairs(h.recs) do
    if other ~= id and r.grant > 0 and r.heard < h.callAt and (r.growthAt < h.callAt or r.outcome == DONE) then
      return false
    end
  end
  return true
end

-- refilled reports whether a node but id holds the whole key (a home) and
-- was last told it had no room until an instant now past, with no call
-- since. It reads every record only when another node holds the whole key.
local function refilled(h, id)
  local own = 0
  local r = h.recs[id]
  if r then own = r.grant + r.hold end
  if h.held - own < ONE then return false end
  all(h)
  for other, rec in pairs(h.recs) do
    if other ~= id and rec.grant >= ONE and rec.outcome == NOROOM and rec.untl <= now and rec.growthAt >= h.callAt then return true end
  end
  return false
end

-- short: what a node whose want the pool cannot hold does (storemodel's
-- short). soon is when the pool alone has room for the request (µs; -1:
-- never): a call every holder has answered still waits out its window if
-- the pool's own refill brings the room within it (not the asker's own
-- share's: on a key over its limit it always comes, and the node's own
-- next requests take it).
local function short(h, id, soon)
  if h.joins > 0 and h.callAt == 0 then
    h.callAt = now
    return CALL, 0
  elseif h.joins > 0 then
    return WAIT, 0
  elseif not others(h, id) then
    return NOROOM, now + COOLDOWN
  elseif h.callAt ~= 0 and now - h.callAt < WINDOW and soon >= 0 and soon < h.callAt + WINDOW then
    return WAIT, 0 -- the pool's refill is coming (tested before heard, which reads every record)
  elseif h.callAt ~= 0 and now - h.callAt < WINDOW and not heard(h, id) then
    return WAIT, 0 -- the call's answers are still coming
  elseif h.callAt ~= 0 and now - h.callAt < CALLWAIT * WINDOW and not answered(h, id) then
    return WAIT, 0
  elseif now >= h.quiet then
    if h.callAt ~= 0 and h.callAt >= h.quiet and now - h.callAt < CALLWAIT * WINDOW and not refilled(h, id) then
      h.fails = math.min(h.fails + 1, MAXFAILS)
      h.quiet = now + COOLDOWN * 2 ^ h.fails
      return NOROOM, h.quiet
    end
    h.callAt = now
    return CALL, 0
  elseif refilled(h, id) then
    -- A home told no room until an instant now past (it refuses alone
    -- until its refill) has its room again, which no call since asked of
    -- it: called, whatever the quiet.
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
  all(h)
  local e = even(n)
  local want, seen = 0, 0
  for _, other in ipairs(ids(h)) do
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
  if h.unknown > 0 then h.unknownUntil = math.max(h.unknownUntil, now + LEASE + RECOVERY) end
end

local function cap(h)
  local total = h.pool + h.unknown + h.reserved + h.held
  if total > ONE then h.pool = h.pool - (total - ONE) end
end

-- carriesSpend reports whether op carries what its node admitted alone, in
-- an even split of a token bucket the fleet's growth made pooled (its
-- shadow), and nothing else of it (no share held, nothing owed): a report
-- of it, wanting nothing, makes the key's contest, its pool starting as
-- spent; a join of a contest another node made first charges the pool
-- with it.
local function carriesSpend(p, op)
  return op.pooled and op.epoch == 0 and p.kind == BUCKET and op.shadow > 0 and not op.leave and op.held <= 0 and
    not op.owed
end

-- chargeSpend charges h's pool with what op's node admitted alone (its
-- shadow, as of now), at most 2^53 (share.MaxCharge).
local function chargeSpend(p, h, op)
  local x = decay(p, h.ps, h.poolAt, now)
  local sh = decay(p, {op.shadow, 0, 0, 0}, op.at, now)
  h.ps, h.poolAt = {x[1] + math.min(math.ceil(sh[1] * ONE / h.pool), 9007199254740992), x[2], x[3], x[4]}, now
end

-- nextWant is what the next of the requests op waits for weighs, once
-- served of them were: the oldest's weight when they weigh the same
-- (op.each, served ops only), else all of them. A refusal until room for
-- all of them (a burst of 1 never holds 2) would refuse the next one past
-- its room.
local function nextWant(op, served)
  local w = op.want - served
  if op.serve and op.each > 0 and w > op.each then return op.each end
  return w
end

-- One op.
local function apply(k, p, op, read)
  local h, ended, rs = load(k, read) -- ended: the contest expired (its pool refilled), not lost
  rs = rs or 0
  -- A node that has not heard of the key's last reset (it hears through
  -- the registry, a beat or so later) sends its state from before it.
  local before = (h and h.resetAt or rs) > op.resetHeard
  local r = {outcome = DONE, epoch = 0, grant = 0, growth = 0, pool = {0, 0, 0, 0},
    leaseEnd = 0, expiry = 0, untl = 0, lost = 0, over = 0, replace = 0, served = 0, servedAt = 0, now = now, exact = 0,
    reset = h and h.resetAt or 0}
  local held = op.held
  if held < 0 then held = 0 elseif held > ONE then held = ONE end
  local keep = op.keep
  if keep < 0 then keep = 0 elseif keep > held then keep = held end
  if op.leave then keep = 0 end
  local state = decay(p, op.state, op.at, now)

  -- The same op again (its answer was lost, or a retry crossed it):
  -- answered as it was, whatever contest it names.
  local old = h and h.recs[node]
  if old and op.seq ~= 0 and old.seq == op.seq then
    r.outcome, r.untl, r.epoch, r.grant, r.leaseEnd = old.outcome, old.untl, h.epoch, old.grant, old.leaseEnd
    r.growth, r.pool, r.served, r.servedAt = old.growth, old.gs, old.served, old.servedAt
    r.now = old.growthAt
    r.expiry = h.expiry
    return r
  end
  -- An earlier op than the last one answered: a late copy (a call abandoned
  -- at its timeout that ran after the resend was answered and the key's
  -- next op sent), or, should the clock have stepped back, a new process
  -- under this node's name. Applied as nothing, answered Wait with nothing
  -- granted or served: a late copy's answer is read by nobody, and a new
  -- process asks again with a later seq. (Not as the last op was answered:
  -- a new process would admit on the old one's Served.) Unless the last
  -- op's seq is ahead of the clock by more than STALE.
  if old and op.seq ~= 0 and op.seq < old.seq and old.seq <= now + STALE then
    r.outcome, r.epoch, r.expiry = WAIT, h.epoch, h.expiry
    return r
  end

  -- 1. Which contest.
  local isFresh = false
  if h == nil and op.epoch ~= 0 and held > 0 and not op.leave then
    h = newHash(p, now, k)
    h.resetAt, h.rsDirty, r.reset = rs, true, rs
    h.unknown, h.unknownUntil = ONE - held, now + LEASE + RECOVERY
    local r0 = record(h, node)
    setShare(h, r0, held, 0)
    r0.leaseEnd = now + LEASE
    r.lost = 1
  elseif h == nil and op.want <= 0 and not carriesSpend(p, op) or h == nil and op.leave then
    r.outcome = ENDED
    return r
  elseif h == nil then
    h = newHash(p, now, k)
    h.resetAt, h.rsDirty, r.reset = rs, true, rs
    if op.asked > 0 and op.asked < now then
      -- A new contest's pool is the part of the limit nobody held: as
      -- full when the request waiting on it was made (up to a call window
      -- ago) as now, and the pool serves it then, as an exact limiter would.
      local t0 = math.max(op.asked, now - WINDOW)
      h.ps, h.poolAt = decay(p, {0, 0, 0, 0}, 0, t0), t0
    end
    local fleet = math.max(op.fleet, 1)
    if not op.pooled then
      h.joins = fleet - 1
      h.reserved = h.joins * even(fleet)
    elseif op.epoch == 0 and p.kind == BUCKET and op.shadow > 0 and not before then
      -- a pooled key its creator decided before the fleet grew: what it
      -- admitted so is spent (its shadow, as of the op's time), and the
      -- pool starts no fuller (unless the key was reset since, and the
      -- creator has not heard of it)
      local s = decay(p, {op.shadow, 0, 0, 0}, op.at, h.poolAt)
      if s[1] > h.ps[1] then h.ps = {s[1], h.ps[2], h.ps[3], h.ps[4]} end
    end
    if op.epoch ~= 0 and not ended then
      -- the node held nothing of a contest that is gone before the node saw
      -- it end: lost (deleted, evicted, a restart) with what its pool had
      -- spent: the pool starts wholly spent, as a lost contest's does (not
      -- one that expired as the op came: its grants had lapsed and its
      -- pool refilled)
      held, keep = 0, 0
      h.ps, h.poolAt = spent(p, now), now
      r.lost = 1
    end
    h.pool = ONE - h.reserved - held
    local r0 = record(h, node)
    setShare(h, r0, held, 0)
    r0.leaseEnd = now + LEASE
    if op.epoch == 0 and not op.pooled and op.shadow >= 0 and not before then
      h.exNode, h.exSince, h.exOK, h.xnDirty = node, op.shadowSince, true, true
    end
  elseif op.epoch ~= h.epoch and op.epoch ~= 0 and held > 0 and (h.joins == 0 or h.recs[node] ~= nil) then
    -- a grant of a contest the store lost (a node the contest still waits
    -- to hear from joins with it instead, below)
    local take = math.min(held, h.unknown)
    h.unknown = h.unknown - take
    h.pool = h.pool - (held - take)
    local r0 = record(h, node)
    setShare(h, r0, held, r0.hold)
    r0.leaseEnd = now + LEASE
    r.lost = 1
  elseif op.epoch ~= h.epoch then
    isFresh = true
  end

  -- What a node that has not heard of the contest's last reset gives back
  -- returns fresh, as the reset made the pool, and what it admitted alone
  -- charges nothing. (Given as it was, a spent state spent the fresh pool
  -- again.)
  local given, heard = state, op.heard
  if before then
    -- (and a call it answers with nothing to spare was answered of that
    -- state: the asker waits for its answer of the fresh one)
    given, heard = fresh(p), 0
  end
  -- spentAt: what a share spent at t returns as now; fresh when t is before
  -- the contest's last reset (it lapsed, unreported, before the reset made
  -- the share nobody held fresh).
  local function spentAt(t)
    if t <= h.resetAt then return fresh(p) end
    return decay(p, spent(p, t), t, now)
  end

  -- A store that lost writes it had answered (its record of the node is
  -- older than the last answer the node applied: a failover): the pool is
  -- taken as wholly spent now, as in a contest it lost.
  local known = h.recs[node]
  if not isFresh and op.applied ~= 0 and op.epoch == h.epoch and (known == nil or known.seq < op.applied) then
    h.ps, h.poolAt = spent(p, now), now
    -- the node keeps no more than the store's record of it: what the lost
    -- writes granted it may have gone to another node since
    local recorded = 0
    if known ~= nil then recorded = known.grant + known.hold end
    if recorded < held then held = recorded end
    if held < keep then keep = held end
    r.lost = 1
  end

  -- 2. What lapsed: back to the pool as wholly spent, but for an even
  -- split, held back until the node could have recovered (it may be
  -- deciding degraded in one). Only once the earliest lapse has come.
  -- A node gone from the fleet uses none of its grants from when it left:
  -- what it has not reported since lapses then.
  local e = even(math.max(op.fleet, 1))
  if h.lapse <= now or NGONE > 0 and others(h, node) and goneHeld(h) then
    all(h)
    h.lapse = INF
    for _, id in ipairs(ids(h)) do
      local rec = h.recs[id]
      local ends = rec.leaseEnd
      local left = GONE[id]
      if left and id ~= node and rec.growthAt < left and left < ends then ends = left end
      if rec.grant > 0 and ends <= now then
        local hold = math.min(rec.grant, e)
        give(p, h, rec.grant - hold, spentAt(ends))
        setShare(h, rec, 0, rec.hold + hold)
        rec.holdUntil = math.max(rec.holdUntil, ends + RECOVERY)
        rec.growth = 0
        h.dirty[id] = true
      end
      if rec.hold > 0 and rec.holdUntil <= now then
        give(p, h, rec.hold, spentAt(rec.holdUntil))
        setShare(h, rec, rec.grant, 0)
        h.dirty[id] = true
      end
      noteLapse(h, rec)
    end
  end
  if h.unknown > 0 and h.unknownUntil <= now then
    give(p, h, h.unknown, spentAt(h.unknownUntil))
    h.unknown = 0
  end

  -- 3. The node's record against what it says it holds.
  local rec = h.recs[node]
  if rec == nil and isFresh then
    rec = record(h, node)
    setShare(h, rec, held, 0)
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
    if carriesSpend(p, op) and h.pool > 0 and not before then
      -- it decided the key alone before the fleet grew, and another node
      -- made the contest first: the pool is charged with that spend
      chargeSpend(p, h, op)
    end
  else
    if rec ~= nil and carriesSpend(p, op) and rec.grant == 0 and rec.hold == 0 and rec.growthAt > 0 and
        op.shadowSince > rec.growthAt and h.pool > 0 and not before then
      -- it held nothing here (an op of its was answered: not the record
      -- this op's contest was just made with), went back to its even split
      -- and decided the key alone since its last op: charged, as a join
      chargeSpend(p, h, op)
    end
    rec = record(h, node)
    setShare(h, rec, rec.grant + rec.hold, 0)
    if held > rec.grant then
      over(h, held - rec.grant)
      r.over = 1
    elseif held < rec.grant then
      local d = rec.grant - held
      if rec.growth > 0 and d == rec.growth and rec.growthAt < h.resetAt then
        give(p, h, d, fresh(p)) -- the pool's state then was from before the reset
      elseif rec.growth > 0 and d == rec.growth then
        give(p, h, d, decay(p, rec.gs, rec.growthAt, now))
      else
        give(p, h, d, spent(p, now))
      end
    end
    setShare(h, rec, held, 0)
  end
  rec.growth = 0
  if op.owed then owed(h, node, math.max(op.fleet, 1)) end

  -- The creator's shadow.
  if h.exOK and node == h.exNode and h.joins == 0 and op.shadow >= 0 and op.shadowSince >= h.exSince and
      not op.leave and held == rec.grant and h.unknown == 0 and not others(h, node) then
    h.exOK = false
    h.pool = h.pool + held
    h.ps = decay(p, {op.shadow, 0, 0, 0}, op.at, now)
    h.poolAt = now
    setShare(h, rec, 0, 0)
    held, keep = 0, 0
    r.replace = 1
  elseif node == h.exNode and op.epoch == h.epoch and h.joins == 0 then
    h.exOK = false
  end

  -- 4. What it gives back; while the pool owes share, a node holding more
  -- than an even split pays the debt from the excess.
  if h.pool < 0 and keep > e then keep = math.max(keep + h.pool, e) end
  if held > keep then give(p, h, held - keep, given) end
  setShare(h, rec, keep, 0)
  if op.leave then
    cap(h)
    rec.seq, rec.outcome, rec.growthAt, rec.heard = op.seq, DONE, now, heard
    r.epoch = h.epoch
    r.expiry = extend(p, h, LEASE)
    save(h)
    return r
  end

  -- 5. What it wants.
  local pool = decay(p, h.ps, h.poolAt, now)
  local growth = 0
  if op.want > 0 and op.serve and keep == 0 then
    local at = math.min(math.max(op.asked, h.poolAt), now)
    local served = false
    if h.pool > 0 then
      local t = when(p, h.pool, op.want, decay(p, h.ps, h.poolAt, at), at)
      if t >= 0 and t <= now then
        local x = decay(p, h.ps, h.poolAt, t)
        if p.level then
          x = {x[1] + math.ceil(op.want * p.interval * ONE / h.pool), x[2], x[3], x[4]}
        else
          x = {x[1], x[2], x[3] + math.ceil(op.want * ONE * ONE / h.pool), x[4]}
        end
        h.ps, h.poolAt = x, t
        pool = decay(p, h.ps, h.poolAt, now)
        r.served, r.servedAt = op.want, t
        h.exOK = false
        served = true
      end
    end
    if not served and h.pool > 0 and p.kind ~= METER then
      -- The pool has room for some of the requests that wait, not all: as
      -- many whole ones as it holds, now, the oldest first (storemodel says
      -- why).
      local f = free(p, pool, now)
      local w = 0
      if f > 0 and op.each > 0 then
        w = math.min(math.floor(f * h.pool / (p.unit * ONE)), op.want - op.each)
        w = math.floor(w / op.each) * op.each
      end
      if w > 0 then
        if p.level then
          pool = {pool[1] + math.ceil(w * p.interval * ONE / h.pool), pool[2], pool[3], pool[4]}
        else
          pool = {pool[1], pool[2], pool[3] + math.ceil(w * ONE * ONE / h.pool), pool[4]}
        end
        h.ps, h.poolAt = pool, now
        r.served, r.servedAt = w, now
        h.exOK = false
      end
    end
    if not served then
      r.outcome, r.untl = short(h, node, when(p, h.pool, nextWant(op, r.served), pool, now))
      if r.outcome == NOROOM and not others(h, node) then
        r.untl, r.exact = untilOf(p, h, h.pool, nextWant(op, r.served), pool, op.pooled)
      end
    end
  elseif op.want > 0 then
    -- Grow: the least share that, joined to what it keeps, makes room.
    local d
    if p.kind == METER then
      if keep >= ONE and state[1] <= 0 then d = 0
      elseif merge(p, keep, state, ONE - keep, pool)[1] <= 0 then d = ONE - keep
      else d = -1 end
    else
      local fx = free(p, state, now)
      if fx < 0 then fx = 0 end
      local sh = op.want * (p.unit * ONE) - keep * fx
      if sh <= 0 then d = 0
      else
        local f = free(p, pool, now)
        if f <= 0 then d = -1 else d = math.ceil(sh / f) end
      end
    end
    if d > 0 and d <= h.pool then
      growth = d
    elseif d ~= 0 then
      local roomy
      if h.pool <= 0 then roomy = false
      elseif p.kind == METER then roomy = h.pool >= ONE and pool[1] <= 0
      else
        local f = free(p, pool, now)
        roomy = f > 0 and math.floor(f * h.pool / (p.unit * ONE)) > 0
      end
      if roomy then growth = h.pool end
      local holds
      if p.kind == METER then
        holds = keep + growth >= ONE and merge(p, keep, state, growth, pool)[1] <= 0 and op.want <= p.capacity
      else
        local fx, fp = free(p, state, now), free(p, pool, now)
        if fx < 0 then fx = 0 end
        if fp < 0 then fp = 0 end
        holds = keep * fx + growth * fp >= op.want * (p.unit * ONE)
      end
      if not holds then
        r.outcome, r.untl = short(h, node, when(p, h.pool, op.want, pool, now))
        if r.outcome == NOROOM and not others(h, node) then
          r.untl = untilOf(p, h, keep + growth, op.want, merge(p, keep, state, growth, pool))
        end
      end
    end
  end
  -- Nobody else holds any of it, nor asked for any within a lease: all of
  -- it here, one bucket holding the whole limit as one exact limiter would;
  -- with no room too (the node then refuses alone, exactly, until its own
  -- refill). The key's demand has a home. A request the pool served makes
  -- one only when no other node asked within half a home lease: sparse
  -- demand that moves between the nodes is served, a request an op, rather
  -- than called from one home to the next.
  if op.need > 0 and h.pool > growth and (r.outcome == DONE or r.outcome == NOROOM) then
    local since = now - LEASE
    if op.serve then since = now - math.floor(HOMELEASE / 2) end
    if not others(h, node) and h.joins == 0 and h.unknown == 0 and
        (r.outcome == DONE and not op.serve or
          not (op.serve and askedLast(h, node, since)) and not askedElsewhere(h, node, since)) then
      growth = h.pool
      if r.outcome == NOROOM then
        -- Its room comes from the whole limit's refill now.
        r.untl, r.exact = untilOf(p, h, keep + growth, nextWant(op, r.served), merge(p, keep, state, growth, pool), op.pooled)
      end
    elseif r.outcome == DONE and not op.serve and op.need > keep + growth then
      growth = growth + math.min(op.need - keep - growth, h.pool - growth)
    end
  end
  if op.want > 0 and r.outcome == DONE then
    h.fails, h.quiet, h.callAt = 0, 0, 0
  end
  if growth > 0 then
    if node ~= h.exNode then h.exOK = false end
    h.pool = h.pool - growth
    setShare(h, rec, rec.grant + growth, 0)
    rec.growth, rec.gs = growth, pool
  end
  if op.want > 0 then
    h.la, h.laDirty = string.format('%d %s', now, node), true
  end
  rec.growthAt, rec.seq, rec.outcome, rec.untl, rec.served, rec.servedAt = now, op.seq, r.outcome, r.untl, r.served, r.servedAt
  rec.heard = heard
  local lease = LEASE
  if rec.grant >= ONE then lease = HOMELEASE end -- a home
  if rec.grant > 0 then rec.leaseEnd = now + lease end
  cap(h)
  r.epoch, r.grant, r.growth, r.pool, r.leaseEnd = h.epoch, rec.grant, growth, pool, rec.leaseEnd
  r.expiry = extend(p, h, lease)
  save(h)
  return r
end

local out = {now}
for i = 1, #KEYS do
  if fast[i] then
    for _, x in ipairs(fast[i]) do out[#out + 1] = x end
  else
    local v = {struct.unpack(OPARGS, ARGV[FIRST + i])}
    local kind = v[1]
    local p = {kind = kind, level = kind == BUCKET or kind == METER, interval = v[2], tolerance = v[3],
      capacity = v[4], period = v[5], rate = v[6]}
    if p.level then
      p.unit, p.refill = p.interval, math.floor((p.capacity * p.interval + 999) / 1000)
    else
      p.unit, p.refill = ONE, 2 * p.period
    end
    local op = {epoch = v[7], held = v[8], keep = v[9], state = {v[10], v[11], v[12], v[13]}, at = v[14],
      want = v[15], asked = v[16], need = v[17], fleet = v[18], pooled = v[19] == 1, join = v[20] == 1,
      leave = v[21] == 1, serve = v[22] >= 1, each = math.max(v[22] - 1, 0), seq = v[23], full = v[24],
      shadow = v[25], shadowSince = v[26], owed = v[27] == 1, applied = v[28], heard = v[29], resetHeard = v[30]}
    local ok, res = pcall(apply, KEYS[i], p, op, read[i])
    if ok and res.outcome == CALL and res.now == now and CHANNEL ~= '' and #ARGV[FIRST + i] > 8 * 30 then
      -- Published as the registry would (the contest's last reset with it),
      -- once: not again for an op answered again as it was (its call is
      -- from then). The member joined whole: a key may hold any byte (a
      -- format's %s stops at a zero byte). A publish refused fails no op:
      -- the node's heartbeat records the call all the same.
      redis.pcall('PUBLISH', CHANNEL, string.sub(ARGV[FIRST + i], 8 * 30 + 1) ..
        string.format('\n%d\n%d\n%d\n%d', res.epoch, res.now, res.expiry, res.reset or 0))
    end
    if ok then
      local x = res.pool
      out[#out + 1] = 1
      out[#out + 1] = res.outcome
      out[#out + 1] = res.epoch
      out[#out + 1] = res.grant
      out[#out + 1] = res.growth
      out[#out + 1] = x[1]
      out[#out + 1] = x[2]
      out[#out + 1] = x[3]
      out[#out + 1] = x[4]
      out[#out + 1] = res.leaseEnd
      out[#out + 1] = res.expiry
      out[#out + 1] = res.untl
      out[#out + 1] = res.lost
      out[#out + 1] = res.over
      out[#out + 1] = res.replace
      out[#out + 1] = res.served
      out[#out + 1] = res.servedAt
      out[#out + 1] = res.now
      out[#out + 1] = res.exact
      out[#out + 1] = res.reset
    else
      for _, x in ipairs(failed(res)) do out[#out + 1] = x end
    end
  end
end
return out
