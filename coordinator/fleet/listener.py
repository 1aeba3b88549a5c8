"""The coordinator's subscription to a fleet's acknowledgements (``fleetgate:{NAME}:acks``).

``wait`` subscribes for its own time, or uses the subscription ``Fleet.listen()`` keeps open
(``AckListener``): a coordinator that pauses and waits often then needs no subscribe round
trip, and no record read for an acknowledgement it could have missed.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from replica.contract import Keys, now_utc
from replica.link.subscription import Subscription

log = logging.getLogger(__name__)


async def subscribe_acks(redis: Redis, keys: Keys, deadline: float) -> Subscription | None:
    """Subscribe to the acknowledgements and wait for the confirmation (two tries). None
    when it cannot: ``wait`` then polls the records alone."""
    for attempt in range(2):
        sub = Subscription(redis, keys.acks)
        try:
            await sub.open()
            while True:
                left = deadline - time.monotonic()
                reply = await sub.read(max(0.05, min(left, 5.0)))
                if isinstance(reply, BaseException):
                    raise reply
                if isinstance(reply, list) and reply and reply[0] == b"subscribe":
                    return sub
                if reply is None and left <= 0:
                    await sub.close()
                    return None
        except (RedisError, OSError) as exc:
            log.info("fleet %s: cannot subscribe to the acknowledgements (%r)%s",
                     keys.fleet, exc, ", retrying" if attempt == 0 else "")
            await sub.close()
        except BaseException:
            await sub.close()
            raise
    return None


async def next_reply(sub: Subscription, timeout: float) -> Any:
    """The next pub/sub reply as parsed (``[b"message", channel, data]`` for a message), or
    None after ``timeout`` (0: only what was already read). Error replies raise. Replies are
    handed on as they are: at a change the coordinator takes one acknowledgement per replica."""
    reply = sub.buffered() if timeout <= 0 else await sub.read(timeout)
    if isinstance(reply, BaseException):
        raise reply
    return reply


def next_buffered(sub: Subscription) -> Any:
    """``next_reply(sub, 0)`` without a coroutine: the next reply already read, or None."""
    reply = sub.buffered()
    if isinstance(reply, BaseException):
        raise reply
    return reply


class AckListener:
    """The subscription ``Fleet.listen()`` keeps open, and since when."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self.sub: Subscription | None = None
        self.since: datetime | None = None

    async def open(self) -> None:
        """Subscribe (idempotent); ``TimeoutError`` when it cannot within 10 s."""
        if self.sub is not None:
            return
        sub = await subscribe_acks(self._redis, self._keys, time.monotonic() + 10.0)
        if sub is None:
            raise TimeoutError("could not subscribe to the acknowledgements")
        self.sub = sub
        self.since = now_utc()

    def detach(self) -> Subscription | None:
        """Forget the subscription (broken, or closing) and hand it to the caller to close."""
        sub, self.sub, self.since = self.sub, None, None
        return sub

    async def close(self) -> None:
        sub = self.detach()
        if sub is not None:
            await sub.close()
