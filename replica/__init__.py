"""fleetgate, replica side: what runs inside every service instance.

``PausablePool`` is the pausable worker pool; the rest of the replica (controller, work source,
HTTP side) builds on it. This package never imports ``coordinator``.
"""

from replica.controller import ControllerStats, FleetController
from replica.errors import (
    ConfigError,
    ContractError,
    FleetgateError,
    InvalidMessage,
    ItemCancelled,
    ItemTimeout,
    PoolClosed,
)
from replica.pool import PausablePool, PoolStats

__all__ = [
    "ConfigError",
    "ContractError",
    "ControllerStats",
    "FleetController",
    "FleetgateError",
    "InvalidMessage",
    "ItemCancelled",
    "ItemTimeout",
    "PausablePool",
    "PoolClosed",
    "PoolStats",
]
