"""fleetgate, replica side: what runs inside every service instance.

``PausablePool`` is the pausable worker pool; ``FleetController`` makes it follow the fleet's
pause state in Redis; ``StreamSource`` feeds it from a Redis stream; ``follow_breaker`` pauses
it while a dependency's circuit breaker is open. The HTTP side and the process that ties them
together (``replica.service.ReplicaService``, the ``fleetgate-replica`` command) are imported
on their own, so that ``import replica`` does not pull in FastAPI and uvicorn. This package
never imports ``coordinator``.
"""

from replica.breaker import AsyncCircuitBreaker, Breaker, follow_breaker
from replica.controller import ControllerStats, FleetController
from replica.errors import (
    BreakerOpen,
    ConfigError,
    ContractError,
    FleetgateError,
    InvalidMessage,
    ItemCancelled,
    ItemTimeout,
    PoolClosed,
)
from replica.pool import PausablePool, PoolStats
from replica.settings import ReplicaSettings
from replica.source import StreamSource

__all__ = [
    "AsyncCircuitBreaker",
    "Breaker",
    "BreakerOpen",
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
    "ReplicaSettings",
    "StreamSource",
    "follow_breaker",
]
