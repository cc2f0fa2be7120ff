-- reconcile.lua: apply one node's reports on a batch of keys, on Redis server
-- TIME, atomically per key. A batch may hold keys of every algorithm but the
-- sliding window log; on a Cluster, a batch holds one key.
--
-- KEYS     one hash per (key, limit): the state fields of gcra.lua or
--          window.lua, x = the ms at which the key expires, s = the ledger
--          (every weight ever applied), and per node that reports on the key
--          e:<node> = "ea:ca:ha:eb:cb:hb" (its two latest epochs, each with
--          the raw total and the charged total applied) and g:<node> =
--          "grant:lease:demand:seen" (its share of the limit in 1/32768,
--          until when, in server µs; its demand in thousandths of a request
--          per second; when it last reported, server µs).
-- ARGV     node, active window µs, keep ms, lease µs, short lease µs, the
--          number of nodes in the fleet, then per key sixteen
--          values: kind (0 bucket, 1 fixed window, 2 sliding window
--          counter); interval ns (bucket) or period µs (window); tolerance ns
--          (bucket) or rate (window); the epoch; the raw total spent in it;
--          the charged total; the acknowledged raw and charged totals; the
--          window the spend was made in (windows); the demand (requests per
--          second); the node's estimate of the key's state (bucket: level
--          ns, 0, 0; window: w, c, p); a heavy request's weight to decide
--          now (0 for none); the sync decisions whose fate the node does not
--          know ("seq:n seq:n ...", their sequence numbers and weights; "0"
--          for none); and the node's low mark of sequence numbers (0: none).
--
-- Sync decisions that timed out. The decide scripts keep in q:<node> every
-- admitted decision of the node above its low mark. A report names the
-- decisions it counts whose calls timed out: the weight of each found in
-- q:<node> is not applied again, and it leaves q:<node>, so that a report
-- sent twice subtracts it once; each not found goes to d:<node>, so that its
-- call, should it still arrive, changes nothing. q:<node> forgets what is at
-- or below the low mark; d:<node> keeps its newest 256.
--
-- Reports are idempotent. A node reports the totals it spent on a key since
-- the counter's epoch began, never a difference, and the hash remembers per
-- node the totals it applied for the node's two latest epochs: only what
-- exceeds them is applied. A report sent twice (a round the client stopped
-- waiting for did reach Redis, and was sent again), or late after a newer
-- one, changes nothing. When the hash has no record of an epoch, only what
-- the node was never told was applied is.
--
-- Two totals: the raw total is every weight admitted, and goes to the ledger;
-- the charged total is what weighs on the limit: the same, but for spend made
-- while the node was degraded, which is charged only for what of it had not
-- refilled when the node could report it (a client that stayed within its
-- limit through an outage is not charged for it again afterwards). Nothing
-- caps the debt that charges make: over-admission is always paid back.
--
-- Loss. A node that has been told its spend was applied (acked > 0) and finds
-- the key's state gone (evicted, deleted, a Redis restarted empty), or its
-- epoch's total lower than what it was told, knows the key went back behind
-- spend it reported. The state is then restored to at least the node's own
-- estimate of it, the totals are applied again, and the answer says so.
--
-- Shares. Each node's share of the limit is granted under a lease: its
-- demand over the demand of every node active on the key (each given a floor
-- of a tenth of an even split), but never more than what the live leases of
-- the other nodes leave: the shares granted never add up to more than one,
-- however long ago each was granted. A lease lapses unless renewed; a node
-- whose lease lapsed decides in its default share until it reports again.
-- A share above an even split of the fleet holds only for the short lease:
-- a node that took most of a key while alone on it gives way within a few
-- intervals to nodes that join, which meanwhile ask Redis for each request.
--
-- Returns now (µs), then per key nine values:
--   1, state (bucket: level ns, 0, 0; window: w, c, p), nodes active,
--   their total demand (thousandths), the grant, its lease end (µs),
--   flags (1: the state had been lost; 2: the heavy request was admitted)
-- or for a key that failed: 0, 0, 0, 0, 0, the error, 0, 0, 0.
local node, active, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, short, fleet = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local nowMs = math.floor(now / 1000)
local ONE = 32768
local PER = 16
local out = {now}
local o = 1
local ek, gk, qk, dk = 'e:' .. node, 'g:' .. node, 'q:' .. node, 'd:' .. node

-- above returns the sequence numbers of list (space separated) above low,
-- in order, as a table.
local function above(list, low)
  local t = {}
  for q in string.gmatch(list or '', '%d+') do
    if tonumber(q) > low then t[#t + 1] = q end
  end
  return t
end

local function emit(a, b, c, d, e, f, g, h, i)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, d, e
  out[o + 6], out[o + 7], out[o + 8], out[o + 9] = f, g, h, i
  o = o + 9
end

local function iserr(r) return type(r) == 'table' and r.err ~= nil end

local function failed(err)
  emit(0, 0, 0, 0, 0, type(err) == 'table' and err.err or tostring(err), 0, 0, 0)
end

-- Integers are written with %d: Lua's own tostring keeps only 14 digits.
local function int(x) return string.format('%d', x) end

for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 6 + (i - 1) * PER
  local kind = ARGV[a + 1]
  local unit, tau = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local epoch, total, charge = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local acked, ackedCharge = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
  local sw, demand = tonumber(ARGV[a + 9]), tonumber(ARGV[a + 10])
  local e1, e2, e3 = tonumber(ARGV[a + 11]), tonumber(ARGV[a + 12]), tonumber(ARGV[a + 13])
  local heavy, useqs, seqLow = tonumber(ARGV[a + 14]), ARGV[a + 15], tonumber(ARGV[a + 16]) or 0

  local h = redis.pcall('HGETALL', key)
  if iserr(h) then
    failed(h)
  else
    local f = {}
    for j = 1, #h, 2 do f[h[j]] = h[j + 1] end
    local hasState = f.t ~= nil or f.w ~= nil

    -- What of the report was not applied before.
    local ea, ca, ha, eb, cb, hb
    if f[ek] then
      local x1, x2, x3, x4, x5, x6 = string.match(f[ek], '^(%d+):(%d+):(%d+):(%d*):(%d*):(%d*)$')
      ea, ca, ha = tonumber(x1), tonumber(x2) or 0, tonumber(x3) or 0
      eb, cb, hb = tonumber(x4), tonumber(x5) or 0, tonumber(x6) or 0
    end
    local draw, dcharge, lost = 0, 0, false
    if ea == nil or epoch > ea then
      draw, dcharge = math.max(total - acked, 0), math.max(charge - ackedCharge, 0)
      lost = acked > 0 and not hasState
      if ea ~= nil then eb, cb, hb = ea, ca, ha end
      ea, ca, ha = epoch, total, charge
    elseif epoch == ea then
      lost = acked > ca
      draw, dcharge = math.max(total - ca, 0), math.max(charge - ha, 0)
      ca, ha = math.max(ca, total), math.max(ha, charge)
    elseif eb ~= nil and epoch == eb then
      lost = acked > cb
      draw, dcharge = math.max(total - cb, 0), math.max(charge - hb, 0)
      cb, hb = math.max(cb, total), math.max(hb, charge)
    end
    -- Sync decisions that timed out and were also decided, and counted, in
    -- memory: each that did reach Redis is in the state already; each that
    -- did not is fenced off.
    local qNew, dNew
    if useqs ~= '0' or (seqLow > 0 and f[qk]) then
      local q, d = above(f[qk], seqLow), above(f[dk], 0)
      local at = {}
      for j, s in ipairs(q) do at[s] = j end
      local sub = 0
      for s, w in string.gmatch(useqs, '(%d+):(%d+)') do
        if at[s] then
          sub = sub + tonumber(w)
          q[at[s]], at[s] = false, nil
        else
          d[#d + 1] = s
        end
      end
      draw, dcharge = math.max(draw - sub, 0), math.max(dcharge - sub, 0)
      local kept = {}
      for _, s in ipairs(q) do
        if s then kept[#kept + 1] = s end
      end
      -- The fence outlives the low mark (a call can arrive late), but keeps
      -- only the newest 256: a call older than those is long gone.
      local fence = {}
      for j = math.max(#d - 255, 1), #d do fence[#fence + 1] = d[j] end
      qNew, dNew = table.concat(kept, ' '), table.concat(fence, ' ')
    end

    local w = {}
    local x, y, z, untilMs
    local admitted = 0
    if kind == '0' then
      local level = 0
      local t, l = tonumber(f.t), tonumber(f.l)
      if t and l then
        level = l - (now - t) * 1000
        if level < 0 then level = 0 end
      end
      if lost and e1 > level then level = e1 end
      level = level + dcharge * unit
      if heavy > 0 and level + heavy * unit <= tau then
        level = level + heavy * unit
        admitted = 1
      end
      w[1], w[2], w[3], w[4] = 't', now, 'l', level
      x, y, z = level, 0, 0
      untilMs = nowMs + math.ceil(level / 1000000)
    else
      local period, rate = unit, tau
      local cur = math.floor(now / period)
      local kw, c, p = tonumber(f.w), tonumber(f.c) or 0, tonumber(f.p) or 0
      if kw == nil or kw < cur - 1 then
        c, p = 0, 0
      elseif kw == cur - 1 then
        p, c = c, 0
      elseif kw > cur then
        cur = kw -- Redis's clock stepped back: never reopen a window
      end
      if lost and e1 == cur then
        if e2 > c then c = e2 end
        if e3 > p then p = e3 end
      end
      if sw >= cur then
        c = c + draw
      elseif sw == cur - 1 and kind == '2' then
        p = p + draw
      end
      if heavy > 0 then
        local used = c
        if kind == '2' then
          local elapsed = now - cur * period
          if elapsed < 0 then elapsed = 0 end
          used = math.ceil(p * (period - elapsed) / period) + c
        end
        if used + heavy <= rate then
          c = c + heavy
          admitted = 1
        end
      end
      w[1], w[2], w[3], w[4], w[5], w[6] = 'w', cur, 'c', c, 'p', p
      x, y, z = cur, c, p
      untilMs = math.ceil((cur + 2) * period / 1000)
    end
    if admitted == 1 then
      draw = draw + heavy
      ca, ha = ca + heavy, ha + heavy
    end
    local n = #w
    w[n + 1], w[n + 2] = 's', int((tonumber(f.s) or 0) + draw)
    local eField = int(ea) .. ':' .. int(ca) .. ':' .. int(ha) .. ':'
    if eb ~= nil then eField = eField .. int(eb) .. ':' .. int(cb) .. ':' .. int(hb) else eField = eField .. '::' end
    w[n + 3], w[n + 4] = ek, eField
    local drop = {}
    if qNew ~= nil then
      if qNew ~= '' then
        w[#w + 1] = qk
        w[#w + 1] = qNew
      else
        drop[#drop + 1] = qk
      end
      if dNew ~= '' then
        w[#w + 1] = dk
        w[#w + 1] = dNew
      else
        drop[#drop + 1] = dk
      end
      n = #w - 4 -- the fields below go after these
    end

    -- The node's demand, and the share it is granted.
    local pd, pseen = nil, nil
    if f[gk] then
      local _, _, d0, s0 = string.match(f[gk], '^(%d+):(%d+):(%d+):(%d+)$')
      pd, pseen = tonumber(d0), tonumber(s0)
    end
    if pd and pseen and now - pseen <= active then
      demand = (demand + pd / 1000) / 2
    end
    local count, sum, used = 1, demand, 0
    local stale = {}
    for k, v in pairs(f) do
      if string.byte(k, 1) == 103 and string.byte(k, 2) == 58 and k ~= gk then -- "g:"
        local g1, l1, d1, s1 = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
        local seen = tonumber(s1) or 0
        if now - seen <= active then
          count = count + 1
          sum = sum + (tonumber(d1) or 0) / 1000
        elseif now - seen > 60 * active then
          local id = string.sub(k, 3)
          stale[#stale + 1] = k
          stale[#stale + 1] = 'e:' .. id
          stale[#stale + 1] = 'q:' .. id
          stale[#stale + 1] = 'd:' .. id
        end
        if (tonumber(l1) or 0) > now then
          used = used + (tonumber(g1) or 0)
        end
      end
    end
    local target
    if count <= 1 then
      target = ONE
    elseif sum <= 0 then
      target = math.floor(ONE / count)
    else
      local fl = 0.1 * sum / count
      target = math.floor(ONE * (demand + fl) / (sum + fl * count))
    end
    local grant = math.min(target, ONE - used)
    if grant < 0 then grant = 0 end
    local leaseEnd = now + lease
    if fleet > 1 and grant * fleet > ONE then leaseEnd = now + short end
    w[n + 5], w[n + 6] = gk, int(grant) .. ':' .. int(leaseEnd) .. ':' .. int(math.floor(demand * 1000 + 0.5)) .. ':' .. int(now)

    -- The key must outlive its state, its leases and its nodes' activity.
    local need = math.max(untilMs, nowMs + math.ceil(active / 1000)) + keep
    local expire = (tonumber(f.x) or 0) < need
    if expire then
      n = #w
      w[n + 1], w[n + 2] = 'x', need + keep
    end
    local r = redis.pcall('HSET', key, unpack(w))
    if iserr(r) then
      failed(r)
    else
      if expire then redis.pcall('PEXPIREAT', key, need + keep) end
      for _, k in ipairs(drop) do stale[#stale + 1] = k end
      if #stale > 0 then redis.pcall('HDEL', key, unpack(stale)) end
      local flags = admitted * 2
      if lost then flags = flags + 1 end
      emit(1, x, y, z, count, math.floor(sum * 1000 + 0.5), grant, leaseEnd, flags)
    end
  end
end
return out
