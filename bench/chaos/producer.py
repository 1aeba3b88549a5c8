"""The producer: a steady stream of items on the fleet's work stream.

``rate`` items a second, each one ``XADD`` of ``{"id": "i-000001", "kind": ..., "ms": ...}``
(the shape ``Fleet.enqueue`` writes), paced on the clock so that a Redis outage does not make
it burst afterwards. An item is ``ok`` unless a bad-handler fault is on, which makes some of
them ``fail`` or ``hang`` (see ``bench.chaos.handler``). Each XADD Redis answered is an
``enqueue`` in the history; one that failed is an ``enqueue-unknown`` (it may have been
written before the connection broke). ``t0`` is when the XADD was sent.

Each item goes through ``Fleet.enqueue``, which confirms it as a change is confirmed: on a
primary with replicas, ``WAIT`` for one of them. An item the primary took but no replica
confirmed in time is an ``enqueue-unconfirmed`` (``BatchNotConfirmed``: the producer is told a
failover may lose it, and the checker does not count it lost when one does).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Final

from redis.exceptions import RedisError

from bench.chaos.handler import FAIL, HANG, OK
from bench.chaos.history import HistoryWriter
from coordinator.fleet.durability import BatchNotConfirmed
from coordinator.fleet.fleet import Fleet
from replica.contract import Keys
from replica.link.connect import connect

CONFIRM_TIMEOUT_S: Final = 0.5
"""How long an item's ``WAIT`` may take for a Redis replica to confirm it."""


class Producer:
    """Enqueues items to ``keys.work`` on ``url`` until stopped."""

    def __init__(self, url: str, keys: Keys, rate: float, item_ms: tuple[int, int],
                 seed: int, history: HistoryWriter) -> None:
        self.keys = keys
        self.rate = rate
        self.item_ms = item_ms
        self.rng = random.Random(f"items:{seed}")
        self.history = history
        self.redis = connect(url, decode_responses=True, socket_timeout=2.0,
                             socket_connect_timeout=1.0)
        self.fleet = Fleet(self.redis, keys.fleet, min_replicas_timeout=CONFIRM_TIMEOUT_S)
        self.bad: dict[str, float] = {}
        """While a bad-handler fault is on: the share of items to ``fail`` and to ``hang``."""
        self.count = 0
        self.enqueued = 0
        self.unconfirmed = 0

    def _kind(self) -> str:
        roll = self.rng.random()
        fail, hang = self.bad.get(FAIL, 0.0), self.bad.get(HANG, 0.0)
        if roll < fail:
            return FAIL
        if roll < fail + hang:
            return HANG
        return OK

    async def run(self) -> None:
        """Enqueue until cancelled."""
        t0 = time.monotonic()
        period = 1.0 / self.rate
        n = 0
        while True:
            due = t0 + n * period
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            elif now - due > 1.0:  # fell behind (Redis was down): no burst to catch up
                n = int((now - t0) / period)
            n += 1
            await self.enqueue_one()

    async def enqueue_one(self) -> None:
        self.count += 1
        ident = f"i-{self.count:06d}"
        kind = self._kind()
        item = {"id": ident, "kind": kind, "ms": self.rng.randint(*self.item_ms)}
        t0 = time.time()
        try:
            (entry,) = await self.fleet.enqueue([item])
        except asyncio.CancelledError:
            self.history.write("enqueue-unknown", item=ident, kind=kind, error="cancelled")
            raise
        except BatchNotConfirmed as exc:  # on the primary only: a failover may lose it
            self.unconfirmed += 1
            self.history.write("enqueue-unconfirmed", item=ident, kind=kind, entry=exc.ids[0],
                               t0=t0, acked=exc.acked)
            return
        except (RedisError, OSError) as exc:
            self.history.write("enqueue-unknown", item=ident, kind=kind,
                               error=f"{type(exc).__name__}: {exc}"[:200])
            return
        self.enqueued += 1
        self.history.write("enqueue", item=ident, kind=kind, entry=entry, t0=t0)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.redis.aclose()


__all__ = ["Producer"]
