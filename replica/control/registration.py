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
from redis.exceptions import ResponseError

from replica.contract.keys import FLEETS_KEY
from replica.control.redisio import Link, uncancelled

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S: Final = 1.0
"""The longest the registry write may hold the sync loop up (it runs every few minutes)."""


async def register(link: Link, redis: Redis | None, fleet: str, timeout: float) -> bool:
    """ZADD the fleet to the registry on ``link``, within ``timeout``. A cluster node that does
    not serve the key's slot answers MOVED: then it goes through ``redis``, which routes it.
    False when the write was lost on the way (try again at the next heartbeat); a refusal (an
    ACL without it) is logged and counts as done (tried again at the next period). Never
    raises but ``CancelledError``."""
    now_ms = int(time.time() * 1000)
    command = ("ZADD", FLEETS_KEY, now_ms, fleet)
    try:
        async with asyncio.timeout(timeout):
            (reply,) = await uncancelled(link.call([command]))
            if isinstance(reply, ResponseError) and redis is not None and \
                    str(reply).startswith(("MOVED", "ASK")):
                reply = await uncancelled(redis.zadd(FLEETS_KEY, {fleet: now_ms}))
        if isinstance(reply, BaseException):
            raise reply
    except ResponseError as exc:
        log.debug("fleet %s: registry of fleets refused: %r", fleet, exc)
    except Exception as exc:  # bookkeeping: it never ends the loop
        log.debug("fleet %s: registry of fleets not written: %r", fleet, exc)
        return False
    return True


__all__ = ["REGISTER_TIMEOUT_S", "register"]
