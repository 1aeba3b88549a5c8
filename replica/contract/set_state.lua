-- fleetgate: change a fleet's state in one atomic step.
-- Bump the version, write the state hash, append to the audit stream, publish the new state.
--
-- KEYS[1] fleetgate:{NAME}:state     KEYS[2] fleetgate:{NAME}:audit
-- KEYS[3] fleetgate:{NAME}:control   KEYS[4] fleetgate:{NAME}:replicas
-- ARGV[1] "pause" | "resume"         ARGV[2] reason        ARGV[3] by
-- ARGV[4] now (ISO 8601 UTC, ms)     ARGV[5] expected_until (ISO or "")
-- ARGV[6] auto_resume_at (ISO or "") ARGV[7] resume_stagger_s
-- ARGV[8] fleet name                 ARGV[9] audit stream cap
-- ARGV[10] "1" to create the hash even though replicas are registered and it is missing
-- ARGV[11] prune: replica ids whose last heartbeat (ms) is older than this leave the set ("" keeps all)
--
-- Returns {"missing"} when the hash is gone while replicas are registered (Redis forgot:
-- restore from the replica records first), {"noop", {field, value, ...}, {id, score, ...}}
-- for a resume of a running fleet, {"ok", {field, value, ...}, {id, score, ...}} after a
-- change: the new state and the registered replicas with their heartbeats, so the caller can
-- wait for them without another round trip. The state's fields include `restored_at` when the
-- hash has one (the restore script's stamp, kept by every change).
local cur = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #cur, 2 do h[cur[i]] = cur[i + 1] end

local function flat(t)
  local out = {}
  for k, v in pairs(t) do
    out[#out + 1] = k
    out[#out + 1] = v
  end
  return out
end

if #cur == 0 and ARGV[10] ~= '1' and redis.call('ZCARD', KEYS[4]) > 0 then
  return {'missing'}
end

if ARGV[11] and ARGV[11] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[11])
end

local truthy = {['1'] = true, ['true'] = true, ['yes'] = true, ['on'] = true}
local raw_paused = truthy[string.lower(h['paused'] or '0')] == true
local now = ARGV[4]
local paused = raw_paused
local ara = h['auto_resume_at'] or ''
-- a pause whose auto-resume time has passed is over (canonical ISO strings sort as times)
if paused and ara ~= '' and ara <= now then paused = false end
local version = tonumber(h['version'] or '0') or 0

local action = ARGV[1]
local new = {}
if action == 'pause' then
  local since = now
  if paused and h['since'] and h['since'] ~= '' then since = h['since'] end
  new = {
    paused = '1', reason = ARGV[2], by = ARGV[3], since = since,
    expected_until = ARGV[5], auto_resume_at = ARGV[6], resume_stagger_s = ARGV[7],
  }
elseif action == 'resume' then
  if not raw_paused then
    return {'noop', cur, redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')}
  end
  new = {
    paused = '0', reason = '', by = ARGV[3], since = now,
    expected_until = '', auto_resume_at = '', resume_stagger_s = ARGV[7],
  }
else
  return redis.error_reply('ERR fleetgate: unknown action ' .. tostring(action))
end

version = version + 1
new['version'] = tostring(version)
new['changed_at'] = now
if h['restored_at'] then new['restored_at'] = h['restored_at'] end
redis.call('HSET', KEYS[1], unpack(flat(new)))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*',
  'action', action, 'reason', ARGV[2], 'by', ARGV[3], 'version', tostring(version), 'at', now)

local function opt(s)
  if s == nil or s == '' then return cjson.null end
  return s
end
local message = cjson.encode({
  fleet = ARGV[8],
  paused = new['paused'] == '1',
  reason = new['reason'],
  by = new['by'],
  since = new['since'],
  version = version,
  expected_until = opt(new['expected_until']),
  auto_resume_at = opt(new['auto_resume_at']),
  resume_stagger_s = tonumber(new['resume_stagger_s']) or 0,
  changed_at = now,
})
redis.call('PUBLISH', KEYS[3], message)
return {'ok', flat(new), redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')}
