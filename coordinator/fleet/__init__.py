"""The coordinator's library: ``Fleet`` (change, read and wait on a fleet), its acknowledgement\ntracking and its result models. Imports the replica contract, never the CLI or the web side."""

from __future__ import annotations

from coordinator.fleet.fleet import Fleet

__all__ = ["Fleet"]
