-- registry.lua: a node's heartbeat, and the registry of contested keys.
-- internal/storemodel's Beat is this script in Go.
--
-- KEYS[1]  the fleet: every node by the µs it last beat (sorted set)
-- KEYS[2]  the registry: per contested key, "epoch call expiry reset" (hash)
-- KEYS[3]  each entry by the stamp it last changed at (sorted set)
-- KEYS[4]  each entry by the µs it expires at (sorted set)
-- KEYS[5]  the last stamp handed out (string)
-- All five share one Cluster hash tag.
--
-- ARGV     node, active window µs, leave (1: the node leaves the fleet), the
--          stamp after which to return changes, the most changes to return,
--          the channel calls are published on, how long a departure is kept
--          (µs), then per entry this node sends: member, epoch, call µs,
--          expiry µs, reset µs, quiet (1: see below; 2: a call shares.lua
--          published when it made it, recorded here without publishing
--          it again).
--
-- An entry says that a key is contested until its expiry; a call on it
-- (call µs) asks every node holding a share of it to give back what it can
-- spare; a reset (reset µs) tells every node to start the key afresh.
-- Entries only ever move forward: a later epoch replaces an entry, the same
-- one keeps the latest call and expiry; the latest reset is always kept.
-- Every change gets a stamp of its own, so that a node reads each change
-- once, in order; a call is also published, so that the nodes hear it
-- before their next heartbeat (unless shares.lua published it when it made
-- it: quiet argument 2).
--
-- A quiet registration (share.Contest.Quiet: a contest of a key no node
-- decides in an even split of, so that no other node needs to hear of it)
-- is written without a stamp: nobody reads it. It is stamped all the same
-- when it replaces an earlier contest of the key (whose nodes may still
-- hold grants of it, and must join this one), and an entry nobody has read
-- is stamped when an earlier contest's registration comes after it: that
-- contest's node must learn of the later one.
--
-- A node's first beat (new) is published on the channel, with the fleet's
-- size: see below. A node that leaves the fleet (gone an active window, or
-- closing) is an entry too, member 'gone|<node>', epoch the µs it left:
-- every node reads it, and a node that asks for room tells the contests it
-- asks in, whose grants the gone node held and has not reported since
-- then lapse at once (a node that beats no more uses none of its grants).
--
-- Returns {now µs, nodes, new (1: the node was not in the fleet), the
-- stamp of the last change returned (the next 'after'), more (1: there are
-- more), then per change: member, and its value as stored, "epoch call
-- expiry reset" (µs; empty where the value is gone but its stamp stayed:
-- the hash evicted or deleted alone)}. The node
-- parses the values: a fleet reads every change once per node, and parsing
-- them here cost Redis more than the rest of the reading.
local node, active = ARGV[1], tonumber(ARGV[2])
local leave, after, limit, channel = ARGV[3] == '1', tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local goneKeep = tonumber(ARGV[7])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- Lua unpacks at most about 8,000 values into one call: a list that may
-- be longer (the entries that expired since the last beat, the changes a
-- reading without a page limit returns) goes to Redis in chunks.
local CHUNK = 1000

-- each calls cmd on key with every value of list, a chunk at a time.
local function each(cmd, key, list)
  for i = 1, #list, CHUNK do
    redis.call(cmd, key, unpack(list, i, math.min(i + CHUNK - 1, #list)))
  end
end

-- hmget returns the values of the fields of hash key, in order (false
-- for a field that is not there).
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local vals = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #vals do out[i + j - 1] = vals[j] end
  end
  return out
end

local stamp = tonumber(redis.call('GET', KEYS[5])) or 0
local stamped = stamp

-- put writes entry member and stamps its change.
-- wrote: an entry was written (the registry's life is set again).
local wrote = false

-- mark stamps entry member's change: the nodes read it.
local function mark(member)
  stamp = math.max(now, stamp + 1)
  redis.call('ZADD', KEYS[3], stamp, member)
end

-- put writes entry member, and stamps its change unless quiet.
local function put(member, e, c, x, z, quiet)
  redis.call('HSET', KEYS[2], member, string.format('%d %d %d %d', e, c, x, z))
  if not quiet then mark(member) end
  redis.call('ZADD', KEYS[4], x, member)
  wrote = true
end

-- depart records that node id left the fleet now.
local function depart(id)
  put('gone|' .. id, now, 0, now + math.max(goneKeep, active), 0)
end

local new = 0
if leave then
  if redis.call('ZREM', KEYS[1], node) == 1 then depart(node) end
else
  new = redis.call('ZADD', KEYS[1], now, node)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - active)
  if #gone > 0 then
    each('ZREM', KEYS[1], gone)
    for _, id in ipairs(gone) do depart(id) end
  end
end

for i = 8, #ARGV, 6 do
  local member, epoch, call, expiry = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local reset, quiet, published = tonumber(ARGV[i + 4]), ARGV[i + 5] == '1', ARGV[i + 5] == '2'
  local old = redis.call('HGET', KEYS[2], member)
  local e, c, x, z = 0, 0, 0, 0
  if old then
    local a, b, d, f = string.match(old, '^(%S+) (%S+) (%S+) (%S+)$')
    e, c, x, z = tonumber(a), tonumber(b), tonumber(d), tonumber(f)
  end
  local changed = true
  if old == false then
    e, c, x = epoch, call, expiry
  elseif epoch > e then
    e, c, x = epoch, call, expiry
    quiet = false -- it replaces an earlier contest: its nodes must hear of it
  elseif epoch == e then
    if call > c then quiet = false end
    c, x = math.max(c, call), math.max(x, expiry)
  else
    changed = false -- an earlier contest's
    -- A quiet one came first: the earlier contest's node must read the
    -- later. Stamped if it was not (ZADD NX: the ACL's commands suffice).
    local at = math.max(now, stamp + 1)
    if redis.call('ZADD', KEYS[3], 'NX', at, member) == 1 then stamp = at end
  end
  if reset > z then
    z, changed, quiet = reset, true, false
    x = math.max(x, expiry)
  end
  if changed then
    put(member, e, c, x, z, quiet)
    if (call > 0 and not published or reset > 0) and channel ~= '' then
      redis.call('PUBLISH', channel, member .. string.format('\n%d\n%d\n%d\n%d', e, c, x, z)) -- the member whole: any byte
    end
  end
end
if stamp ~= stamped then redis.call('SET', KEYS[5], stamp) end

local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
-- Entries removed need no life set again: the others' lives still cover them.
local touched = wrote or stamp ~= stamped
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  each('ZREM', KEYS[3], dead)
  each('HDEL', KEYS[2], dead)
end

local nodes = redis.call('ZCARD', KEYS[1])
-- A node joining is published too ("nodes\nnow\nnode"): every node divides
-- by the larger fleet at once, a quiet one (which beats seldom) included,
-- and one that cannot reach Redis while it hears knows who joined.
if new == 1 and channel ~= '' then
  redis.call('PUBLISH', channel, string.format('%d\n%d\n%s', nodes, now, node))
end
-- (ARGV[4] as sent: Lua would write a number of 16 digits in 14.)
-- Every change's stamp is at most the last handed out: a node that has read
-- up to it has nothing to read (unless that stamp is lost: read anyway).
local changes = {}
if not leave and (stamp > after or stamped == 0) then
  changes = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, limit + 1)
end
local more = 0
if #changes > 2 * limit then
  more = 1
  changes[#changes] = nil
  changes[#changes] = nil
end
local out = {now, nodes, new, ARGV[4], more}
if #changes > 0 then
  local members, n = {}, 0
  for i = 1, #changes, 2 do
    n = n + 1
    members[n] = changes[i]
  end
  local vals = hmget(KEYS[2], members)
  out[4] = changes[#changes]
  for j = 1, n do
    out[4 + 2 * j] = members[j]
    out[5 + 2 * j] = vals[j] or ''
  end
end
-- The fleet lives while nodes beat; the registry while an entry is alive.
-- Their lives are set again when the registry changed, and otherwise once
-- the fleet's has run down to half: a quiet beat reads one PTTL instead
-- of setting five (the registry's keys outlive the fleet's whenever set).
local keep = math.ceil(2 * active / 1000)
if touched or new == 1 or redis.call('PTTL', KEYS[1]) < keep / 2 then
  redis.call('PEXPIRE', KEYS[1], keep)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  local ttl = keep
  if #last == 2 then ttl = math.max(keep, math.ceil((tonumber(last[2]) - now) / 1000) + keep) end
  for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return out
