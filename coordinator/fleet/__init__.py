"""The coordinator's library: ``Fleet`` (change, read and wait on a fleet), one module per noun
behind it (``changes``, ``reads``, ``waiting`` with ``acks`` and ``listener``, ``calls``), and its
result models. Imports the replica contract, never the CLI or the web side."""

from __future__ import annotations

from coordinator.fleet.fleet import Fleet

__all__ = ["Fleet"]
