"""The coordinator's library: ``Fleet`` (change, read and wait on a fleet), one module per noun
behind it (``changes``, ``reads``, ``waiting`` with ``acks`` and ``listener``, ``calls``), and its
result models. Imports the replica contract, never the CLI or the web side.

``Fleet`` is loaded on first use: importing one module of the package (``models``, ``summary``)
loads that module, not ``Fleet`` and everything behind it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet


def __getattr__(name: str) -> Any:
    if name == "Fleet":
        from coordinator.fleet.fleet import Fleet

        return Fleet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Fleet"]
