"""Who a ``wait`` waits for, and for what, when holds cover part of a fleet.

A hold with a ``select`` holds only the replicas whose labels match, and a canary resume
releases a hold on the replicas it names (``replica.contract.holds.hold_applies``). So a
replica is waited for to be quiet when the state holds *it* (``held``), and to run otherwise,
each by its labels, read from its record (``R_LABELS``) with the rest of what ``wait`` reads.

``only`` narrows whom the wait waits for: ``pause --select`` waits for the live replicas the
selector matches, a canary resume for its canaries. A replica left out is not waited for at
all (not in the report).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.fleet.acks import _WAIT_FIELDS
from coordinator.fleet.confirm import disagreements
from coordinator.fleet.models import ReplicaInfo
from coordinator.fleet.reads import Reads
from replica.contract import R_LABELS, FleetState, now_utc, text
from replica.contract.selectors import check_labels, parse_selector
from replica.errors import ContractError

Admit = Callable[[str, Mapping[str, str]], bool]
"""Whether a replica (id, labels) is waited for."""


def partial(state: FleetState) -> bool:
    """Whether a hold of ``state`` holds only part of the fleet (a selector, canaries)."""
    return any(h.select is not None or h.canaries for h in state.holds or ())


def selected(select: str) -> Admit:
    """The replicas ``select`` matches (a selector that cannot be read admits every one)."""
    try:
        selector = parse_selector(select)
    except ContractError:
        return lambda _rid, _labels: True
    return lambda _rid, labels: selector.matches(labels)


def matching(select: str, replicas: Iterable[ReplicaInfo]) -> tuple[int, int]:
    """How many live replicas ``select`` matches, of how many live ones (the records' labels):
    what ``pause --select`` and the API's ``select`` say, and whether a wait has anyone to
    wait for."""
    admit = selected(select)
    live = [r for r in replicas if not r.stale]
    return sum(1 for r in live if admit(r.id, r.labels)), len(live)


def among(ids: frozenset[str] | set[str]) -> Admit:
    """The replicas named."""
    chosen = frozenset(ids)
    return lambda rid, _labels: rid in chosen


def labels_of(raw: Any) -> dict[str, str]:
    """A record's ``labels`` value (bytes or text), or none when it cannot be read."""
    if raw is None:
        return {}
    try:
        return check_labels(json.loads(text(raw)))
    except (ValueError, RecursionError, AttributeError, ContractError):
        return {}


@dataclass(slots=True)
class WaitScope:
    """Whom a wait waits for (``admits``) and whether each should be held (``held``)."""

    only: Admit | None = None
    state: FleetState | None = None
    """The state at the version waited for (set when the wait reads it)."""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """The labels of each replica whose record the wait read."""

    def note(self, replica_id: str, values: Sequence[Any] | None) -> None:
        """A record read with ``scoped_fields``: its labels are the last value."""
        if values is not None and len(values) > len(_WAIT_FIELDS):
            self.labels[replica_id] = labels_of(values[len(_WAIT_FIELDS)])

    def admits(self, replica_id: str) -> bool:
        return self.only is None or self.only(replica_id, self.labels.get(replica_id, {}))

    def held(self, replica_id: str, default: bool) -> bool:
        """Whether the state holds ``replica_id`` (``default``: the fleet's flag, until its
        record was read)."""
        state = self.state
        if state is None or replica_id not in self.labels:
            return default
        return state.for_replica(self.labels[replica_id], replica_id).effectively_paused(
            now_utc())


Scope = WaitScope | None
"""A wait's scope, or none (every live replica, by the fleet's flag)."""


def begin(scope: Scope, state: FleetState) -> Scope:
    """The scope of a wait that read ``state``: the one given, or one of its own when a hold
    holds only part of the fleet (else none: the fleet's flag for every replica)."""
    if scope is None and partial(state):
        scope = WaitScope()
    if scope is not None:
        scope.state = state
    return scope


def scoped_fields(scope: WaitScope | None) -> tuple[str, ...]:
    """The record fields a wait reads: with a scope, the labels too (last)."""
    return _WAIT_FIELDS if scope is None else (*_WAIT_FIELDS, R_LABELS)


async def scoped_disagreements(
    script: Any, reads: Reads, ids: Sequence[str], version: int, pause_of: Callable[[str], bool]
) -> AsyncIterator[tuple[Sequence[str], dict[str, Any]]]:
    """``confirm.disagreements`` for replicas waited for to be quiet and to run, apart."""
    for pause in (True, False):
        group = [r for r in ids if pause_of(r) is pause]
        if group:
            async for batch, disagree in disagreements(script, reads, group, version, pause):
                yield batch, disagree


__all__ = ["Admit", "Scope", "WaitScope", "among", "begin", "labels_of", "matching", "partial", "scoped_disagreements",
           "scoped_fields", "selected"]
