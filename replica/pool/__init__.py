"""The pausable worker pool and its holds: usable on its own, with no Redis.

The modules: ``pool`` (``PausablePool``: the queue, the gate of holds, the worker tasks),
``view`` (``PoolView``: what a pool shows of itself), ``runner`` (how a worker runs one item:
deadline, outcome, ``on_error``), ``crew`` (the worker tasks), ``holds``, ``waiters``,
``listeners`` and ``stats`` (``PoolStats``).

Imports only ``replica.errors`` and ``replica.types``; never redis or pydantic.
"""

from __future__ import annotations

from replica.pool.holds import Holds
from replica.pool.pool import PausablePool
from replica.pool.stats import PoolStats

__all__ = ["Holds", "PausablePool", "PoolStats"]
