"""Confirming from the records what acknowledgements said: ``CONFIRM_LUA`` and
``disagreements``.

The replicas of a fleet share one Redis user, so one could publish another's acknowledgement;
before a wait ends on acknowledgements it has the records of those replicas checked, in one
script call per batch, which answers only with the few records that do not confirm (see
``coordinator.fleet.waiting``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from redis.commands.core import AsyncScript

from coordinator.fleet.acks import _WAIT_FIELDS
from coordinator.fleet.calls import again
from coordinator.fleet.reads import BATCH, Reads
from replica.contract import R_APPLIED_VERSION, R_FLEET_HELD, R_QUIET

CONFIRM_LUA: Final = """
-- fleetgate: confirm from the replica records what acknowledgements said (KEYS: the record
-- keys, one slot). ARGV[1] the version; ARGV[2] '1' for a pause, '0' for a resume; ARGV[3..5]
-- the fields applied_version, fleet_held, quiet; ARGV[6..] the fields wait reads. A record
-- confirms when it applied the version and, for a pause, is held by the fleet and quiet (for
-- a resume: not held by the fleet). Answers, for each record that does not, its index (from
-- 1) and the fields wait reads ({} when the key is not a hash): nothing when all confirm.
local version = tonumber(ARGV[1])
local pause = ARGV[2] == '1'
local out = {}
for i, key in ipairs(KEYS) do
  local r = redis.pcall('HMGET', key, ARGV[3], ARGV[4], ARGV[5])
  local ok = false
  if type(r) == 'table' and not r.err then
    local applied = r[1] and tonumber(r[1])
    if applied and applied >= version then
      if pause then ok = r[2] == '1' and r[3] == '1' else ok = r[2] ~= '1' end
    end
  end
  if not ok then
    local fields = redis.pcall('HMGET', key, unpack(ARGV, 6))
    if type(fields) ~= 'table' or fields.err then fields = {} end
    out[#out + 1] = i
    out[#out + 1] = fields
  end
end
return out
"""


async def disagreements(
    script: AsyncScript, reads: Reads, ids: Sequence[str], version: int, pause: bool
) -> AsyncIterator[tuple[Sequence[str], dict[str, Any]]]:
    """For each batch of ``ids``, in order: the batch and, of its replicas whose records do
    not confirm ``version`` (``pause``: held and quiet; else not held), the fields wait reads."""
    args = [str(version), "1" if pause else "0",
            R_APPLIED_VERSION, R_FLEET_HELD, R_QUIET, *_WAIT_FIELDS]
    for i in range(0, len(ids), BATCH):
        batch = ids[i:i + BATCH]
        record_keys = [reads.record_key(r) for r in batch]
        result: Any = await again(
            lambda: script(keys=record_keys, args=args)  # noqa: B023
        )
        yield batch, {batch[int(result[j]) - 1]: result[j + 1] for j in range(0, len(result), 2)}


__all__ = ["CONFIRM_LUA", "disagreements"]
