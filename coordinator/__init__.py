"""fleetgate, coordinator side: the operator's control of a fleet (``Fleet``), the CLI, the API.

Imports of ``replica`` only what both sides share: the contract, the Redis link
(``replica.link``), a process's life (``replica.process``), errors and types, and the pool for
the demo; never the other way round. The layers, each
importing only those above it (``tests/test_layers.py`` holds them to it)::

    coordinator.durations, coordinator.settings   leaves: durations, settings, URL redaction
    coordinator.fleet                              the library: Fleet, its acks and models
    coordinator.render                             views of the library's results (text, JSON)
    coordinator.notify                             notifications: audit events to signed webhooks
    coordinator.cli, coordinator.web               the ``fleetgate`` command; the API, dashboard
    coordinator.demo                               ``fleetgate demo`` and its local Redis

The public names are loaded on first use, so ``fleetgate --help`` loads no web framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet
    from coordinator.fleet.models import AuditEvent, ReplicaInfo, ReplicaResult, WaitReport

_LAZY: dict[str, str] = {
    "Fleet": "coordinator.fleet.fleet",
    "AuditEvent": "coordinator.fleet.models",
    "ReplicaInfo": "coordinator.fleet.models",
    "ReplicaResult": "coordinator.fleet.models",
    "WaitReport": "coordinator.fleet.models",
}

__all__ = [
    "AuditEvent",
    "Fleet",
    "ReplicaInfo",
    "ReplicaResult",
    "WaitReport",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'coordinator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
