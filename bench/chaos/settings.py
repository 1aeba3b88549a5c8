"""The settings of a chaos run (``ChaosSettings``) and the topologies it knows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

SINGLE: Final = "single"
SENTINEL: Final = "sentinel"
CLUSTER: Final = "cluster"
TOPOLOGIES: Final = (SINGLE, SENTINEL, CLUSTER)


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    """What one run does. The replica settings are short on purpose: a freeze of a few seconds
    outlives the heartbeat (1 s) and the claim idle time (5 s)."""

    seed: int
    duration: float
    replicas: int = 3
    topology: str = SINGLE
    fleet: str = "chaos"
    rate: float = 40.0
    """Items the producer enqueues per second."""
    item_ms: tuple[int, int] = (5, 40)
    """How long an ordinary item runs, drawn in this range (ms)."""
    workers: int = 4
    poll_interval: float = 0.5
    heartbeat_interval: float = 1.0
    claim_idle: float = 5.0
    item_timeout: float = 2.0
    max_retries: int = 1
    retry_backoff: float = 0.2
    pause_timeout: float = 15.0
    fault_every: float = 3.0
    """Mean seconds between the starts of two faults."""
    op_every: tuple[float, float] = (0.5, 3.0)
    """The operator's pause between two calls, drawn in this range (s)."""
    settle_timeout: float = 30.0
    """After the faults heal, how long the replicas get to agree with the last action."""
    drain_timeout: float = 90.0
    """After the final resume, how long the backlog gets to be worked off."""
    workdir: Path | None = None
    """Where the history and the logs go (default: a new temporary directory)."""
    keep: bool = False
    """Keep the work directory even when every rule held."""
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r} (single, sentinel, cluster)")
        if self.duration <= 0:
            raise ValueError("the duration must be positive")
        if not 1 <= self.replicas <= 20:
            raise ValueError("between 1 and 20 replicas")
        if self.rate <= 0:
            raise ValueError("the rate must be positive")

    @property
    def replicated(self) -> bool:
        """A Sentinel group or a Cluster (``bench.chaos.ha``), not one server."""
        return self.topology != SINGLE

    @property
    def renew_interval(self) -> float:
        """How often a replica renews the leases of its items (the source's keep loop)."""
        return max(self.claim_idle / 3, 0.05)

    def header(self) -> dict[str, Any]:
        """What the checker needs to know of the run (the ``run`` event's ``settings``)."""
        data = asdict(self)
        keep = ("replicas", "rate", "workers", "poll_interval", "heartbeat_interval",
                "claim_idle", "item_timeout", "max_retries", "retry_backoff", "pause_timeout")
        out = {k: data[k] for k in keep}
        out["renew_interval"] = self.renew_interval
        out["topology"] = self.topology
        return out


def topology_of_seed(seed: int) -> str:
    """The topology a seed chooses (``--topology seed``: ``make test`` covers each in turn)."""
    return TOPOLOGIES[seed % len(TOPOLOGIES)]


__all__ = ["CLUSTER", "SENTINEL", "SINGLE", "TOPOLOGIES", "ChaosSettings", "topology_of_seed"]
