-- fleetgate: enqueue a batch of work items, within the fleet's backlog limit, in one atomic step.
-- The check and the writes are one script, so two producers racing at the limit cannot both
-- pass it: the batch is written whole, or nothing of it is.
--
-- KEYS[1] fleetgate:{NAME}:work     the work stream
-- KEYS[2] fleetgate:{NAME}:limits   the limit (a hash: max_backlog, when_full, by, at), or absent
-- ARGV[1] the consumer group whose backlog is limited ("fleetgate")
-- ARGV[2] the entry's field ("item")
-- ARGV[3..] the items, one entry each (the field's value: JSON)
--
-- Without KEYS[2], no limit: every item is added (XADD <work> * <field> <item>).
-- With it, the backlog is the work not yet done: entries not yet delivered to the group (its
-- `lag`) plus entries delivered and not acknowledged (its `pending`); before the group exists,
-- every entry of the stream (XLEN). When Redis cannot say the lag (nil after an XDEL of an
-- entry not yet delivered, or before Redis 7), the script counts the entries after the group's
-- last-delivered-id itself, in pages of 1000 and only as far as the decision needs (at most
-- max_backlog of them), unless XLEN + pending already leaves room.
-- The batch of n items is written when backlog + n <= max_backlog.
--
-- Returns
--   {"ok", {id, ...}, backlog}   written (backlog: before the batch; -1 when no limit was read)
--   {"full", backlog, max_backlog, when_full, exact}
--                                 nothing written; exact "0" when backlog is a lower bound
--                                 (counted only as far as the limit)
--   {"unreadable", why}          nothing written: the limits key cannot be obeyed (not a hash,
--                                 max_backlog not a whole number from 1 to 10^12, when_full
--                                 neither "reject" nor "wait"): fail closed
local work, limits = KEYS[1], KEYS[2]
local group, field = ARGV[1], ARGV[2]
local n = #ARGV - 2
local MAX_BACKLOG = 1000000000000
local PAGE = 1000

local function shown(value)
  -- a short excerpt, printable ASCII only (the reply must decode whatever the hash holds)
  return '"' .. string.gsub(string.sub(value, 1, 20), '[^%w%p ]', '?') .. '"'
end

local function add()
  local ids = {}
  for i = 3, #ARGV do
    ids[#ids + 1] = redis.call('XADD', work, '*', field, ARGV[i])
  end
  return ids
end

local kind = redis.call('TYPE', limits)['ok']
if kind == 'none' then
  return {'ok', add(), -1}
end
if kind ~= 'hash' then
  return {'unreadable', 'the limits key is a ' .. kind .. ', not a hash'}
end
local raw = redis.call('HMGET', limits, 'max_backlog', 'when_full')
local text, when = raw[1], raw[2]
if not text then
  return {'unreadable', 'the limits hash has no max_backlog'}
end
local max = nil
if string.match(text, '^[1-9][0-9]*$') and #text <= 13 then
  max = tonumber(text)
end
if not max or max > MAX_BACKLOG then
  return {'unreadable', 'max_backlog ' .. shown(text) .. ' is not a whole number from 1 to ' ..
    MAX_BACKLOG}
end
if not when or when == '' then
  when = 'reject'
end
if when ~= 'reject' and when ~= 'wait' then
  return {'unreadable', 'when_full ' .. shown(when) .. ' is neither reject nor wait'}
end

-- the backlog: lag + pending of the group (every entry before the group exists)
local backlog, exact = 0, 1
if redis.call('EXISTS', work) == 1 then
  local found = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', work)) do
    local info = {}
    for i = 1, #g - 1, 2 do
      info[g[i]] = g[i + 1]
    end
    if info['name'] == group then
      found = info
      break
    end
  end
  if not found then
    backlog = redis.call('XLEN', work)
  else
    local pending = tonumber(found['pending']) or 0
    local lag = tonumber(found['lag'])
    if lag then
      backlog = lag + pending
    elseif redis.call('XLEN', work) + pending + n <= max then
      backlog = pending  -- room whatever the lag: at most XLEN entries wait
      exact = 0
    else
      -- count what waits after the last delivered entry, only as far as the decision needs
      local bound = max - pending - n + 1
      local counted = 0
      local last = found['last-delivered-id']
      local start = '-'
      if last and last ~= '0-0' then
        start = '(' .. last
      end
      while counted < bound do
        local want = math.min(PAGE, bound - counted)
        local page = redis.call('XRANGE', work, start, '+', 'COUNT', want)
        counted = counted + #page
        if #page < want then
          break
        end
        start = '(' .. page[#page][1]
      end
      backlog = pending + counted
      if counted >= bound then
        exact = 0
      end
    end
  end
end

if backlog + n > max then
  return {'full', backlog, max, when, tostring(exact)}
end
return {'ok', add(), backlog}
