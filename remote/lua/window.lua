-- window.lua: one decision of the fixed window or the sliding window counter,
-- on Redis server TIME, atomically. Windows are aligned to the Unix epoch
-- (window index = floor(now / period)), or to the calendar in a time zone,
-- which Lua cannot read: then the node sends the window its own clock
-- (aligned to this server's TIME) falls in, with its neighbours, and the
-- script takes whichever of the three holds TIME.
--
-- KEYS[1]  the key's hash: w = window index, c = count in w, p = count in
--          w-1, x = the ms at which the key expires (see gcra.lua).
-- ARGV[1]  period, µs; 0 for a calendar window
-- ARGV[2]  rate (requests per window)
-- ARGV[3]  n              ARGV[4]  1 for the sliding window counter
-- ARGV[5]  ms the key outlives its last window
-- ARGV[6]  node   ARGV[7]  the decision's sequence number (see gcra.lua)
-- ARGV[8], ARGV[9], ARGV[10]  the node's estimate of w, c and p (0s: none):
--          restored when the key's state is gone (see gcra.lua)
-- ARGV[11..15]  calendar only: the index of the node's window, then in µs
--          the start of the window before it, its own start and end, and
--          the end of the window after it
--
-- Returns {allowed (0/1), w, c, p, now (µs)} after the decision, or the
-- error 'ERR window' when TIME lies in none of the calendar windows sent.
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local sliding = ARGV[4] == '1'
local keep = tonumber(ARGV[5])
-- ARGV[7] is "seq" or "seq:low": the decision's sequence number and the
-- node's low mark (every decision of the node at or below it is settled).
local seq, low
do
  local a, b = string.match(ARGV[7] or '', '^(%d+):?(%d*)$')
  seq, low = tonumber(a) or 0, tonumber(b)
end
local ew, ec, ep = tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0, tonumber(ARGV[10]) or 0

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- The window holding now: its index, start and end, and the next one's end.
local w, ws, we, ne
local i, bounds
if period > 0 then
  w = math.floor(now / period)
  ws, we, ne = w * period, (w + 1) * period, (w + 2) * period
else
  i = tonumber(ARGV[11])
  bounds = {tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])}
  for k = 1, 3 do
    if now >= bounds[k] and now < bounds[k + 1] then
      w, ws, we, ne = i + k - 2, bounds[k], bounds[k + 1], bounds[k + 2]
    end
  end
  if w == nil then
    return redis.error_reply('ERR window: server time ' .. now .. ' µs is outside the calendar windows the node sent')
  end
  if ne == nil then ne = we + (we - ws) end
end

local qk = 'q:' .. ARGV[6]
local st = redis.call('HMGET', KEYS[1], 'w', 'c', 'p', 'x', qk, 'd:' .. ARGV[6])
-- A decision the node reported as timed out before it arrived here (d:<node>,
-- see reconcile.lua) was counted from the node's memory: it changes nothing.
local fenced = seq > 0 and st[6] and string.find(' ' .. st[6] .. ' ', ' ' .. string.format('%d', seq) .. ' ', 1, true)
local sw, c, p = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3]) or 0
local lost = 0
if sw == nil and ew > 0 and (ec > 0 or ep > 0) and ew >= w - 1 then
  sw, c, p, lost = ew, ec, ep, 1 -- the state vanished under us: restore what this node knows
end
if sw == nil or sw < w - 1 then
  c, p = 0, 0
elseif sw == w - 1 then
  p, c = c, 0
elseif sw > w then
  -- Redis's clock stepped back: never reopen a window.
  if period > 0 then
    w = sw
    ws, we, ne = w * period, (w + 1) * period, (w + 2) * period
  elseif sw == i + 1 then
    w, ws, we, ne = sw, bounds[3], bounds[4], bounds[4] + (bounds[4] - bounds[3])
  else
    w, ws = sw, now -- a window the node did not send: count from now
  end
end

local used = c
if sliding then
  local len = we - ws
  local elapsed = now - ws
  if elapsed < 0 then elapsed = 0 end
  if elapsed > len - 1 then elapsed = len - 1 end
  used = math.ceil(p * (len - elapsed) / len) + c
end
local allowed = used + n <= rate
if fenced then allowed = false end
if allowed and n > 0 then
  c = c + n
  local need = math.ceil(ne / 1000) + keep
  if (tonumber(st[4]) or 0) < need then
    local x = need + keep
    redis.call('HSET', KEYS[1], 'w', w, 'c', c, 'p', p, 'x', x)
    redis.call('PEXPIREAT', KEYS[1], x)
  else
    redis.call('HSET', KEYS[1], 'w', w, 'c', c, 'p', p)
  end
  if seq > 0 then
    -- Keep the admitted decisions above the node's low mark (all of them: a
    -- report may name any as timed out), newest first; without a low mark
    -- the last eight. A bound no node reaches keeps a key's record finite.
    local list = {string.format('%d', seq)}
    for q in string.gmatch(st[5] or '', '%d+') do
      if low then
        if #list >= 65536 then break end
        if tonumber(q) > low then list[#list + 1] = q end
      else
        if #list >= 8 then break end
        list[#list + 1] = q
      end
    end
    redis.call('HSET', KEYS[1], qk, table.concat(list, ' '))
  end
elseif lost == 1 then
  local x = math.ceil(ne / 1000) + 2 * keep
  redis.call('HSET', KEYS[1], 'w', w, 'c', c, 'p', p, 'x', x)
  redis.call('PEXPIREAT', KEYS[1], x)
end
return {allowed and 1 or 0, w, c, p, now, lost}
