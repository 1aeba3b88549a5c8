-- fleetgate: put back a fleet state that Redis forgot (restart without persistence, a
-- failover that lost the last write), from what a replica applied. Create-if-absent; when a
-- hash is there, the newest version wins, except that a restore never replaces a pause with a
-- running state (when in doubt, the fleet stays paused). A version never goes back either: an
-- older pause met by a newer running state stays, its version raised above the incoming one
-- (so no replica applies a version below one it had, and the next change takes a new number).
-- The raised pause is not published: the replicas' next poll (within poll_interval) reads it.
--
-- KEYS[1] fleetgate:{NAME}:state   KEYS[2] fleetgate:{NAME}:audit   KEYS[3] fleetgate:{NAME}:control
-- ARGV[1] version   ARGV[2] paused ("1" or "0")   ARGV[3] now (ISO 8601 UTC, ms)
-- ARGV[4] who restores (replica id or coordinator)   ARGV[5] audit stream cap
-- ARGV[6] the state as a control message (JSON)     ARGV[7..#ARGV-1] field, value, ... of the hash
-- ARGV[#ARGV] "1": publish with SPUBLISH (a cluster: sharded pub/sub, the channel in the
-- keys' slot), else PUBLISH
--
-- Whenever it writes the hash it stamps `restored_at` = ARGV[3]: Redis lost data then, and
-- replicas whose records it lost may not have registered again yet (wait reads it). Nothing
-- else is re-stamped: every hold, `since` and `changed_at` stay as written (the holds are
-- trusted only while `paused` agrees with them at `changed_at`).
--
-- Returns 1 when it wrote the hash, 0 when the hash already holds a state that wins, 2 when
-- it kept an older pause and raised its version to ARGV[1] + 1.
local mine = tonumber(ARGV[1])
local cur = redis.call('HMGET', KEYS[1], 'version', 'paused', 'holds_version')
if cur[1] or cur[2] then
  local theirs = tonumber(cur[1] or '0') or 0
  if theirs >= mine then return 0 end
  local truthy = {['1'] = true, ['true'] = true, ['yes'] = true, ['on'] = true}
  if truthy[string.lower(cur[2] or '0')] and ARGV[2] ~= '1' then
    local raised = tostring(mine + 1)
    -- only the version moves: `changed_at` stays as written, so the holds still agree with
    -- `paused` at it and stay trusted (a scheduled window survives the restore)
    redis.call('HSET', KEYS[1], 'version', raised, 'restored_at', ARGV[3])
    -- the holds stay trusted at the raised version (they are the older pause's)
    if cur[3] and cur[3] == cur[1] then redis.call('HSET', KEYS[1], 'holds_version', raised) end
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*',
      'action', 'restore',
      'reason', 'an older pause (v' .. theirs .. ') was kept and its version raised above v'
        .. ARGV[1] .. ', the running state a replica had applied',
      'by', ARGV[4], 'version', raised, 'at', ARGV[3])
    return 2
  end
  redis.call('DEL', KEYS[1])
end
local fields = {}
for i = 7, #ARGV - 1 do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'restored_at'
fields[#fields + 1] = ARGV[3]
-- a schedules marker the replicas did not read last (the restore's time): they read the
-- schedules again
fields[#fields + 1] = 'schedules_version'
fields[#fields + 1] = ARGV[3]
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*',
  'action', 'restore', 'reason', 'state hash was missing or older', 'by', ARGV[4],
  'version', ARGV[1], 'at', ARGV[3])
if ARGV[#ARGV] == '1' then
  redis.call('SPUBLISH', KEYS[3], ARGV[6])
else
  redis.call('PUBLISH', KEYS[3], ARGV[6])
end
return 1
