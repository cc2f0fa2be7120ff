-- contest.lua: the shares of a contested key, on Redis server TIME,
-- atomically per key. A batch may hold keys of every algorithm but the
-- sliding window log; on a Cluster, a batch holds one key.
--
-- Every node decides a key in its share of the key's limit, in its own
-- memory: a private bucket (or window) of that share of the limit's rate and
-- capacity. While the shares add up to at most the whole limit, the fleet
-- never admits more than one node holding the whole limit would. A key
-- nobody contests is split evenly among the fleet and never comes here. A
-- contested key's shares are held here: a grant per node, and a pool of the
-- share nobody holds. Capacity moves between a node and the pool with the
-- state it carries, so that moving it never creates room: a node that gives
-- up part of its share gives up as much of its spent state, and a node that
-- takes from the pool takes the pool's spent state with it.
--
-- States are in the units of a node's estimate of the whole limit: for the
-- buckets, the level (how far the theoretical arrival time runs ahead of
-- now, ns), which drains one ns per ns whatever the share; for the windows,
-- the window and its counts (and the previous window's, for the sliding
-- counter). A share holding a fraction g of the limit with state x has spent
-- g times x.
--
-- KEYS     one hash per (key, limit): c = the µs the contest began; P = the
--          pool (struct: share, state, µs); s = the ledger (every weight the
--          nodes reported admitting); x = the ms the key expires at; and per
--          node n:<node> = its record (struct: grant, lease end µs, the last
--          answer's sequence number, the growth it carried and the pool's
--          state then, demand, the µs it was last seen, the heavy request the
--          answer admitted) and l:<node> = its
--          two latest ledger epochs with their totals (ledger.lua's too);
--          Z = the µs the key was last reset (reset.lua).
-- ARGV     node, active window µs, keep ms (how long the key and its
--          ledger outlive its last report), lease µs, short lease µs, the
--          fleet's size, the fleet's acked µs (every node has processed the
--          claims made before it), then per key fifteen values: kind (0
--          bucket, 1 fixed window, 2 sliding window counter); interval ns
--          (bucket) or period µs (window); tolerance ns (bucket) or rate
--          (window); the grant the node decides in now (it shrinks before
--          it reports, never after); its state (bucket: level ns, 0, 0;
--          window: w, c, p); the sequence number of the last answer it
--          applied (0: none yet); its demand (requests per second); its
--          ledger epoch, total and acknowledged total; the weight of a request
--          to decide now (0: none); 1 when the node claims the key, 2 when it
--          leaves it (it stops: its share returns to the pool, and it wants
--          nothing more); and 1 when a request was denied there since its
--          last report.
--
-- Grants. A node's target is its demand over the demand of every node active
-- on the key (each given a floor of a tenth of an even split). A node below
-- its target grows from the pool; a node denied requests (pressure) takes
-- half of what the pool has left beyond that too, so no share sits unused
-- while a node is refused. A node above its target is told its target, and
-- shrinks to it before its next report when another node recalls the key. A grant larger than an even split of the
-- fleet holds for the short lease, others for the long one; a lease that
-- lapses leaves the node an even split at most (it shrinks a margin early on
-- its own clock), and the part it gave up returns to the pool as if wholly
-- spent when it lapsed. Until every node has processed the claim (acked), the
-- nodes that have not joined still hold an even split each.
--
-- An answer the node never got: its growth is returned to the pool, with the
-- state that went with it, when the node reports again without having
-- applied it. A node that reports a grant larger than its record (it decided
-- degraded, or Redis lost the key) is believed: the pool shrinks, below zero
-- if need be, until shares come back within the limit.
--
-- Returns now (µs), then per key thirteen values:
--   1, grant, lease end µs, growth, pool state (three), target, answer
--   sequence, flags (1 lost: Redis had no record of a node that had one;
--   2: the request was admitted; 4: recall: the node's want cannot be met
--   from the pool while others hold more than they want; 8: the node
--   reported more than its record; 16: the request was served from the
--   pool, which holds its spend; 32 reset: the key was reset since the
--   node's state began, which it must start afresh), active nodes, their
--   demand (thousandths)
-- or for a key that failed: 0, the error, then eleven zeros.
local node, active, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, short, fleet, acked = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local nowMs = math.floor(now / 1000)
local ONE = 32768
local PER = 15
local REC = '<ddddddddddd'
local out = {now}
local o = 1
local mine = 'n:' .. node
if fleet < 1 then fleet = 1 end
local even = math.floor(ONE / fleet)

local function emit(...)
  local v = {...}
  for i = 1, 13 do out[o + i] = v[i] or 0 end
  o = o + 13
end

local function iserr(r) return type(r) == 'table' and r.err ~= nil end

-- decay returns state (a, b, c) of µs t as of now: a bucket drains, a
-- window rolls over.
local function decay(kind, unit, a, b, c, t)
  if kind == 0 then
    local l = a - (now - t) * 1000
    if l < 0 then l = 0 end
    return l, 0, 0
  end
  local cur = math.floor(now / unit)
  if a < cur - 1 then return cur, 0, 0 end
  if a == cur - 1 then return cur, 0, b end
  return a, b, c -- the current window (or ahead: a clock that stepped back)
end

-- mixState joins two states of a kind: levels average; windows average
-- their counts in the current window.
local function mixState(kind, g1, a1, b1, c1, g2, a2, b2, c2)
  local g = g1 + g2
  if g <= 0 then return a1, b1, c1 end
  if kind == 0 then return (g1 * a1 + g2 * a2) / g, 0, 0 end
  if a1 ~= a2 then -- different windows after decay: keep the later one's
    if a2 > a1 then return a2, g2 * b2 / g, g2 * c2 / g end
    return a1, g1 * b1 / g, g1 * c1 / g
  end
  return a1, (g1 * b1 + g2 * b2) / g, (g1 * c1 + g2 * c2) / g
end

-- full is the state of a share wholly spent at µs at, as of now.
local function full(kind, unit, cap, at)
  if kind == 0 then return decay(0, unit, cap, 0, 0, at) end
  return decay(kind, unit, math.floor(at / unit), cap, 0, at)
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 7 + (i - 1) * PER
  local kind = tonumber(ARGV[a + 1])
  local unit, cap = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local gb = tonumber(ARGV[a + 4])
  local x1, x2, x3 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local applied, demand = tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9])
  local epoch, total, ackedTotal = tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11]), tonumber(ARGV[a + 12])
  local heavy, claim, pressure = tonumber(ARGV[a + 13]), ARGV[a + 14] == '1', ARGV[a + 15] == '1'
  local leaving = ARGV[a + 14] == '2'
  local period = unit
  x1, x2, x3 = decay(kind, period, x1, x2, x3, now) -- the node's window may lag: roll it

  local h = redis.pcall('HGETALL', key)
  if iserr(h) then
    emit(0, h.err)
  else
    local f = {}
    for j = 1, #h, 2 do f[h[j]] = h[j + 1] end
    local flags = 0
    local began = tonumber(f.c)
    if began == nil then began = now end
    local relost = f.r == '1' -- the contest began again after Redis lost the key

    -- Every node's record.
    local recs, names = {}, {}
    for k, v in pairs(f) do
      if string.byte(k, 1) == 110 and string.byte(k, 2) == 58 then -- "n:"
        local r = {struct.unpack(REC, v)}
        recs[k] = r
        names[#names + 1] = k
      end
    end

    -- A contest none of whose nodes has reported for longer than its claim
    -- can live is over: the claim expired (a claim is renewed only along
    -- with a report, and lives a lease and the limit's refill time after
    -- that) and every node went back to deciding the key in an even split
    -- of its own. A report now begins a new contest, in which the nodes
    -- hold even splits (counted as such until they have processed the new
    -- claim): the old records, pool and start say nothing of that, and
    -- taken at their word they would hand the even splits the nodes are
    -- spending to the first node that reports, as unspent. (Records merely
    -- quiet for the active window are not enough: a node holding an even
    -- split or less of an idle key has no reason to report it.)
    local restarted, dropped = false, {}
    if #names > 0 then
      local refill = kind == 0 and math.ceil(cap / 1000) or 2 * unit
      local over = lease + refill + active
      restarted = true
      for _, k in ipairs(names) do
        if now - recs[k][10] <= over then restarted = false break end
      end
    end
    if restarted then
      for _, k in ipairs(names) do dropped[#dropped + 1] = k end
      recs, names = {}, {}
      began, relost = now, false
      f.P, f.W, f.Wn, f.We = nil, nil, nil, nil
    end

    -- The pool, as of now.
    local ps, pa, pb, pc = 0, 0, 0, 0
    if f.P then
      local pt
      ps, pa, pb, pc, pt = struct.unpack('<ddddd', f.P)
      pa, pb, pc = decay(kind, period, pa, pb, pc, pt)
    elseif kind ~= 0 then
      pa = math.floor(now / period)
    end
    local poolIn = function(g, a1, b1, c1)
      if ps <= 0 then
        pa, pb, pc = a1, b1, c1
      else
        pa, pb, pc = mixState(kind, ps, pa, pb, pc, g, a1, b1, c1)
      end
      ps = ps + g
    end

    local unledger = 0 -- a request admitted in an answer the node never got
    local me = recs[mine]
    -- A reset (reset.lua) since the node last reported, or shortly before
    -- its first report: the state it holds predates it. It starts afresh,
    -- told by flag 32, and what it reports is taken as fresh.
    local z = tonumber(f.Z)
    if z ~= nil and ((me ~= nil and me[10] < z) or (me == nil and now - z <= active)) then
      flags = flags + 32
      if kind == 0 then x1, x2, x3 = 0, 0, 0 else x1, x2, x3 = math.floor(now / period), 0, 0 end
    end
    if me == nil then
      if applied > 0 and not restarted then
        -- It had a record: Redis lost the key. Every node that held a
        -- share must rejoin before any share it may hold is handed out:
        -- the contest begins again now, and the node recalls the others.
        flags = flags + 1
        began = now
        relost = true
      end
      me = {gb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
      recs[mine] = me
      names[#names + 1] = mine
    else
      -- Growth the node never applied goes back to the pool, as it left;
      -- a request admitted in an answer the node never got leaves the
      -- ledger (the pool keeps it spent: the limit stays on the safe side).
      if applied < me[3] and me[4] > 0 then
        local ta, tb, tc = decay(kind, period, me[5], me[6], me[7], me[8])
        poolIn(me[4], ta, tb, tc)
        me[1] = me[1] - me[4]
        me[4] = 0
      end
      if applied < me[3] and (me[11] or 0) > 0 then
        unledger = me[11]
        me[11] = 0
      end
      if gb < me[1] then
        poolIn(me[1] - gb, x1, x2, x3) -- what the node gave up, as spent as the node
        me[1] = gb
      elseif gb > me[1] then
        flags = flags + 8
        me[1] = gb
      end
    end

    -- The others: lapsed leases, and what they hold.
    local held, count, sum = 0, 1, 0
    for _, k in ipairs(names) do
      if k ~= mine then
        local r = recs[k]
        if r[2] <= now and r[1] > even then
          local fa, fb, fc = full(kind, period, cap, r[2])
          poolIn(r[1] - even, fa, fb, fc)
          r[1] = even
          r.dirty = true
        end
        held = held + r[1]
        if now - r[10] <= active then
          count = count + 1
          sum = sum + r[9] / 1000
        end
      end
    end
    -- Until every node has processed the claim (and a short lease has
    -- passed, so that a share above an even split no record shows has
    -- lapsed), the nodes without a record still hold an even split each.
    local implicit = 0
    if acked < began or (relost and now < began + short) then
      implicit = math.max(fleet - #names, 0) * even
    end
    -- Capacity nobody accounts for (an even split released when the fleet
    -- acked the claim, a smaller fleet) joins the pool unspent; capacity
    -- accounted for twice (a larger fleet, a node that reported more than
    -- its record) comes out of the pool, below zero if need be.
    local free = ONE - held - me[1] - implicit - ps
    if free > 0 then
      if relost then
        -- What the pool held was lost with the key: taken as wholly spent
        -- when the contest began again, refilling since.
        poolIn(free, full(kind, period, cap, began))
      else
        poolIn(free, full(kind, period, 0, now))
      end
    elseif free < 0 then
      ps = ps + free
    end

    -- The node's demand and target.
    if me[10] > 0 and now - me[10] <= active then demand = (demand + me[9] / 1000) / 2 end
    sum = sum + demand
    -- The pool's own demand: heavy requests, decided from the pool, at a
    -- rate smoothed over a second. It earns the pool its part of the limit,
    -- so that nodes whose requests are too heavy for their shares leave
    -- the capacity where those requests are served.
    local pd, pdt = tonumber(f.Pd) or 0, tonumber(f.Pdt) or now
    pd = pd * math.exp(-(now - pdt) / 1000000)
    if heavy > 0 then pd = pd + heavy end
    sum = sum + pd
    -- A heavy request that found no room holds the key's want: until it
    -- is admitted or its short lease passes, the other nodes' targets leave
    -- it the share it needs, and a recall makes them give it up.
    local wantBy, wantN, wantEnd = f.W, tonumber(f.Wn) or 0, tonumber(f.We) or 0
    if wantEnd <= now then wantBy, wantN = nil, 0 end
    -- One request's worth of the limit: every active node's target holds
    -- at least that when the limit has room for it, so that a node never
    -- holds a share too small for a request of weight 1 (which it would
    -- have to ask Redis for).
    local oneReq = math.ceil(ONE / math.max(kind == 0 and cap / unit or cap, 1))
    local function target(d, who)
      local t
      if count <= 1 then
        t = ONE
      elseif sum <= 0 then
        t = even
      else
        -- Each node's demand counts with a floor fl: a tenth of an even
        -- split's, and what gives the least demanding one request.
        local fl = 0.1 * sum / count
        if count * oneReq < ONE then fl = math.max(fl, oneReq * sum / (ONE - count * oneReq)) end
        t = math.floor(ONE * (d + fl) / (sum + fl * count))
      end
      if wantBy ~= nil then
        t = math.floor(t * (ONE - wantN) / ONE) -- room for the request the pool must serve
      end
      return t
    end
    local want = target(demand, node)
    if leaving then want, heavy, pressure = 0, 0, false end

    -- Growth from the pool, for the target and for the request.
    local grow = 0
    local avail = math.floor(math.max(ps, 0))
    if want > me[1] then grow = math.min(want - me[1], avail) end
    if pressure and avail > grow then grow = grow + math.ceil((avail - grow) / 2) end
    local admitted = false
    local fromPool = false
    if heavy > 0 and ps > 0 then
      -- The pool serves it if it has the room: a share ps of the limit
      -- counts each request 1/ps times, as a node's does.
      local used = pa
      if kind ~= 0 then
        used = pb + (kind == 2 and pc or 0)
        if pa ~= math.floor(now / period) then used = 0 end
      end
      local w = heavy * (kind == 0 and unit or 1) * ONE
      if ps * (cap - used) >= w then
        if kind == 0 then pa = pa + w / ps else pb = pb + w / ps end
        fromPool, admitted = true, true
        flags = flags + 2 + 16
        if wantBy == node then wantBy, wantN, wantEnd = nil, 0, 0 end
      end
    end
    if heavy > 0 and not fromPool then
      -- Room after growing by d: (g+d)(cap - x') >= heavy·unit·ONE, x' the
      -- mixed state, solved for d.
      local g = me[1]
      local own, pst
      if kind == 0 then
        own, pst = cap - x1, cap - pa
      else
        own, pst = cap - (x2 + (kind == 2 and x3 or 0)), cap - (pb + (kind == 2 and pc or 0))
        if pa ~= x1 then pst = cap end -- the pool's counts are of another window
      end
      local need = heavy * (kind == 0 and unit or 1) * ONE - g * own
      local d = 0
      if need > 0 then
        if pst > 0 then d = math.ceil(need / pst) else d = avail + 1 end
      end
      if d <= avail then
        grow = math.max(grow, d)
        admitted = true
        flags = flags + 2
        if wantBy == node then wantBy, wantN, wantEnd = nil, 0, 0 end
      elseif wantBy == nil or wantBy == node then
        -- No room: want the share the request needs, from a fresh pool.
        wantBy, wantEnd = node, now + short
        wantN = math.min(math.ceil(heavy * (kind == 0 and unit or 1) * ONE / cap), ONE)
      end
    end
    if grow > 0 then
      me[1] = me[1] + grow
      ps = ps - grow
    end
    -- A want within a request (or an eighth) of the grant is no want: under
    -- demand above the limit on every node, targets move a little with each
    -- report, and recalling for that would make every node report the key
    -- every few rounds for nothing.
    local slack = math.max(oneReq, math.floor(me[1] / 8))
    if (heavy > 0 and not admitted) or (want - me[1] >= slack and avail - grow <= 0) then
      -- Recall: others hold more than they want.
      local excess = 0
      for _, k in ipairs(names) do
        if k ~= mine then
          local r = recs[k]
          if now - r[10] <= active then
            local t = target(r[9] / 1000, string.sub(k, 3))
            if r[1] - t >= math.max(oneReq, math.floor(t / 8)) then excess = excess + r[1] - t end
          elseif r[1] > 0 then
            excess = excess + r[1]
          end
        end
      end
      if excess > 0 or implicit > 0 then flags = flags + 4 end
    end

    -- The node's record.
    me[3] = me[3] + 1
    me[4], me[5], me[6], me[7], me[8] = grow, pa, pb, pc, now
    if me[1] > even then me[2] = now + short else me[2] = now + lease end
    me[9], me[10] = math.floor(demand * 1000 + 0.5), now
    if leaving then me[1], me[2], me[9], me[10] = 0, 0, 0, 0 end
    -- The ledger: what exceeds the totals applied for the node's epochs.
    local lk = 'l:' .. node
    local ea, ca, eb, cb = 0, 0, 0, 0
    if f[lk] then ea, ca, eb, cb = struct.unpack('<dddd', f[lk]) end
    local draw = 0
    if ea == 0 or epoch > ea then
      draw = math.max(total - ackedTotal, 0)
      eb, cb, ea, ca = ea, ca, epoch, total
    elseif epoch == ea then
      draw = math.max(total - ca, 0)
      ca = math.max(ca, total)
    elseif epoch == eb then
      draw = math.max(total - cb, 0)
      cb = math.max(cb, total)
    end
    if admitted then
      draw = draw + heavy
      if epoch == ea then ca = ca + heavy end
    end
    me[11] = admitted and heavy or 0
    if unledger > 0 then
      draw = draw - unledger
      ca = math.max(ca - unledger, 0)
    end

    local w = {'c', began, 'r', relost and 1 or 0, 'W', wantBy or '', 'Wn', wantN, 'We', wantEnd, 'Pd', pd, 'Pdt', now, 'P', struct.pack('<ddddd', ps, pa, pb, pc, now), mine,
      struct.pack(REC, me[1], me[2], me[3], me[4], me[5], me[6], me[7], me[8], me[9], me[10], me[11]),
      lk, struct.pack('<dddd', ea, ca, eb, cb)}
    for _, k in ipairs(names) do
      local r = recs[k]
      if r.dirty then
        w[#w + 1], w[#w + 2] = k, struct.pack(REC, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11] or 0)
      end
    end
    if draw ~= 0 then w[#w + 1], w[#w + 2] = 's', math.max((tonumber(f.s) or 0) + draw, 0) end
    -- The key lives while a lease does, and while its state matters.
    local untilMs = math.floor(me[2] / 1000)
    if kind == 0 then
      untilMs = math.max(untilMs, nowMs + math.ceil(cap / 1000000))
    else
      untilMs = math.max(untilMs, math.ceil((math.floor(now / period) + 2) * period / 1000))
    end
    local need = math.max(untilMs, nowMs + math.ceil(active / 1000)) + keep
    local expire = (tonumber(f.x) or 0) < need
    if expire then w[#w + 1], w[#w + 2] = 'x', need + keep end
    local r = 0
    if #dropped > 0 then
      -- The old contest's records, but for the reporting node's (rewritten).
      local gone = {}
      for _, k in ipairs(dropped) do if k ~= mine then gone[#gone + 1] = k end end
      if #gone > 0 then r = redis.pcall('HDEL', key, unpack(gone)) end
    end
    if not iserr(r) then r = redis.pcall('HSET', key, unpack(w)) end
    if iserr(r) then
      emit(0, r.err)
    else
      if expire then redis.pcall('PEXPIREAT', key, need + keep) end
      emit(1, me[1], me[2], grow, pa, pb, pc, want, me[3], flags, count, math.floor(sum * 1000 + 0.5))
    end
  end
end
return out
