-- fleetgate: add, replace, remove or end early a fleet's schedule, or take a canary resume of
-- its occurrence a step, in one atomic step, audit it and tell the replicas to read the
-- schedules again.
--
-- KEYS[1] fleetgate:{NAME}:schedules   KEYS[2] fleetgate:{NAME}:state
-- KEYS[3] fleetgate:{NAME}:audit       KEYS[4] fleetgate:{NAME}:control
-- KEYS[5] fleetgate:{NAME}:alerted
-- ARGV[1] "add" | "remove" | "end" | "canary" | "rollback" | "promote"
-- ARGV[2] schedule name
-- ARGV[3] add: the schedule's JSON; end: the JSON with ended_early set; canary: with
--         canaries and canary_for set; rollback: with them cleared; promote: with ended_early
--         set and them cleared (the coordinator computes it from the JSON of ARGV[11])
-- ARGV[4] now (ISO 8601 UTC, ms)       ARGV[5] by
-- ARGV[6] fleet name                   ARGV[7] the most schedules a fleet may have
-- ARGV[8] audit stream cap             ARGV[9] "1": publish with SPUBLISH (a cluster)
-- ARGV[10] reason (audit)
-- ARGV[11] end, canary, rollback, promote: the JSON it must still be (else "changed")
-- ARGV[12] end, canary, rollback, promote: the occurrence's start (ISO)
-- ARGV[13] add: cron  ARGV[14] add: duration_s  ARGV[15] add: timezone
-- ARGV[16] canary: the canaries, comma-separated (audit)
--
-- Sets the state hash's schedules_version to the audit entry's id (the hash is created with
-- that field alone for a fleet never changed; left alone when the key is of another type).
--
-- Returns {"clash"} for an add whose name is a hold of the state, {"too_many", n} for an add
-- past ARGV[7], {"unknown"} for a remove, end or canary step of a schedule there is not,
-- {"changed"} for an end or canary step whose schedule changed since it was read, else
-- {"ok", audit action}. The canary steps audit canary_started (with canaries),
-- canary_rolled_back and canary_promoted, each with the occurrence's starts_at. An end or a
-- promote records in the alerted hash that the occurrence's end is audited (the watcher
-- writes it no more).
local name = ARGV[2]
local op = ARGV[1]
local action

if op == 'add' then
  local holds_raw = redis.call('HGET', KEYS[2], 'holds')
  if holds_raw then
    local ok, holds = pcall(cjson.decode, holds_raw)
    local hold = ok and type(holds) == 'table' and holds[name] or nil
    -- a hold of that name that has not ended (one that ended by its auto_resume_at stays in
    -- the hash until the next change, and is no clash)
    if type(hold) == 'table' then
      local ends = hold.auto_resume_at
      if type(ends) ~= 'string' or ends == '' or ends > ARGV[4] then return {'clash'} end
    end
  end
  local exists = redis.call('HEXISTS', KEYS[1], name) == 1
  if not exists and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[7]) then
    return {'too_many', redis.call('HLEN', KEYS[1])}
  end
  redis.call('HSET', KEYS[1], name, ARGV[3])
  action = exists and 'schedule_updated' or 'schedule_added'
elseif op == 'remove' then
  if redis.call('HDEL', KEYS[1], name) == 0 then return {'unknown'} end
  action = 'schedule_removed'
elseif op == 'end' or op == 'canary' or op == 'rollback' or op == 'promote' then
  local cur = redis.call('HGET', KEYS[1], name)
  if not cur then return {'unknown'} end
  if cur ~= ARGV[11] then return {'changed'} end
  redis.call('HSET', KEYS[1], name, ARGV[3])
  if op == 'end' or op == 'promote' then
    redis.call('HSET', KEYS[5], 'schedule_ended:' .. name, ARGV[12])
  end
  action = ({['end'] = 'schedule_ended', canary = 'canary_started',
             rollback = 'canary_rolled_back', promote = 'canary_promoted'})[op]
else
  return redis.error_reply('unknown op')
end

local audit = {'action', action, 'hold', name, 'reason', ARGV[10], 'by', ARGV[5], 'at', ARGV[4]}
if op == 'add' then
  for _, kv in ipairs({{'cron', ARGV[13]}, {'duration_s', ARGV[14]}, {'timezone', ARGV[15]}}) do
    audit[#audit + 1] = kv[1]
    audit[#audit + 1] = kv[2]
  end
elseif op ~= 'remove' then
  audit[#audit + 1] = 'starts_at'
  audit[#audit + 1] = ARGV[12]
  if op == 'end' or op == 'promote' then
    audit[#audit + 1] = 'early'
    audit[#audit + 1] = '1'
  end
  if op == 'canary' then
    audit[#audit + 1] = 'canaries'
    audit[#audit + 1] = ARGV[16] or ''
  end
end
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', unpack(audit))
-- the state hash says the schedules changed (its schedules_version, a value never used
-- before): a replica's poll reads the schedules hash only then, so a lost control message
-- costs no more than one poll. A fleet never changed gets a state hash of that field alone,
-- which reads as it did (running, version 0); a state key of another type is left as it is
-- (its replicas hold and read the schedules at every poll).
local state_type = redis.call('TYPE', KEYS[2]).ok
if state_type == 'hash' or state_type == 'none' then
  redis.call('HSET', KEYS[2], 'schedules_version', id)
end

local message = '{"fleet":' .. cjson.encode(ARGV[6]) .. ',"schedules":' .. cjson.encode(ARGV[4]) .. '}'
if ARGV[9] == '1' then
  redis.call('SPUBLISH', KEYS[4], message)
else
  redis.call('PUBLISH', KEYS[4], message)
end
return {'ok', action}
