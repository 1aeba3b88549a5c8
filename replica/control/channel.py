"""ControlChannel: a fleet's control channel, followed on a subscription of its own.

``run()`` subscribes (``replica.link.subscription``, push mode) and hands each message to
``on_message`` straight from the transport; when the subscription ends, for whatever reason,
it reports it (``on_lost``), waits a jittered backoff (longer when Redis refused the
subscription: an ACL will not change in a second) and subscribes again. Every (re)subscription
is reported (``on_subscribed``): what was published meanwhile is lost, so the caller reads the
state again. There is no timer per message: the caller's loop calls ``check()`` (at
``next_check()``), which pings a subscription idle for ``ping_interval`` and aborts one whose
ping went unanswered as long (a half-open connection), so that ``run()`` reconnects.
``wake()`` cuts a reconnect backoff short: the caller reached Redis again (after a failover,
the new primary answers), so the subscription is tried at once rather than at the end of a
backoff grown during the outage (up to ``reconnect_cap``). A refused subscription (an ACL)
keeps its backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from replica.link.redisio import NET_ERRORS, Backoff
from replica.link.subscription import Subscription

log = logging.getLogger(__name__)


class ControlChannel:
    """Follows one pub/sub channel for a ``FleetController``.

    ``on_message(data)`` gets each message's payload; ``on_subscribed(again)`` each confirmed
    subscription (``again``: after a loss); ``on_lost(exc)`` each end of one. ``label`` names
    the follower in log lines ("fleet orders replica pod-1").
    """

    def __init__(
        self,
        redis: Redis,
        channel: str,
        *,
        on_message: Callable[[Any], None],
        on_subscribed: Callable[[bool], None],
        on_lost: Callable[[BaseException], None],
        on_fault: Callable[[BaseException], None] | None = None,
        ping_interval: float = 30.0,
        reconnect_cap: float = 5.0,
        label: str = "",
    ) -> None:
        self._redis = redis
        self.channel = channel
        self._on_message = on_message
        self._on_subscribed = on_subscribed
        self._on_lost = on_lost
        self._on_fault = on_fault
        self._reported: BaseException | None = None
        self.ping_interval = ping_interval
        self._label = label or channel
        self._backoff = Backoff(cap=reconnect_cap)
        self._refused = Backoff(base=5.0, cap=max(60.0, reconnect_cap))
        self._sub: Subscription | None = None
        self._wake = asyncio.Event()
        self._activity = 0.0
        self._ping_sent: float | None = None
        self.subscribed = False
        """Subscribed right now (the confirmation came, the connection has not ended)."""
        self.generation = 0
        """Confirmed subscriptions so far: a change of it means messages may have been lost."""
        self.reconnects = 0
        self.failed_generation = 0
        """The subscription a fault ended (``generation`` then): a state read on a later one
        is what ends the fault (the caller's poll)."""

    async def run(self) -> None:
        """Follow the channel until cancelled."""
        sub = Subscription(self._redis, self.channel)
        while True:
            delay: float | None = None
            self._wake.clear()  # a wake() from here on shortens the backoff after this try
            try:
                await sub.open(self._on_reply)
                self._sub = sub
                self._activity = time.monotonic()
                self._ping_sent = None
                await sub.closed()
            except asyncio.CancelledError:
                raise
            except NET_ERRORS as exc:
                self.subscribed = False
                if isinstance(exc, ResponseError):  # refused (an ACL): no point hurrying
                    delay = self._refused.next()
                log.debug("%s: control channel lost: %r", self._label, exc)
                self._on_lost(exc)
            except Exception as exc:
                # a fault of ours in handling a message: never leave the replica deaf to the
                # fleet (its poll still applies the state); resubscribe after a backoff
                self.subscribed = False
                if exc is not self._reported:
                    self._fault(exc)
                self._reported = None
                self._on_lost(exc)
            finally:
                self.subscribed = False
                self._sub = None
                await sub.close()
            if delay is not None:  # refused (an ACL): no hurry, whatever answers meanwhile
                await asyncio.sleep(delay)
                continue
            try:
                async with asyncio.timeout(self._backoff.next()):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _on_reply(self, reply: Any) -> None:
        """A reply, straight from the transport. What it raises ends the subscription."""
        self._activity = time.monotonic()
        self._ping_sent = None
        if isinstance(reply, ResponseError):
            raise reply
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind == b"message":
            try:
                self._on_message(reply[2])
            except Exception as exc:
                self.subscribed = False  # at once: ends the subscription (raised on)
                self._fault(exc)
                self._reported = exc
                raise
        elif kind == b"subscribe":
            self._backoff.reset()
            self._refused.reset()
            self.subscribed = True
            self.generation += 1
            again = self.generation > 1
            if again:
                self.reconnects += 1
                log.info("%s: control channel resubscribed (%d reconnects): re-reading the "
                         "state", self._label, self.reconnects)
            self._on_subscribed(again)

    def _fault(self, exc: BaseException) -> None:
        self.failed_generation = self.generation
        if self._on_fault is not None:
            self._on_fault(exc)
        else:
            log.error("%s: failed handling the control channel: resubscribing", self._label,
                      exc_info=exc)

    def wake(self) -> None:
        """Redis answers again: end a reconnect backoff now (not one after a refusal)."""
        if not self.subscribed:
            self._wake.set()

    def next_check(self) -> float | None:
        """When ``check()`` has something to do (monotonic time), or None."""
        if self._sub is None:
            return None
        since = self._ping_sent if self._ping_sent is not None else self._activity
        return since + self.ping_interval

    def check(self) -> None:
        """Ping a subscription idle for ``ping_interval``; abort one whose ping went
        unanswered as long, so ``run()`` reconnects."""
        sub = self._sub
        if sub is None or not self.subscribed:
            return
        now = time.monotonic()
        if self._ping_sent is not None:
            if now - self._ping_sent >= self.ping_interval:
                log.info("%s: no answer to a ping on the control channel: reconnecting",
                         self._label)
                self._ping_sent = None
                self._activity = now
                sub.abort()
        elif now - self._activity >= self.ping_interval:
            try:
                sub.send("PING")
                self._ping_sent = now
            except (RedisError, OSError):
                sub.abort()


__all__ = ["ControlChannel"]
