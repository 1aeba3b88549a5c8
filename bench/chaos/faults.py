"""The faults of a chaos run and the schedule drawn from its seed.

| kind | how (``bench.chaos.injector`` does it) |
| --- | --- |
| ``kill`` | a replica gets SIGKILL, stays down ``down`` seconds, then starts again (a new life) |
| ``freeze`` | a replica gets SIGSTOP, then SIGCONT ``duration`` seconds later: longer than its heartbeat, and sometimes (``long``) longer than FLEETGATE_CLAIM_IDLE |
| ``redis-restart`` | Redis gets SIGKILL and starts again ``down`` seconds later, from its append-only file (``aof``: it keeps every acknowledged write, ``appendfsync always``) or empty (``empty``) |
| ``pubsub-kill`` | ``CLIENT KILL`` of every pub/sub connection (the observer's own excepted, so the history keeps the acknowledgements) |
| ``link`` | the TCP proxy between the first replica and Redis delays (``delay``), resets (``drop``) or black-holes (``blackhole``) the link for ``duration`` seconds |
| ``garbage`` | for ``duration`` seconds, invalid messages and replays of older states on the control channel |
| ``bad-handler`` | for ``duration`` seconds, some items fail and some hang past ``item_timeout`` |

On a Sentinel group or a Cluster (``bench.chaos.ha``) Redis is never restarted in place and no
proxy sits on a link (a replica reaches the primary the sentinels or the slots name); instead:

| kind | how |
| --- | --- |
| ``primary-kill`` | the fleet's primary gets SIGKILL; once failed over, it stays down ``duration`` seconds more, then starts again empty, a replica |
| ``failover`` | ``SENTINEL FAILOVER`` (``CLUSTER FAILOVER``) with the old primary alive |
| ``lossy-failover`` | the Redis replica frozen and its link filled for ``duration`` seconds (what the primary acknowledges meanwhile no replica confirms), then the primary killed and the replica promoted without it |
| ``sentinel-kill`` | a sentinel gets SIGKILL, starts again ``duration`` seconds later (Sentinel) |
| ``shard-kill`` | the primary of another shard gets SIGKILL, fails over, starts again (Cluster) |

The schedule is a pure function of the settings (the seed above all): the same seed gives the
same faults at the same offsets, whatever the machine does. A target is never given two faults
at once (a replica is not frozen while it is down; the link has one mode at a time; Redis
restarts one at a time); different targets overlap freely, which is the point. The first
faults are one of each kind, in an order drawn from the seed, so that even a short run has
them all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Final

from bench.chaos.settings import ChaosSettings

KILL: Final = "kill"
FREEZE: Final = "freeze"
REDIS_RESTART: Final = "redis-restart"
PUBSUB_KILL: Final = "pubsub-kill"
LINK: Final = "link"
GARBAGE: Final = "garbage"
BAD_HANDLER: Final = "bad-handler"
PRIMARY_KILL: Final = "primary-kill"
FAILOVER: Final = "failover"
LOSSY_FAILOVER: Final = "lossy-failover"
SENTINEL_KILL: Final = "sentinel-kill"
SHARD_KILL: Final = "shard-kill"
UNPLANNED_FAILOVER: Final = "unplanned-failover"
"""Not drawn: a failover the topology made by itself (``bench.chaos.switches`` records it)."""
KINDS: Final = (KILL, FREEZE, REDIS_RESTART, PUBSUB_KILL, LINK, GARBAGE, BAD_HANDLER)
"""The faults of one server (``--topology single``)."""
WEIGHTS: Final = {KILL: 1.0, FREEZE: 1.5, REDIS_RESTART: 0.4, PUBSUB_KILL: 1.0, LINK: 1.5,
                  GARBAGE: 1.0, BAD_HANDLER: 0.7, PRIMARY_KILL: 0.5, FAILOVER: 0.5,
                  LOSSY_FAILOVER: 0.4, SENTINEL_KILL: 0.5, SHARD_KILL: 0.3}
HA_FAILOVERS: Final = (PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER, SHARD_KILL, UNPLANNED_FAILOVER)
"""The faults that move a primary: the whole fleet's connections break, writes may be lost."""
SENTINEL_KINDS: Final = (KILL, FREEZE, PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER, SENTINEL_KILL,
                         PUBSUB_KILL, GARBAGE, BAD_HANDLER)
CLUSTER_KINDS: Final = (KILL, FREEZE, PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER, SHARD_KILL,
                        PUBSUB_KILL, GARBAGE, BAD_HANDLER)
ALL_KINDS: Final = (*KINDS, PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER, SENTINEL_KILL, SHARD_KILL,
                     UNPLANNED_FAILOVER)

FLEET_TARGET: Final = "fleet"
REDIS_TARGET: Final = "redis"
LINK_TARGET: Final = "link"
SENTINEL_TARGET: Final = "sentinel"
TAIL_S: Final = 3.0
"""No fault starts in the last seconds of the run (they would all be cut short)."""


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``at`` seconds into the run, on ``target``, for ``duration`` seconds."""

    id: int
    kind: str
    at: float
    target: str
    duration: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.at + self.duration

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "target": self.target, "params": self.params,
                "planned_at": round(self.at, 3), "planned_for": round(self.duration, 3)}


def kinds_for(settings: ChaosSettings) -> tuple[str, ...]:
    """The kinds of fault a run on ``settings.topology`` draws."""
    return {"sentinel": SENTINEL_KINDS, "cluster": CLUSTER_KINDS}.get(settings.topology, KINDS)


def replica_ids(settings: ChaosSettings) -> list[str]:
    return [f"{settings.fleet}-{i}" for i in range(1, settings.replicas + 1)]


def proxied_replica(settings: ChaosSettings) -> str:
    """The replica that reaches Redis through the proxy: the first one."""
    return replica_ids(settings)[0]


def _draw(kind: str, rng: random.Random, s: ChaosSettings,
          replicas: list[str]) -> tuple[str, float, dict[str, Any]]:
    """Target, duration and parameters of a fault of ``kind``."""
    if kind == KILL:
        return rng.choice(replicas), rng.uniform(0.3, 2.0), {}
    if kind == FREEZE:
        long = rng.random() < 0.3
        if long:
            duration = rng.uniform(1.1, 1.6) * s.claim_idle
        else:
            duration = rng.uniform(1.5 * s.heartbeat_interval,
                                   max(1.6 * s.heartbeat_interval, 0.6 * s.claim_idle))
        return rng.choice(replicas), duration, {"long": long}
    if kind == REDIS_RESTART:
        return REDIS_TARGET, rng.uniform(0.2, 1.5), {
            "mode": "empty" if rng.random() < 0.4 else "aof"}
    if kind == PUBSUB_KILL:
        return FLEET_TARGET, 0.0, {"times": rng.choice((1, 1, 2))}
    if kind == LINK:
        mode = rng.choice(("delay", "drop", "blackhole"))
        if mode == "delay":
            return LINK_TARGET, rng.uniform(2.0, 6.0), {"mode": mode,
                                                        "delay": round(rng.uniform(0.05, 0.4), 3)}
        if mode == "drop":
            return LINK_TARGET, rng.uniform(0.5, 3.0), {"mode": mode}
        return LINK_TARGET, rng.uniform(1.0, 1.6 * s.claim_idle), {"mode": mode}
    if kind == GARBAGE:
        return FLEET_TARGET, rng.uniform(0.5, 2.0), {}
    if kind == BAD_HANDLER:
        return FLEET_TARGET, rng.uniform(3.0, 10.0), {"fail": 0.15, "hang": 0.1}
    if kind in (PRIMARY_KILL, SHARD_KILL):
        return REDIS_TARGET, rng.uniform(0.3, 2.0), {}
    if kind == FAILOVER:
        return REDIS_TARGET, 0.0, {}
    if kind == LOSSY_FAILOVER:
        return REDIS_TARGET, rng.uniform(0.5, 2.5), {}
    if kind == SENTINEL_KILL:
        return SENTINEL_TARGET, rng.uniform(1.0, 5.0), {}
    raise ValueError(f"unknown fault kind {kind!r}")


def _busy_key(kind: str, target: str) -> str:
    """Faults with the same key never overlap."""
    if kind in (KILL, FREEZE):
        return f"replica:{target}"
    if kind in (PUBSUB_KILL, GARBAGE, BAD_HANDLER):
        return kind
    return target


def draw_schedule(settings: ChaosSettings) -> list[Fault]:
    """The run's faults, in start order (see the module docstring)."""
    rng = random.Random(f"faults:{settings.seed}")
    replicas = replica_ids(settings)
    last = settings.duration - TAIL_S
    busy: dict[str, float] = {}
    faults: list[Fault] = []
    first = list(kinds_for(settings))
    rng.shuffle(first)
    kinds = list(kinds_for(settings))
    weights = [WEIGHTS[k] for k in kinds]
    t = rng.uniform(0.5, 1.5)
    while t < last:
        kind = first.pop(0) if first else rng.choices(kinds, weights)[0]
        target, duration, params = _draw(kind, rng, settings, replicas)
        duration = min(duration, max(0.0, last - t))
        key = _busy_key(kind, target)
        start = max(t, busy.get(key, 0.0))
        if start < last:
            faults.append(Fault(len(faults) + 1, kind, round(start, 3), target,
                                round(duration, 3), params))
            # a replica killed is up again some seconds after its restart
            busy[key] = start + duration + (2.0 if kind in (KILL, REDIS_RESTART) else
                                            5.0 if kind in HA_FAILOVERS else 0.3)
        t += rng.expovariate(1.0 / settings.fault_every)
    faults.sort(key=lambda f: f.at)
    return [replace(f, id=i) for i, f in enumerate(faults, 1)]


__all__ = ["ALL_KINDS", "BAD_HANDLER", "CLUSTER_KINDS", "FAILOVER", "FREEZE", "GARBAGE",
           "HA_FAILOVERS", "KILL", "KINDS", "LINK", "LOSSY_FAILOVER", "PRIMARY_KILL",
           "PUBSUB_KILL", "REDIS_RESTART", "SENTINEL_KILL", "SENTINEL_KINDS", "SHARD_KILL",
           "UNPLANNED_FAILOVER", "Fault", "draw_schedule", "kinds_for", "proxied_replica", "replica_ids"]
