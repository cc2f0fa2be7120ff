-- reconcile.lua: apply one node's spend on a batch of keys, on Redis server
-- TIME, atomically per key. A batch may hold keys of every algorithm but the
-- sliding window log; on a Cluster, a batch holds one key.
--
-- KEYS     one hash per key: the state fields of gcra.lua or window.lua,
--          x = the ms at which the key expires, and per node that reports on
--          the key s:<node> = server µs of its last report, d:<node> = its
--          demand (requests per second), and the epochs and totals below.
-- ARGV     node, active window µs, keep ms, then per key eight values:
--          kind (0 bucket, 1 fixed window, 2 sliding window counter),
--          interval ns (bucket) or period µs (window), tolerance ns (bucket,
--          else 0), the node's total spend on the key in this epoch, the
--          window it was spent in (windows), the epoch, the demand, and the
--          part of the total Redis has acknowledged to the node.
--
-- Reports are idempotent. A node reports the total it spent on a key since
-- the counter's epoch began, never a difference, and the hash remembers per
-- node the totals it applied for the node's two latest epochs (ea/ca and
-- eb/cb): only what exceeds them is applied. A report sent twice (a round
-- the client stopped waiting for did reach Redis, and was sent again), or
-- arriving late after a newer one, changes nothing. Epochs grow: a node
-- starts a new one when it starts counting a key afresh, so an epoch older
-- than both kept is stale and ignored. When the hash has no record of an
-- epoch (a new counter, or a node silent long enough to be forgotten, or a
-- Redis that lost its data), only what the node was never told was applied
-- is: the total less the acknowledged part.
--
-- A bucket's TAT refills by time, moves ahead by what was spent, and may run
-- up to one more tolerance past a full bucket: that debt is what the fleet
-- over-admitted, paid back before anyone is admitted again, so the long-run
-- rate stays exact. It is capped there, so an outage spent in FailOpen does
-- not lock the key out for hours. A window's spend counts in the window it
-- was made in: the current one, or the previous one (which only the sliding
-- counter still weighs); older spend no longer matters.
--
-- A node's demand is smoothed 1:1 with its previous report while that is
-- fresh. A node silent for longer than the active window no longer counts
-- as active (its demand is dropped); its totals are kept for 60 active
-- windows, since a node that fell silent is more often cut off than gone,
-- and only then is it forgotten, so departed nodes do not pile up in a key.
--
-- Each key is read whole, then written once: a key that fails has changed
-- nothing, so its spend may be sent again safely.
--
-- Returns now (µs), then per key seven values:
--   bucket:  1, level ns, 0, 0, nodes, total demand, this node's demand
--   window:  1, w, c, p, nodes, total demand, this node's demand
--   failed:  0, 0, 0, 0, 0, the error, ''
-- with demands in thousandths of a request per second (integer replies).
local node, active, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local out = {now}
local o = 1 -- the last index of out

-- emit appends one key's seven values to the reply.
local function emit(a, b, c, d, e, f, g)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a, b, c, d, e, f, g
  o = o + 7
end

-- iserr reports whether a pcall's result is an error.
local function iserr(r) return type(r) == 'table' and r.err ~= nil end

local function failed(err)
  emit(0, 0, 0, 0, 0, type(err) == 'table' and err.err or tostring(err), '')
end

local me = 's:' .. node
local md = 'd:' .. node
local ea, ca, eb, cb = 'ea:' .. node, 'ca:' .. node, 'eb:' .. node, 'cb:' .. node

-- applied returns how much of a report's total the hash has not applied
-- yet, and adds the fields that record it to the write w.
local function applied(f, w, epoch, total, acked)
  local n = #w
  local lastEpoch, lastTotal = tonumber(f[ea]), tonumber(f[ca]) or 0
  if lastEpoch == nil or epoch > lastEpoch then
    if lastEpoch then -- the latest epoch becomes the previous one
      w[n + 1], w[n + 2], w[n + 3], w[n + 4] = eb, lastEpoch, cb, lastTotal
      n = n + 4
    end
    w[n + 1], w[n + 2], w[n + 3], w[n + 4] = ea, epoch, ca, total
    return math.max(total - acked, 0)
  elseif epoch == lastEpoch then
    if total > lastTotal then
      w[n + 1], w[n + 2] = ca, total
      return total - lastTotal
    end
    return 0
  end
  local prevEpoch, prevTotal = tonumber(f[eb]), tonumber(f[cb]) or 0
  if prevEpoch and epoch == prevEpoch and total > prevTotal then
    w[n + 1], w[n + 2] = cb, total
    return total - prevTotal
  end
  return 0 -- a duplicate, or older than both epochs kept
end

-- track records this node's demand in the hash's fields f, adds the node
-- fields to the write w, and returns the active node count, their total
-- demand, this node's smoothed demand and the fields of stale nodes.
local function track(f, w, demand)
  local seen, prev = tonumber(f[me]), tonumber(f[md])
  if seen and prev and now - seen <= active then
    demand = (demand + prev) / 2
  end
  f[me], f[md] = now, demand
  local count, total, stale = 0, 0, {}
  for k, v in pairs(f) do
    if string.byte(k, 1) == 115 and string.byte(k, 2) == 58 then -- "s:"
      local id = string.sub(k, 3)
      local silent = now - (tonumber(v) or 0)
      if silent <= active then
        count = count + 1
        total = total + (tonumber(f['d:' .. id]) or 0)
      elseif silent > 60 * active then
        for _, p in ipairs({'s:', 'd:', 'ea:', 'ca:', 'eb:', 'cb:'}) do
          stale[#stale + 1] = p .. id
        end
      elseif f['d:' .. id] then
        stale[#stale + 1] = 'd:' .. id
      end
    end
  end
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = me, now, md, demand
  return count, total, demand, stale
end

-- bucket applies spent to a bucket's fields f, adding them to the write w,
-- and returns the level and the ms the key must live until.
local function bucket(f, w, interval, tau, spent)
  local level = 0
  local t, l = tonumber(f.t), tonumber(f.l)
  if t and l then
    level = l - (now - t) * 1000
    if level < 0 then level = 0 end
  end
  level = level + spent * interval
  if level > 2 * tau then level = 2 * tau end
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = 't', now, 'l', level
  return level, 0, 0, math.floor(now / 1000) + math.ceil(level / 1000000)
end

-- window applies spent to a window's fields f, adding them to the write w,
-- and returns the window, its counts and the ms the key must live until.
local function window(f, w, period, spent, sw, sliding)
  local cur = math.floor(now / period)
  local kw, c, p = tonumber(f.w), tonumber(f.c) or 0, tonumber(f.p) or 0
  if kw == nil or kw < cur - 1 then
    c, p = 0, 0
  elseif kw == cur - 1 then
    p, c = c, 0
  elseif kw > cur then
    cur = kw -- Redis's clock stepped back: never reopen a window
  end
  if sw >= cur then
    c = c + spent
  elseif sw == cur - 1 and sliding then
    p = p + spent
  end
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4], w[n + 5], w[n + 6] = 'w', cur, 'c', c, 'p', p
  return cur, c, p, math.ceil((cur + 2) * period / 1000)
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 3 + (i - 1) * 8
  local kind = ARGV[a + 1]
  local h = redis.pcall('HGETALL', key)
  if iserr(h) then
    failed(h)
  else
    local f = {}
    for j = 1, #h, 2 do f[h[j]] = h[j + 1] end
    local w = {}
    local spent = applied(f, w, tonumber(ARGV[a + 6]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 8]))
    local x, y, z, until_ms
    if kind == '0' then
      x, y, z, until_ms = bucket(f, w, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), spent)
    else
      x, y, z, until_ms = window(f, w, tonumber(ARGV[a + 2]), spent, tonumber(ARGV[a + 5]), kind == '2')
    end
    local count, total, mine, stale = track(f, w, tonumber(ARGV[a + 7]))
    -- The key must outlive its state and its nodes' activity.
    local need = math.max(until_ms, math.floor(now / 1000) + math.ceil(active / 1000)) + keep
    local expire = (tonumber(f.x) or 0) < need
    if expire then
      local n = #w
      w[n + 1], w[n + 2] = 'x', need + keep
    end
    local r = redis.pcall('HSET', key, unpack(w))
    if iserr(r) then
      failed(r)
    else
      if expire then redis.pcall('PEXPIREAT', key, need + keep) end
      if #stale > 0 then redis.pcall('HDEL', key, unpack(stale)) end
      emit(1, x, y, z, count, math.floor(total * 1000 + 0.5), math.floor(mine * 1000 + 0.5))
    end
  end
end
return out
