-- fleetgate: change a fleet's holds in one atomic step.
-- Add, update or release a hold, work out the fleet's state from its holds, bump the version,
-- write the state hash, append to the audit stream, publish the new state.
--
-- KEYS[1] fleetgate:{NAME}:state     KEYS[2] fleetgate:{NAME}:audit
-- KEYS[3] fleetgate:{NAME}:control   KEYS[4] fleetgate:{NAME}:replicas
-- ARGV[1] "pause" | "resume"         ARGV[2] reason        ARGV[3] by
-- ARGV[4] now (ISO 8601 UTC, ms)     ARGV[5] expected_until (ISO or "")
-- ARGV[6] auto_resume_at (ISO or "") ARGV[7] resume_stagger_s
-- ARGV[8] fleet name                 ARGV[9] audit stream cap
-- ARGV[10] "1" to create the hash even though replicas are registered and it is missing
-- ARGV[11] prune: replica ids whose last heartbeat (ms) is older than this leave the set ("" keeps all)
-- ARGV[12] hold name: a pause adds or updates it ("" = "default"); a resume releases it
--          ("" = the only hold there is)
-- ARGV[13] "1": a resume releases every hold      ARGV[14] starts_at of a scheduled hold (ISO or "")
-- ARGV[15] the most holds a fleet may have       ARGV[16] "1": publish with SPUBLISH (a cluster)
-- ARGV[17] "1": a pause with a future starts_at may reschedule a hold that is active now (it
--          ends now, and starts again then); else such a pause is refused ("active")
-- ARGV[18] a pause: the hold's label selector, stored as its `select` ("" = none: the hold holds
--          every replica); replicas match it against their labels (the script does not)
-- ARGV[19] a canary resume of the hold ARGV[12]: "canary" releases it on the replicas of ARGV[20]
--          (a JSON list, stored as its `canaries`; audit canary_started), "rollback" puts it
--          back on them (canary_rolled_back), "promote" releases it (canary_promoted); the last
--          two answer {"no_canary", {names}} for a hold without canaries ("" = a plain change)
-- ARGV[21] "1": a dry run: work out the change as ever, write, prune, audit and publish nothing,
--          and answer {"dry", {field, value, ...}, <as "ok">, audit action, {warnings},
--          holds before as JSON}
--
-- The fleet is paused while any hold is active: started (no starts_at, or starts_at <= now)
-- and not ended (no auto_resume_at, or now < auto_resume_at). Ended holds are dropped. The
-- hash's `holds` (JSON object keyed by name) is trusted only when `holds_version` equals
-- `version` and `paused` agrees with them at `changed_at`; otherwise (an older release, a hand
-- edit) a pause in force reads as hold "default".
-- `paused`, `reason` (the active holds' reasons), `by` (who made this change), `since` (when
-- the fleet entered its condition), `expected_until` and `auto_resume_at` (the latest of the
-- active holds', when each has one) describe the fleet as a whole, for readers of `paused` only.
--
-- Returns {"missing"} when the hash is gone while replicas are registered (Redis forgot:
-- restore from the replica records first); {"noop", {field, value, ...}, count, "",
-- {warnings}} for a resume that releases nothing (it writes nothing); {"ambiguous", {names}} for a resume without a hold name
-- while there are several holds; {"unknown", {names}} for a resume of a hold there is not;
-- {"too_many", {names}} for a pause that would add a hold past ARGV[15]; {"active", {names}}
-- for a pause that would move an active hold to a later start without ARGV[17]; and
-- {"ok", {field, value, ...}, count, audit action, {warnings}} after a change: the new state
-- and how many replicas are registered (ZCARD of KEYS[4], after the prune; 0 when it is not a
-- sorted set). The script never lists the replicas: a change costs the same at 10 replicas
-- and at 5,000 (only the prune is O(log N + removed)). A caller that waits for the change
-- reads the set with it, just before the script in the same MULTI/EXEC (the membership at
-- the change: a replica that leaves meanwhile is named as having left). A warning is
-- "replicas_wrongtype:<type>" when KEYS[4] is not a sorted set (skipped: no replicas read). The audit action is "pause" (the fleet was
-- running) or "resume" (it runs now: also a pause that moved the last active hold to a later
-- start), else "hold_added", "hold_updated", "hold_released",
-- "hold_scheduled" or "hold_cancelled".
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

local function s(v)
  if v == nil or v == cjson.null or type(v) ~= 'string' then return '' end
  return v
end

local function opt(v)
  if v == nil or v == '' then return cjson.null end
  return v
end

-- `text` cut to at most `limit` characters (UTF-8: a byte 0x80-0xBF continues a character, so
-- a cut is made only before a byte that starts one), '...' ending a text that was cut. Limits
-- are in characters, as the contract's readers count them (MAX_TEXT_LEN): never a cut inside a
-- character, which no reader could decode.
local function cut(text, limit)
  if string.len(text) <= limit then return text end
  local chars, keep = 0, limit - 3
  for i = 1, string.len(text) do
    local b = string.byte(text, i)
    if b < 0x80 or b >= 0xC0 then
      chars = chars + 1
      if chars == keep + 1 then
        -- `text` has more than `keep` characters: is it more than `limit`?
        local rest = 0
        for j = i, string.len(text) do
          local c = string.byte(text, j)
          if c < 0x80 or c >= 0xC0 then rest = rest + 1 end
          if rest > 3 then return string.sub(text, 1, i - 1) .. '...' end
        end
        return text
      end
    end
  end
  return text
end

-- The replicas set is written by replicas too (their ACL lets them ZADD and ZREM it): a key of
-- another type there (a hand edit, a replica's bug or malice) is reported and left alone, and
-- the change is made all the same. A change never fails because of a key replicas write.
local warnings = {}
local replicas_type = redis.call('TYPE', KEYS[4])
if type(replicas_type) == 'table' then replicas_type = replicas_type['ok'] end
local replicas_ok = replicas_type == 'zset' or replicas_type == 'none'
if not replicas_ok then warnings[#warnings + 1] = 'replicas_wrongtype:' .. tostring(replicas_type) end

local function count()
  if not replicas_ok then return 0 end
  return redis.call('ZCARD', KEYS[4])
end

if #cur == 0 and ARGV[10] ~= '1' and replicas_ok and redis.call('ZCARD', KEYS[4]) > 0 then
  return {'missing'}
end

local truthy = {['1'] = true, ['true'] = true, ['yes'] = true, ['on'] = true}
local now = ARGV[4]
local version = tonumber(h['version'] or '0') or 0

local function started(hold) return s(hold.starts_at) == '' or s(hold.starts_at) <= now end
local function ended(hold) return s(hold.auto_resume_at) ~= '' and s(hold.auto_resume_at) <= now end
local function active(hold) return started(hold) and not ended(hold) end

-- the holds before this change
local holds = nil
if h['holds'] and h['holds_version'] == tostring(version) then
  local ok, decoded = pcall(cjson.decode, h['holds'])
  if ok and type(decoded) == 'table' then
    holds = decoded
    -- `paused` edited by hand (no version bump) disagrees with the holds as they stood when
    -- the hash was written: the hand edit rules, as before holds
    local at = h['changed_at'] or ''
    if at ~= '' then
      local any = false
      for _, hold in pairs(decoded) do
        if type(hold) == 'table' and (s(hold.starts_at) == '' or s(hold.starts_at) <= at)
            and not (s(hold.auto_resume_at) ~= '' and s(hold.auto_resume_at) <= at) then
          any = true
        end
      end
      if any ~= (truthy[string.lower(h['paused'] or '0')] == true) then holds = nil end
    end
  end
end
if holds == nil then
  holds = {}
  local ara = h['auto_resume_at'] or ''
  if truthy[string.lower(h['paused'] or '0')] and not (ara ~= '' and ara <= now) then
    holds['default'] = {
      reason = h['reason'] or '', by = h['by'] or '', since = opt(h['since'] or ''),
      expected_until = opt(h['expected_until'] or ''), auto_resume_at = opt(ara),
      starts_at = cjson.null,
    }
  end
end
local was_paused = false
local names = {}
for name, hold in pairs(holds) do
  if type(hold) ~= 'table' then
    holds[name] = nil
  elseif ended(hold) then
    holds[name] = nil
  else
    names[#names + 1] = name
    if active(hold) then was_paused = true end
  end
end
table.sort(names)
local before_json = '{}'
if next(holds) ~= nil then before_json = cjson.encode(holds) end
local canary = ARGV[19] or ''
local dry = ARGV[21] == '1'
local function has_canaries(hold)
  return hold ~= nil and type(hold.canaries) == 'table' and next(hold.canaries) ~= nil
end

local action = ARGV[1]
local name = ARGV[12] or ''
local event = ''
local scheduled = (ARGV[14] or '') ~= '' and ARGV[14] > now
if action == 'pause' then
  if name == '' then name = 'default' end
  local old = holds[name]
  if old == nil and #names >= (tonumber(ARGV[15]) or 20) then
    return {'too_many', names}
  end
  if scheduled and old ~= nil and active(old) and ARGV[17] ~= '1' then
    -- moving an active hold to a later start ends it now: only when asked for
    return {'active', names}
  end
  local since = now
  if scheduled then
    since = ARGV[14]
  elseif old ~= nil and active(old) and s(old.since) ~= '' then
    since = s(old.since)
  end
  holds[name] = {
    reason = ARGV[2], by = ARGV[3], since = since, expected_until = opt(ARGV[5]),
    auto_resume_at = opt(ARGV[6]), starts_at = opt(scheduled and ARGV[14] or ''),
    select = opt(ARGV[18] or ''),
  }
  if scheduled then event = 'hold_scheduled'
  elseif not was_paused then event = 'pause'
  elseif old ~= nil and active(old) then event = 'hold_updated'
  else event = 'hold_added' end
elseif action == 'resume' and (canary == 'canary' or canary == 'rollback') then
  local hold = holds[name]
  if name == '' or hold == nil then return {'unknown', names} end
  if canary == 'canary' then
    local ok, ids = pcall(cjson.decode, ARGV[20] or '')
    if not ok or type(ids) ~= 'table' or next(ids) == nil then
      return redis.error_reply('ERR fleetgate: canaries must be a JSON list of replica ids')
    end
    hold.canaries = ids
    event = 'canary_started'
  else
    if not has_canaries(hold) then return {'no_canary', names} end
    hold.canaries = nil
    event = 'canary_rolled_back'
  end
elseif action == 'resume' then
  if canary == 'promote' then
    if name == '' or holds[name] == nil then return {'unknown', names} end
    if not has_canaries(holds[name]) then return {'no_canary', names} end
  end
  local released = nil
  if ARGV[13] == '1' then
    if #names == 0 then return {'noop', cur, count(), '', warnings} end
    holds = {}
    name = table.concat(names, ',')
  elseif name == '' then
    if #names == 0 then return {'noop', cur, count(), '', warnings} end
    if #names > 1 then return {'ambiguous', names} end
    name = names[1]
    released = holds[name]
    holds[name] = nil
  else
    if holds[name] == nil then return {'unknown', names} end
    released = holds[name]
    holds[name] = nil
  end
  if released ~= nil and not active(released) then event = 'hold_cancelled' else event = 'hold_released' end
  if ARGV[13] == '1' and not was_paused then event = 'hold_cancelled' end
else
  return redis.error_reply('ERR fleetgate: unknown action ' .. tostring(action))
end

-- a change is made: replicas silent too long leave the set (a no-op writes nothing)
if replicas_ok and ARGV[11] and ARGV[11] ~= '' and not dry then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[11])
end

-- the fleet as a whole, from the holds after this change
local paused = false
local reasons = {}
local expected, auto = '', ''
local all_expected, all_auto = true, true
local after = {}
for n, _ in pairs(holds) do after[#after + 1] = n end
table.sort(after)
local nactive = 0
for _, n in ipairs(after) do
  local hold = holds[n]
  if active(hold) then
    paused = true
    nactive = nactive + 1
    reasons[#reasons + 1] = n .. ': ' .. s(hold.reason)
    if s(hold.expected_until) == '' then all_expected = false
    elseif s(hold.expected_until) > expected then expected = s(hold.expected_until) end
    if s(hold.auto_resume_at) == '' then all_auto = false
    elseif s(hold.auto_resume_at) > auto then auto = s(hold.auto_resume_at) end
  end
end
if not all_expected then expected = '' end
if not all_auto then auto = '' end
local reason = ''
if nactive == 1 then
  for _, n in ipairs(after) do
    if active(holds[n]) then reason = s(holds[n].reason) end
  end
elseif nactive > 1 then
  reason = table.concat(reasons, '; ')
end
reason = cut(reason, 1000)
if action == 'resume' and not paused and was_paused then event = 'resume' end
if action == 'pause' and paused and not was_paused and not scheduled then event = 'pause' end
if action == 'pause' and scheduled and was_paused and not paused then event = 'resume' end
if canary == 'promote' then event = 'canary_promoted' end

local since = now
if paused == was_paused and h['since'] and h['since'] ~= '' then since = h['since'] end

version = version + 1
local holds_json = cjson.encode(holds)
if next(holds) == nil then holds_json = '{}' end
local new = {
  paused = paused and '1' or '0', reason = reason, by = ARGV[3], since = since,
  expected_until = expected, auto_resume_at = auto, resume_stagger_s = ARGV[7],
  version = tostring(version), changed_at = now, holds = holds_json,
  holds_version = tostring(version),
}
if h['restored_at'] then new['restored_at'] = h['restored_at'] end
if not dry then
  -- kept, or present from the first change on, so a replica's poll reads the schedules hash
  -- only when schedule_write.lua changes it (replica.contract.names.S_SCHEDULES_VERSION)
  new['schedules_version'] = h['schedules_version'] or '0'
end
if dry then return {'dry', flat(new), count(), event, warnings, before_json} end
redis.call('HSET', KEYS[1], unpack(flat(new)))
local audit = {'action', event, 'hold', name, 'reason', ARGV[2], 'by', ARGV[3],
  'version', tostring(version), 'at', now}
if action == 'pause' and scheduled then
  audit[#audit + 1] = 'starts_at'
  audit[#audit + 1] = ARGV[14]
end
if canary == 'canary' then
  audit[#audit + 1] = 'canaries'
  audit[#audit + 1] = table.concat(holds[name].canaries, ',')
end
if action == 'pause' and (ARGV[18] or '') ~= '' then
  -- the hold's selector, so a span rebuilt from the trail keeps it once the hold is gone
  audit[#audit + 1] = 'select'
  audit[#audit + 1] = ARGV[18]
end
if action == 'pause' and ARGV[6] ~= '' then
  audit[#audit + 1] = 'auto_resume_at'
  audit[#audit + 1] = ARGV[6]
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', unpack(audit))

local message = '{"fleet":' .. cjson.encode(ARGV[8])
  .. ',"paused":' .. (paused and 'true' or 'false')
  .. ',"reason":' .. cjson.encode(reason)
  .. ',"by":' .. cjson.encode(ARGV[3])
  .. ',"since":' .. cjson.encode(since)
  .. ',"version":' .. tostring(version)
  .. ',"expected_until":' .. cjson.encode(opt(expected))
  .. ',"auto_resume_at":' .. cjson.encode(opt(auto))
  .. ',"resume_stagger_s":' .. cjson.encode(tonumber(ARGV[7]) or 0)
  .. ',"changed_at":' .. cjson.encode(now)
  .. ',"holds":' .. holds_json .. '}'
if ARGV[16] == '1' then
  redis.call('SPUBLISH', KEYS[3], message)
else
  redis.call('PUBLISH', KEYS[3], message)
end
return {'ok', flat(new), count(), event, warnings}
