-- ledger.lua: add what a node admitted on keys to their ledgers,
-- idempotently (Async mode's Ledger). A node decides most keys alone, in
-- its share, at no cost to Redis; what it admitted still belongs in the
-- key's ledger, which it sends every few rounds and when it stops.
--
-- KEYS     the keys' ledgers (a hash each): s = the ledger, and per node
--          l:<node> = its two latest epochs with their totals (struct)
-- ARGV     node, keep ms (how long a ledger outlives the last weight added),
--          then per key: epoch, total, acknowledged total
--
-- Returns 1 per key applied, or the error Redis raised for it.
local node, keep = ARGV[1], tonumber(ARGV[2])
local lk = 'l:' .. node
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 2 + (i - 1) * 3
  local epoch, total, acked = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local v = redis.pcall('HMGET', key, lk, 's')
  if type(v) == 'table' and v.err then
    out[i] = v.err
  else
    local ea, ca, eb, cb = 0, 0, 0, 0
    if v[1] then ea, ca, eb, cb = struct.unpack('<dddd', v[1]) end
    local draw = 0
    if ea == 0 or epoch > ea then
      draw = math.max(total - acked, 0)
      eb, cb, ea, ca = ea, ca, epoch, total
    elseif epoch == ea then
      draw = math.max(total - ca, 0)
      ca = math.max(ca, total)
    elseif epoch == eb then
      draw = math.max(total - cb, 0)
      cb = math.max(cb, total)
    end
    local r = redis.pcall('HSET', key, lk, struct.pack('<dddd', ea, ca, eb, cb), 's', (tonumber(v[2]) or 0) + draw)
    if type(r) == 'table' and r.err then
      out[i] = r.err
    else
      local ttl = redis.call('PTTL', key)
      if ttl < keep then redis.call('PEXPIRE', key, keep) end
      out[i] = 1
    end
  end
end
return out
