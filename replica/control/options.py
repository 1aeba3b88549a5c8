"""ControllerSettings: the options of a ``FleetController``, in one object.

``FleetController`` takes them as keyword arguments too (``poll_interval=...``); its
signature's defaults are these (``replica.service.settings`` reads them from there). The
controller's parts (the state applier, the sync loop) take the settings object.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from typing import Final, Literal

from replica.errors import ConfigError, ContractError

ControlLossMode = Literal["keep", "hold"]
"""What a replica does once it has not read the fleet's state for ``control_loss_after``."""
CONTROL_LOSS_MODES: Final[tuple[ControlLossMode, ...]] = ("keep", "hold")
CONTROL_LOSS_POLLS: Final = 3
"""``control_loss_after`` defaults to this many poll intervals."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerSettings:
    """How a controller follows its fleet. ``None`` for ``host`` and ``io_timeout`` means
    derived: the host name, and ``max(2 s, 2 * poll_interval)`` (see ``resolved()``)."""

    poll_interval: float = 1.0
    """Seconds between reads of the state hash (the certainty behind the pushes)."""
    heartbeat_interval: float = 10.0
    """Seconds between full writes of the replica record (a change writes at once)."""
    host: str | None = None
    """The host name the record shows."""
    labels: tuple[tuple[str, str], ...] = ()
    """The replica's labels (key, value), sorted: a hold with a ``select`` holds it only when
    they match (``replica.contract.selectors``). In the record as ``labels``."""
    control_loss: ControlLossMode = "keep"
    """``keep``: a replica that cannot read the state keeps the one it applied (fail-static);
    ``hold``: it holds its pool (source ``control-plane``) after ``control_loss_after``
    without a read, until it reads the state again."""
    control_loss_after: float | None = None
    """Seconds without a read of the state before ``hold`` holds the pool (None: derived,
    ``3 * poll_interval``)."""
    pause_timeout: float = 30.0
    """After this long under a pause with items still in flight, log it (once per pause)."""
    io_timeout: float | None = None
    """The bound of one round trip to Redis."""
    start_timeout: float = 10.0
    """``start()`` returns after this long at most, synced or not."""
    pubsub_ping_interval: float = 30.0
    """An idle subscription is pinged after this long, and replaced when its ping goes
    unanswered as long."""
    reconnect_cap: float = 5.0
    """The longest wait between two reconnection attempts."""
    fault_fatal_after: float = 300.0
    """A loop of the controller failing on an error it does not expect holds the pool and is
    retried; failing for longer than this, the replica reports itself not alive
    (``FleetController.unrecoverable()``, the service's liveness probe)."""

    def __post_init__(self) -> None:
        if self.poll_interval <= 0:
            raise ConfigError("poll_interval must be positive")
        if self.heartbeat_interval <= 0:
            raise ConfigError("heartbeat_interval must be positive")
        if self.control_loss not in CONTROL_LOSS_MODES:
            raise ConfigError(f"control_loss must be keep or hold, not {self.control_loss!r}")
        if self.labels:
            from replica.contract.selectors import check_labels

            try:
                check_labels(dict(self.labels))
            except ContractError as exc:
                raise ConfigError(f"labels: {exc}") from None
        if not self.fault_fatal_after > 0:
            raise ConfigError("fault_fatal_after must be positive")
        after = self.control_loss_after
        if after is not None and not after > self.poll_interval:
            raise ConfigError(f"control_loss_after ({after} s) must be longer than "
                              f"poll_interval ({self.poll_interval} s)")

    def resolved(self) -> ControllerSettings:
        """These settings with the derived values filled in (``host``, ``io_timeout``,
        ``control_loss_after``) and the intervals as floats."""
        return replace(
            self,
            poll_interval=float(self.poll_interval),
            heartbeat_interval=float(self.heartbeat_interval),
            host=self.host_name,
            io_timeout=self.round_trip_timeout,
            control_loss_after=self.loss_after,
        )

    @property
    def host_name(self) -> str:
        """``host``, or this machine's name when it is None."""
        return self.host if self.host is not None else socket.gethostname()

    @property
    def round_trip_timeout(self) -> float:
        """``io_timeout``, or ``max(2 s, 2 * poll_interval)`` when it is None."""
        return self.io_timeout if self.io_timeout is not None else max(2.0, 2 * self.poll_interval)

    @property
    def loss_after(self) -> float:
        """``control_loss_after``, or ``3 * poll_interval`` when it is None."""
        after = self.control_loss_after
        return float(after) if after is not None else CONTROL_LOSS_POLLS * self.poll_interval


DEFAULTS = ControllerSettings()
"""The defaults (``FleetController``'s keyword arguments default to them)."""

__all__ = ["CONTROL_LOSS_MODES", "CONTROL_LOSS_POLLS", "DEFAULTS", "ControlLossMode",
           "ControllerSettings"]
