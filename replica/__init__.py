"""fleetgate, replica side: what runs inside every service instance.

``PausablePool`` is the pausable worker pool; ``FleetController`` makes it follow the fleet's
pause state in Redis; ``StreamSource`` feeds it from a Redis stream; ``follow_breaker`` pauses
it while a dependency's circuit breaker is open. This package never imports ``coordinator``.

The layers, each importing only those above it (``tests/test_layers.py`` holds them to it)::

    replica.errors, replica.types   leaves: the exception hierarchy and type aliases
    replica.contract                the Redis contract both sides share (no redis, no pydantic)
    replica.pool                    the pausable pool and its holds (no redis, no pydantic)
    replica.link, replica.process   what both sides use: the Redis link (connect, redisio,
                                    subscription, diagnose) and a process's life (shutdown,
                                    signals, exit statuses; the HTTP guard; tracing)
    replica.control                 following the fleet's state in Redis: FleetController
    replica.service                 the replica process: stream source, HTTP, metrics, settings
    replica.demo, replica.__main__  demo handlers and the ``fleetgate-replica`` command

The public names below are loaded on first use, so ``import replica.pool`` loads neither redis
nor pydantic, and ``from replica import FleetController`` still works.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replica.control.controller import ControllerStats, FleetController
    from replica.errors import (
        BreakerOpen,
        ConfigError,
        ContractError,
        FleetgateError,
        HandlerCancelled,
        HandlerExited,
        InvalidMessage,
        ItemCancelled,
        ItemTimeout,
        OutcomeUnknown,
        PoolClosed,
    )
    from replica.pool.pool import PausablePool, PoolStats
    from replica.service.breaker import AsyncCircuitBreaker, Breaker, follow_breaker
    from replica.service.handlers import HandlerContext, context
    from replica.service.settings import ReplicaSettings
    from replica.service.source import StreamSource

_LAZY: dict[str, str] = {
    "AsyncCircuitBreaker": "replica.service.breaker",
    "Breaker": "replica.service.breaker",
    "follow_breaker": "replica.service.breaker",
    "ControllerStats": "replica.control.controller",
    "FleetController": "replica.control.controller",
    "BreakerOpen": "replica.errors",
    "ConfigError": "replica.errors",
    "ContractError": "replica.errors",
    "FleetgateError": "replica.errors",
    "HandlerCancelled": "replica.errors",
    "HandlerExited": "replica.errors",
    "InvalidMessage": "replica.errors",
    "ItemCancelled": "replica.errors",
    "ItemTimeout": "replica.errors",
    "OutcomeUnknown": "replica.errors",
    "PoolClosed": "replica.errors",
    "PausablePool": "replica.pool.pool",
    "PoolStats": "replica.pool.pool",
    "HandlerContext": "replica.service.handlers",
    "context": "replica.service.handlers",
    "ReplicaSettings": "replica.service.settings",
    "StreamSource": "replica.service.source",
}

__all__ = [
    "AsyncCircuitBreaker",
    "Breaker",
    "BreakerOpen",
    "ConfigError",
    "ContractError",
    "ControllerStats",
    "FleetController",
    "FleetgateError",
    "HandlerCancelled",
    "HandlerContext",
    "HandlerExited",
    "InvalidMessage",
    "ItemCancelled",
    "ItemTimeout",
    "OutcomeUnknown",
    "PausablePool",
    "PoolClosed",
    "PoolStats",
    "ReplicaSettings",
    "StreamSource",
    "context",
    "follow_breaker",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'replica' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
