"""A dry run of ``pause`` or ``resume``: what the change would do, written nowhere.

The change script itself works the change out in a dry-run mode (ARGV[21] of
``set_state.lua``): the same code as a real change decides the holds after it, the fleet's
state and the audit action, then answers without writing, pruning, auditing or publishing
(no version bump). So a dry run cannot disagree with the change it previews; only what the
replicas would do is worked out here, from their records' labels and the holds before and
after (``replica.contract.holds.hold_applies``, the rule every replica applies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from coordinator.fleet.models import ReplicaInfo
from coordinator.fleet.schedule import holds_dict
from replica.contract import FleetState, Holds, validate_replica_id
from replica.errors import ContractError

CANARY_OPS: Final = ("", "canary", "rollback", "promote")


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a change would do: the holds before it, the state it would write, its action."""

    before: Holds
    state: FleetState
    event: str
    schedule: str = ""
    """The schedule whose entry the change would write (a canary step or an early end of
    its occurrence: the state's version stays), or "" (a change of the state)."""

    def state_before(self) -> FleetState:
        """The fleet as it is (with the holds the script read)."""
        return replace(self.state, holds=self.before)


def check_canary(op: str, hold: str, canaries: Sequence[str]) -> None:
    """A canary step of a resume: ``canary`` (with the replica ids to release the hold on),
    ``rollback``, ``promote`` or ``""`` (none), of a named hold. Raises ``ContractError``."""
    if op not in CANARY_OPS:
        raise ContractError(f"unknown canary step {op!r}")
    if op and not hold:
        raise ContractError("a canary resume names its hold (--hold NAME)")
    if (op == "canary") != bool(canaries):
        raise ContractError("a canary resume names the replicas it releases, and only it")
    for rid in canaries:
        validate_replica_id(rid)


@dataclass(frozen=True, slots=True)
class Plan:
    """Which live replicas a change would hold or release (ids, sorted)."""

    hold: list[str]
    release: list[str]
    stay_held: list[str]
    stay_running: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"hold": self.hold, "release": self.release, "stay_held": self.stay_held,
                "stay_running": self.stay_running}


def plan(dry: DryRun, replicas: Sequence[ReplicaInfo], now: datetime) -> Plan:
    """What ``dry`` would do to each live replica of ``replicas``, by its labels."""
    before, after = dry.state_before(), dry.state
    out: dict[tuple[bool, bool], list[str]] = {(a, b): [] for a in (True, False)
                                               for b in (True, False)}
    for r in replicas:
        if r.stale:
            continue
        held = before.for_replica(r.labels, r.id).effectively_paused(now)
        will = after.for_replica(r.labels, r.id).effectively_paused(now)
        out[(held, will)].append(r.id)
    return Plan(hold=sorted(out[(False, True)]), release=sorted(out[(True, False)]),
                stay_held=sorted(out[(True, True)]), stay_running=sorted(out[(False, False)]))


def dry_run_dict(dry: DryRun, replicas: Sequence[ReplicaInfo], now: datetime) -> dict[str, Any]:
    """The JSON of a dry run (``--dry-run --json``, the API's ``dry_run: true``)."""
    return {
        "fleet": dry.state.fleet,
        "dry_run": True,
        "event": dry.event,
        "version": dry.state.version,
        "schedule": dry.schedule or None,
        "paused_before": dry.state_before().effectively_paused(now),
        "paused_after": dry.state.effectively_paused(now),
        "holds_before": holds_dict(dry.state_before(), now),
        "holds_after": holds_dict(dry.state, now),
        "replicas": plan(dry, replicas, now).to_dict(),
    }


def dry_run_lines(dry: DryRun, replicas: Sequence[ReplicaInfo], now: datetime) -> list[str]:
    """What ``--dry-run`` prints: the change, the holds before and after, the replicas."""
    name = dry.state.fleet
    before, after = dry.state_before(), dry.state
    was, will = before.effectively_paused(now), after.effectively_paused(now)
    fate = (f"would stay paused by {_names(after, now)}" if was and will else
            f"would be paused by {_names(after, now)}" if will else
            "would resume" if was else "would stay running")
    p = plan(dry, replicas, now)
    written = (f"schedule {dry.schedule}'s entry would be written" if dry.schedule else
               f"version {after.version} would be written")
    return [
        f"dry run: {dry.event.replace('_', ' ')}; fleet {name} {fate} ({written}; nothing "
        "was)",
        f"holds before: {_listing(before, now)}",
        f"holds after:  {_listing(after, now)}",
        f"replicas: {_ids('would be held', p.hold)}; {_ids('released', p.release)}; "
        f"{len(p.stay_held)} stay held, {len(p.stay_running)} stay running",
    ]


def _names(state: FleetState, now: datetime) -> str:
    return ", ".join(h.name for h in state.active_holds(now)) or "-"


def _listing(state: FleetState, now: datetime) -> str:
    parts = []
    for h in state.effective_holds():
        extra = [h.status(now)]
        if h.select is not None:
            extra.append(f"select {h.select!r}")
        if h.canaries:
            extra.append(f"canaries {', '.join(h.canaries)}")
        parts.append(f"{h.name} ({', '.join(extra)})")
    return ", ".join(parts) or "none"


def _ids(what: str, ids: list[str]) -> str:
    shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return f"{len(ids)} {what}" + (f" ({shown})" if ids else "")


__all__ = ["CANARY_OPS", "DryRun", "Plan", "check_canary", "dry_run_dict", "dry_run_lines",
           "plan"]
