"""A resume that starts small: which replicas a canary resume releases, and the soak that
judges them.

``resume --hold NAME --canary N|P%`` releases the hold on N replicas (or P% of the live
replicas the hold holds, rounded up, at least 1), chosen by a stable rule: the live replicas
the hold applies to (its selector, ``hold_applies``), ordered by a hash of fleet, hold and
replica id (``canary_order``), the first N. The same fleet, hold and replicas give the same
canaries, on any machine; another hold picks others, so one replica is not everyone's canary.

The soak (``soak``) watches the canaries' records for a while: a canary whose ``failed`` or
``timed_out`` runs or ``dead_lettered`` items grew since the soak began, whose circuit breaker
holds its pool (hold source ``breaker``), or that went silent or left, fails it at once. Those
counters are written with each heartbeat, so at the end the soak waits for one heartbeat of
every canary written after it (its score in the replicas set: a change's quick write does not
move it), at most ``END_HEARTBEATS`` heartbeat intervals; a canary that writes none fails it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from coordinator.fleet.calls import again
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import ReplicaInfo
from replica.contract import Hold, now_utc
from replica.contract.holds import hold_applies
from replica.errors import ContractError

END_HEARTBEATS: Final = 3.0
"""After the soak, how many heartbeat intervals it waits at most for each canary's heartbeat."""
SOAK_POLL_S: Final = 1.0
"""How often the soak reads the canaries' records."""
BREAKER_SOURCE: Final = "breaker"

_SPEC_RE: Final = re.compile(r"\s*([0-9]{1,6})\s*(%?)\s*")


@dataclass(frozen=True, slots=True)
class CanarySpec:
    """``--canary``: a number of replicas, or a percentage of the live ones the hold holds."""

    n: int
    percent: bool

    def size(self, live: int) -> int:
        """How many canaries among ``live`` candidates: at least 1, at most ``live``."""
        k = math.ceil(live * self.n / 100) if self.percent else self.n
        return max(1, min(k, live))

    def __str__(self) -> str:
        return f"{self.n}%" if self.percent else str(self.n)


def parse_canary(text: str) -> CanarySpec:
    """``3`` or ``10%``. Raises ``ContractError`` (one line)."""
    m = _SPEC_RE.fullmatch(text) if isinstance(text, str) else None
    if m is None or int(m.group(1)) < 1 or (m.group(2) and int(m.group(1)) > 100):
        raise ContractError(f"--canary must be a number of replicas (3) or a percentage of the "
                            f"live ones, 1% to 100% (10%), not {str(text)[:40]!r}")
    return CanarySpec(int(m.group(1)), bool(m.group(2)))


def canary_order(fleet: str, hold: str, ids: Sequence[str]) -> list[str]:
    """``ids`` in the stable order canaries are taken in (a hash of fleet, hold and id)."""
    def key(replica_id: str) -> tuple[bytes, str]:
        digest = hashlib.blake2b(f"{fleet}\0{hold}\0{replica_id}".encode(), digest_size=8)
        return digest.digest(), replica_id
    return sorted(ids, key=key)


def candidates(hold: Hold, replicas: Sequence[ReplicaInfo]) -> list[str]:
    """The live replicas ``hold`` applies to (its selector; canaries of an earlier canary
    resume count again), sorted by id."""
    whole = replace(hold, canaries=())
    return sorted(r.id for r in replicas if not r.stale and hold_applies(whole, r.labels, r.id))


def choose(fleet: str, hold: Hold, replicas: Sequence[ReplicaInfo],
           spec: CanarySpec) -> tuple[list[str], int]:
    """The canaries (sorted by id) and how many live replicas the hold applies to. Raises
    ``ContractError`` when it applies to none."""
    pool = candidates(hold, replicas)
    if not pool:
        raise ContractError(f"hold {hold.name} of fleet {fleet} holds no live replica: no "
                            "canary to release (resume --hold to release it)")
    return sorted(canary_order(fleet, hold.name, pool)[:spec.size(len(pool))]), len(pool)


# ---------------------------------------------------------------------------- the soak


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a soak ended: ``ok``, or why not (``why``, naming the canary)."""

    ok: bool
    why: str = ""
    elapsed_s: float = 0.0


def _counter(r: ReplicaInfo, name: str) -> int:
    try:
        return int(r.extra.get(name, "0") or 0)
    except ValueError:
        return 0


def trouble(before: ReplicaInfo, now: ReplicaInfo | None) -> str | None:
    """What went wrong on a canary since ``before`` (its record at the soak's start), or None."""
    rid = before.id
    if now is None:
        return f"{rid} left (its record is gone)"
    if now.stale:
        return f"{rid} is unreachable (its heartbeat stopped)"
    if BREAKER_SOURCE in now.holds:
        return f"{rid}'s circuit breaker opened"
    grew = [(now.failed - before.failed, "failed runs"),
            (_counter(now, "timed_out") - _counter(before, "timed_out"), "timed out runs"),
            (_counter(now, "dead_lettered") - _counter(before, "dead_lettered"),
             "dead letters")]
    said = [f"{n} {what}" for n, what in grew if n > 0]
    return f"{rid}: {', '.join(said)}" if said else None


async def read_canaries(fleet: Fleet, ids: Sequence[str]) -> tuple[dict[str, ReplicaInfo | None],
                                                                   dict[str, float | None]]:
    """The records of ``ids`` and their heartbeat scores (ms), in one round trip."""
    redis, keys = fleet.redis, fleet.keys

    async def call() -> list[object]:
        pipe = redis.pipeline(transaction=False)
        for rid in ids:
            pipe.hgetall(keys.replica(rid))
        pipe.zmscore(keys.replicas, list(ids))
        return list(await pipe.execute())

    replies = await again(call)
    now = now_utc()
    scores_raw = replies[-1] if isinstance(replies[-1], list) else [None] * len(ids)
    scores = {rid: (float(s) if s is not None else None) for rid, s in zip(ids, scores_raw,
                                                                          strict=True)}
    records: dict[str, ReplicaInfo | None] = {}
    for rid, raw in zip(ids, replies[:-1], strict=True):
        records[rid] = (ReplicaInfo.from_record(fleet.name, rid, raw, scores[rid], now)
                        if isinstance(raw, dict) and raw else None)
    return records, scores


async def soak(
    fleet: Fleet, ids: Sequence[str], seconds: float, *, poll_s: float = SOAK_POLL_S,
    on_check: Callable[[float], Awaitable[None]] | None = None,
) -> Verdict:
    """Watch the canaries ``ids`` for ``seconds`` (see the module): a failed verdict as soon as
    one is in trouble, else ok once each wrote a heartbeat after the soak's end."""
    t0 = time.monotonic()
    start, scores = await read_canaries(fleet, ids)
    missing = [rid for rid, r in start.items() if r is None]
    if missing:
        return Verdict(False, f"{missing[0]} left (its record is gone)", 0.0)
    before = {rid: r for rid, r in start.items() if r is not None}
    end = t0 + seconds
    end_ms: float | None = None
    longest = max(r.heartbeat_interval for r in before.values())
    while True:
        now = time.monotonic()
        if end_ms is None and now >= end:
            end_ms = time.time() * 1000
        if end_ms is not None and now >= end + END_HEARTBEATS * longest:
            late = [rid for rid, s in scores.items() if s is None or s < end_ms]
            return Verdict(False, f"{late[0]} wrote no heartbeat after the soak (unreachable)",
                           now - t0)
        await asyncio.sleep(min(poll_s, max(0.0, end - now)) if end_ms is None else poll_s)
        records, scores = await read_canaries(fleet, ids)
        for rid, first in before.items():
            why = trouble(first, records[rid])
            if why is not None:
                return Verdict(False, why, time.monotonic() - t0)
        if on_check is not None:
            await on_check(time.monotonic() - t0)
        if end_ms is not None and all(s is not None and s >= end_ms for s in scores.values()):
            return Verdict(True, "", time.monotonic() - t0)


__all__ = [
    "CanarySpec",
    "Verdict",
    "canary_order",
    "candidates",
    "choose",
    "parse_canary",
    "read_canaries",
    "soak",
    "trouble",
]
