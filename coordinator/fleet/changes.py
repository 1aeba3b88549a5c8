"""What changes a fleet: a pause, a resume, and the restore of a state hash Redis forgot.

A change is one script (``replica/contract/set_state.lua``): bump the version, write the state
hash, append to the audit stream, publish on the control channel, and answer with the new
state and how many replicas are registered (ZCARD: O(1)). It never lists them: a change costs
the same at 10 replicas and at 5,000. A change made for a ``wait`` (``for_wait``) reads the
``replicas`` set with it, just before the script in one ``MULTI``/``EXEC`` (one round trip):
the membership as it was at the change, which ``wait`` starts from, so that a replica that
stops cleanly just after the change is still named as having left.
What an operator writes (``reason``, ``by``) is checked by the contract's one rule
(``check_reason``, ``check_by``) before anything is sent. A script that was sent and got no
answer raises ``OutcomeUnknown`` (see ``coordinator.fleet.calls``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from coordinator.fleet import registry
from coordinator.fleet.calls import ChangeScript
from coordinator.fleet.dryrun import DryRun, check_canary
from coordinator.fleet.durability import Durability
from coordinator.fleet.reads import Members, Reads, flat_reply, parse_flat_members, restored_at
from replica.contract import (
    AUDIT_MAXLEN,
    MAX_STAGGER_S,
    R_APPLIED_STATE,
    RESTORE_STATE_LUA,
    SET_STATE_LUA,
    FleetState,
    Keys,
    check_by,
    check_optional_reason,
    check_reason,
    format_time,
    now_utc,
    restore_args,
    text,
    timedelta_s,
)
from replica.contract.holds import (
    DEFAULT_HOLD,
    MAX_HOLDS,
    ActiveHoldConflict,
    NoCanaryConflict,
    holds_from_json,
    validate_hold,
)
from replica.contract.scripts import RESTORE_RAISED
from replica.contract.selectors import canonical_selector
from replica.errors import ContractError, HoldConflict, InvalidMessage
from replica.link.connect import sharded

log = logging.getLogger(__name__)

PRUNE_AFTER: Final = timedelta(hours=1)
"""A replica id silent this long leaves the ``replicas`` set at the next change."""


@dataclass(frozen=True, slots=True)
class LastChange:
    """What the last change answered: ``wait`` on its version takes the state from it
    instead of Redis for a moment (``at`` is ``time.monotonic()``), and the members when the
    change read them (``for_wait``); else it reads them, when ``registered`` says there are
    any."""

    state: FleetState
    members: Members | None
    """The replicas set just before the change (same ``MULTI``), or None: not read."""
    registered: int | None
    """How many members the replicas set had after the change (the script's ZCARD; None:
    not known)."""
    at: float
    restored_at: datetime | None = None
    """The state hash's ``restored_at`` (set_state returns it with the state)."""


class Changes:
    """The changes of one fleet (``Fleet`` delegates to it)."""

    def __init__(
        self, redis: Redis, name: str, keys: Keys, reads: Reads,
        durability: Durability | None = None,
    ) -> None:
        self._redis = redis
        self._name = name
        self._keys = keys
        self._reads = reads
        self._set_state = ChangeScript(redis, SET_STATE_LUA)
        self._restore = ChangeScript(redis, RESTORE_STATE_LUA)
        self.last: LastChange | None = None
        self.durability = durability or Durability()
        """WAIT for replicas after a pause or resume (coordinator.fleet.durability)."""
        self.sharded = sharded(redis)
        """Publish with SPUBLISH (a cluster: sharded pub/sub)."""
        self.dry: DryRun | None = None
        """What the last dry run would have done (``coordinator.fleet.dryrun``)."""
        self.warnings: Counter[str] = Counter()
        """What the change script skipped, by kind (``replicas_wrongtype``: a replicas key of
        another type than a sorted set, left alone while the change was made)."""

    async def pause(
        self,
        reason: str,
        by: str,
        expected_for: timedelta | float | None,
        auto_resume_after: timedelta | float | None,
        resume_stagger: timedelta | float | None,
        hold: str | None = None,
        starts_at: datetime | None = None,
        reschedule: bool = False,
        for_wait: bool = False,
        select: str | None = None,
        dry_run: bool = False,
    ) -> FleetState:
        reason = check_reason(reason)
        by = check_by(by)
        selector = canonical_selector(select) if select is not None else ""
        name = validate_hold(hold) if hold is not None else DEFAULT_HOLD
        now = now_utc()
        start = now
        if starts_at is not None:
            if starts_at.tzinfo is None:
                raise ContractError("starts_at needs a time zone (UTC)")
            start = max(now, starts_at)
        expected = _positive("expected_for", expected_for)
        auto = _positive("auto_resume_after", auto_resume_after)
        return await self._change(
            "pause", reason, by, now,
            expected_until=start + expected if expected is not None else None,
            auto_resume_at=start + auto if auto is not None else None,
            stagger=resume_stagger, hold=name,
            starts_at=start if start > now else None, reschedule=reschedule,
            for_wait=for_wait, select=selector, dry_run=dry_run,
        )

    async def resume(
        self,
        by: str,
        stagger: timedelta | float | None,
        reason: str | None,
        hold: str | None = None,
        all_holds: bool = False,
        for_wait: bool = False,
        canary: str = "",
        canaries: Sequence[str] = (),
        dry_run: bool = False,
    ) -> FleetState:
        by = check_by(by)
        checked = check_optional_reason(reason)
        if hold is not None and all_holds:
            raise ContractError("name one hold or all of them, not both")
        name = validate_hold(hold) if hold is not None else ""
        check_canary(canary, name, canaries)
        return await self._change("resume", checked or "", by, now_utc(), stagger=stagger,
                                  hold=name, all_holds=all_holds, for_wait=for_wait,
                                  canary=canary, canaries=canaries, dry_run=dry_run)

    async def _change(
        self,
        action: str,
        reason: str,
        by: str,
        now: datetime,
        expected_until: datetime | None = None,
        auto_resume_at: datetime | None = None,
        stagger: timedelta | float | None = None,
        hold: str = "",
        all_holds: bool = False,
        starts_at: datetime | None = None,
        reschedule: bool = False,
        for_wait: bool = False,
        select: str = "",
        canary: str = "",
        canaries: Sequence[str] = (),
        dry_run: bool = False,
    ) -> FleetState:
        window = timedelta_s(stagger)
        if not 0 <= window <= MAX_STAGGER_S:
            raise ContractError(f"stagger must be 0 to {MAX_STAGGER_S:g} seconds")
        keys = self._keys
        prune_before = int((now - PRUNE_AFTER).timestamp() * 1000)
        args: list[str] = [
            action, reason, by, format_time(now), format_time(expected_until),
            format_time(auto_resume_at), f"{window:g}", self._name, str(AUDIT_MAXLEN), "0",
            str(prune_before), hold, "1" if all_holds else "0", format_time(starts_at),
            str(MAX_HOLDS), "1" if self.sharded else "0", "1" if reschedule else "0",
            select, canary, json.dumps(list(canaries)) if canaries else "",
            "1" if dry_run else "0",
        ]
        script_keys = [keys.state, keys.audit, keys.control, keys.replicas]
        what = f"{action} of fleet {self._name}"
        # a WAIT on the script's connection (a dry run writes nothing to confirm)
        confirm = None if dry_run else self.durability.begin()
        self.dry = None
        # a wait follows: the members as they are just before the change, in its MULTI
        read = ("ZRANGE", keys.replicas, 0, -1, "WITHSCORES") if for_wait else None
        raw_members, result = await self._call(script_keys, args, what, confirm, read)
        if text(result[0]) == "missing":
            # Redis forgot the hash, or the fleet was never paused: put back what the
            # replicas applied (if anything) before changing it, so versions never go back
            if await self.restore_if_missing():
                log.warning("fleet %s: the state hash was missing at %s: restored it from the "
                            "replica records first", self._name, action)
            args[9] = "1"
            raw_members, result = await self._call(script_keys, args, what, confirm, read)
        status = text(result[0])
        if status == "active":
            raise ActiveHoldConflict(self._name, tuple(text(x) for x in result[1]), hold)
        if status == "no_canary":
            raise NoCanaryConflict(self._name, tuple(text(x) for x in result[1]), hold)
        if status in ("ambiguous", "unknown", "too_many"):
            names = tuple(text(x) for x in result[1])
            raise HoldConflict(status, self._name, names, hold)
        fields = [text(x) for x in result[1]]
        raw = dict(zip(fields[::2], fields[1::2], strict=True))
        state = FleetState.from_hash(self._name, raw)
        members: Members | None = None
        if read is not None:
            members = (Members({}) if isinstance(raw_members, ResponseError)  # WRONGTYPE: warned
                       else parse_flat_members(flat_reply(raw_members)))
            self._reads.noted(members.unreadable)
        self._warn(result[4] if len(result) > 4 else [])
        if status == "dry":  # nothing was written: what it would do, for dry_run()
            self.dry = DryRun(holds_from_json(text(result[5])), state, text(result[3]))
            return state
        # what wait(state.version) starts from: kept for a moment, saves a read
        self.last = LastChange(state, members, _count(result[2]), time.monotonic(),
                               restored_at(raw))
        if status == "ok":
            # the registry of fleets: a key of its own slot, so a call of its own after the
            # script; a resume that changed nothing writes nothing (a mistyped name stays
            # unknown)
            await registry.touch(self._redis, self._name)
            event = text(result[3]) if len(result) > 3 else action
            log.info("fleet %s: %s v%d by %s%s%s: %s", self._name,
                     event.replace("_", " "), state.version, by,
                     f" (hold {hold})" if hold else "", f" ({reason})" if reason else "",
                     "paused" if state.paused else "running")
        # made and published either way; NotConfirmed carries the state
        return state if confirm is None else confirm.check(state)

    async def _call(
        self, keys: list[str], args: list[str], what: str, confirm: Any,
        read: tuple[Any, ...] | None,
    ) -> tuple[Any, Any]:
        """The change script's reply, with ``read``'s before it (None: no read)."""
        if read is None:
            return None, await self._set_state(keys, args, what, confirm)
        raw, result = await self._set_state(keys, args, what, confirm, read)
        return raw, result

    def _warn(self, warnings: Any) -> None:
        """Log and count what the script skipped (a replicas key of the wrong type)."""
        for raw in warnings if isinstance(warnings, list) else []:
            warning = text(raw)
            kind, _, detail = warning.partition(":")
            self.warnings[kind] += 1
            if kind == "replicas_wrongtype":
                log.warning("fleet %s: %s is a %s, not a sorted set: skipped (the change is "
                            "made; replicas are not listed until the key is deleted)",
                            self._name, self._keys.replicas, detail)
            else:
                log.warning("fleet %s: the change script warns: %s", self._name, warning)

    async def restore_if_missing(self) -> bool:
        snapshot = await self._reads.snapshot()
        ids = list(snapshot.members.scores)
        newest: FleetState | None = None
        for values in await self._reads.records(ids, (R_APPLIED_STATE,)):
            raw = values[0] if values else None
            if raw is None or raw == b"" or raw == "":
                continue
            try:
                applied = FleetState.from_json(text(raw), self._name)
            except InvalidMessage:
                continue
            if newest is None or applied.version > newest.version:
                newest = applied
        if newest is None or newest.version == 0:
            return False
        if snapshot.state.version >= newest.version:
            return False
        keys = self._keys
        written = await self._restore(
            [keys.state, keys.audit, keys.control], restore_args(newest, "coordinator", sharded=self.sharded),
            f"restore of fleet {self._name}",
        )
        if int(written) == RESTORE_RAISED:
            log.warning("fleet %s: kept the older pause in the state hash, its version raised "
                        "to v%d above the replicas' v%d (running)", self._name,
                        newest.version + 1, newest.version)
            return True
        if int(written):
            log.warning("fleet %s: restored the state hash at v%d (%s) from the replica records",
                        self._name, newest.version, "paused" if newest.paused else "running")
            return True
        return False


def _count(raw: Any) -> int | None:
    """The script's count of registered replicas (its ZCARD, an integer reply); None for
    anything else (then ``wait`` reads the members, as it would for any count but 0)."""
    return raw if type(raw) is int and raw >= 0 else None


def _positive(name: str, value: timedelta | float | None) -> timedelta | None:
    if value is None:
        return None
    seconds = timedelta_s(value)
    if not seconds > 0:
        raise ContractError(f"{name} must be positive")
    return timedelta(seconds=seconds)


__all__ = ["PRUNE_AFTER", "Changes", "LastChange"]
