"""The ``fleetgate`` command. It loads the web side only for ``fleetgate serve``."""

from __future__ import annotations

from coordinator.cli.app import main

__all__ = ["main"]
