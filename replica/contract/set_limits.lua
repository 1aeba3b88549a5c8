-- fleetgate: set or clear a fleet's backlog limit, and audit it, in one atomic step.
--
-- KEYS[1] fleetgate:{NAME}:limits   KEYS[2] fleetgate:{NAME}:audit   KEYS[3] fleetgate:{NAME}:state
-- ARGV[1] "set" | "clear"           ARGV[2] max_backlog (set)        ARGV[3] when_full (set)
-- ARGV[4] by                        ARGV[5] now (ISO 8601 UTC, ms)   ARGV[6] audit stream cap
--
-- set: the hash becomes {max_backlog, when_full, by, at} (whatever it held before, of any type,
-- is replaced); clear: the key is deleted. Either appends to the audit stream: action
-- "limit_set" or "limit_cleared", reason (what the limit is or was), by, at, the state's version
-- (0 without a state hash) and, for a set, max_backlog and when_full.
-- Returns {"ok", {field, value, ...}, type} (the limits hash as it was, each value cut to 40
-- printable ASCII characters; empty when there was none, or when the key was not a hash; and
-- the key's type then: "none", "hash" or another), or {"noop"} for a clear of a fleet without a limit (nothing
-- written, no audit).
local limits, audit, state = KEYS[1], KEYS[2], KEYS[3]
local kind = redis.call('TYPE', limits)['ok']
local before = {}
if kind == 'hash' then
  -- as it was, each value cut to 40 bytes of printable ASCII: the reply must decode whatever
  -- the hash holds (a limit past 10^12 or a word fits; garbage reads as garbage still)
  for _, v in ipairs(redis.call('HGETALL', limits)) do
    local clean = string.gsub(string.sub(v, 1, 40), '[^%w%p ]', '?')
    before[#before + 1] = clean
  end
end
if ARGV[1] == 'clear' and kind == 'none' then
  return {'noop'}
end
local version = '0'
if redis.call('TYPE', state)['ok'] == 'hash' then
  version = redis.call('HGET', state, 'version') or '0'
end
redis.call('DEL', limits)
local entry
if ARGV[1] == 'set' then
  redis.call('HSET', limits, 'max_backlog', ARGV[2], 'when_full', ARGV[3], 'by', ARGV[4],
    'at', ARGV[5])
  entry = {'action', 'limit_set', 'hold', '', 'reason',
    'max_backlog ' .. ARGV[2] .. ', when full: ' .. ARGV[3], 'by', ARGV[4], 'version', version,
    'at', ARGV[5], 'max_backlog', ARGV[2], 'when_full', ARGV[3]}
else
  local was = 'an unreadable limit'
  for i = 1, #before - 1, 2 do
    if before[i] == 'max_backlog' then
      was = 'max_backlog ' .. string.sub(before[i + 1], 1, 20)  -- printable already
    end
  end
  entry = {'action', 'limit_cleared', 'hold', '', 'reason', 'removed ' .. was, 'by', ARGV[4],
    'version', version, 'at', ARGV[5]}
end
redis.call('XADD', audit, 'MAXLEN', '~', ARGV[6], '*', unpack(entry))
return {'ok', before, kind}
