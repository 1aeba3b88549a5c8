"""A replica notes its fleet in the registry of fleets: ``register``.

The registry (``FLEETS_KEY``, a sorted set of fleet names scored by last activity) is how the
coordinator lists every fleet without ``SCAN``. A replica writes it at its first heartbeat and
every ``REGISTRY_EVERY_S`` after (``replica.control.record``), on its own link in a round trip
of its own: never in a script or a pipeline with the fleet's keys, since the key has no hash tag
(on a cluster it lives in a slot of its own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import AskError, ResponseError

from replica.contract.keys import FLEETS_KEY
from replica.link.connect import sharded
from replica.link.redisio import NET_ERRORS, Link, uncancelled

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S: Final = 1.0
"""The longest the registry write may hold the sync loop up (it runs every few minutes)."""


async def register(link: Link, redis: Redis | None, fleet: str, timeout: float) -> bool:
    """ZADD the fleet to the registry, within ``timeout``: on a cluster through ``redis``,
    which sends it to the primary of the registry's own slot (the link reaches the fleet's
    slot, most often on another primary), else on ``link``; a ``MOVED`` or ``ASK`` answer
    there (redis-py's ``MovedError`` and ``AskError``, whose text holds no such word) goes
    through ``redis`` too. False when the write was lost on the way (try again at the next
    heartbeat); a refusal (an ACL without it) is logged and counts as done (tried again at
    the next period). Raises, besides ``CancelledError``, only what it does not expect (a
    fault of the registration: the caller holds the pool)."""
    now_ms = int(time.time() * 1000)
    command = ("ZADD", FLEETS_KEY, now_ms, fleet)
    try:
        async with asyncio.timeout(timeout):
            if redis is not None and sharded(redis):
                reply: object = await uncancelled(redis.zadd(FLEETS_KEY, {fleet: now_ms}))
            else:
                (reply,) = await uncancelled(link.call([command]))
                if isinstance(reply, AskError) and redis is not None:  # MovedError too
                    reply = await uncancelled(redis.zadd(FLEETS_KEY, {fleet: now_ms}))
        if isinstance(reply, BaseException):
            raise reply
    except ResponseError as exc:
        log.debug("fleet %s: registry of fleets refused: %r", fleet, exc)
    except NET_ERRORS as exc:
        log.debug("fleet %s: registry of fleets not written: %r", fleet, exc)
        return False
    return True


__all__ = ["REGISTER_TIMEOUT_S", "register"]
