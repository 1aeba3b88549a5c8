"""The pausable worker pool and its holds: usable on its own, with no Redis.\n\nImports only ``replica.errors`` and ``replica.types``; never redis or pydantic.\n"""

from __future__ import annotations

from replica.pool.holds import Holds
from replica.pool.pool import PausablePool, PoolStats

__all__ = ["Holds", "PausablePool", "PoolStats"]
