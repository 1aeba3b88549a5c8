"""Reading the audit and events streams for every receiver: ``Notifier``.

Every receiver has a consumer group of its own on each stream (``coordinator.notify.lane``),
and every ``fleetgate serve`` of a fleet reads each of them as a consumer of its own name. Redis
hands each entry to one server per receiver, so two servers announce an event once to each
receiver, not twice; an entry a CLI wrote while no server ran waits in the stream for the next
server (when a group is created, it starts ``max_age`` in the past).

Each receiver goes at its own pace: its own entries in hand (at most ``max_in_flight``), its own
reads, acknowledgements (XACK once it accepted the entry or gave it up) and claims (XAUTOCLAIM of
what a dead server left ``claim_idle`` unrenewed), its own ``max_age``. A receiver that is down
holds back no other: the others keep reading and delivering every new event.

Nothing here is awaited by a change: the notifier runs in tasks of its own, so a receiver that
is down or hangs never slows a pause.

With ``follow_registry`` (``fleetgate serve``), the notifier also follows every fleet of the
registry (``coordinator.notify.follow``): each receiver's group on each fleet's two streams,
created when the fleet is first seen with a state, read without blocking every
``settings.block`` seconds, a few fleets at a time. The default fleet's streams are read with a
blocking read, as above.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Iterable

from redis.asyncio import Redis

from coordinator.notify.follow import Follower
from coordinator.notify.lane import Lane, encode, group_for
from coordinator.notify.settings import NotifySettings
from coordinator.notify.streams import Reach, stream_entries
from coordinator.notify.webhook import NotifyStats, Receiver
from replica.contract import Keys

log = logging.getLogger(__name__)


def default_consumer() -> str:
    """A consumer name of this process's own: host, pid and a random tag."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Notifier:
    """Announces a fleet's audit and events entries to every receiver, until stopped.

    ``redis`` may be shared with the rest of the process (a blocking read holds one connection
    of its pool per receiver for ``settings.block`` seconds at a time)."""

    def __init__(
        self,
        redis: Redis,
        fleet: str,
        settings: NotifySettings,
        *,
        consumer: str | None = None,
        follow_registry: bool = False,
    ) -> None:
        self.redis = redis
        self.keys = Keys(fleet)
        self.fleet = self.keys.fleet
        self.settings = settings
        self.consumer = consumer or default_consumer()
        self.stats = NotifyStats()
        self.reach = Reach(self.fleet)
        self.receivers = [Receiver(url, settings, self.stats) for url in settings.urls]
        self._own = (self.keys.audit, self.keys.events)
        self._sources: dict[str, tuple[str, str]] = {
            self.keys.audit: (self.fleet, "audit"), self.keys.events: (self.fleet, "events"),
        }
        """stream -> (its fleet, audit or events): the default fleet's and each followed one's."""
        self.lanes = [Lane(redis, r, settings, self.consumer, self._sources, self.stats,
                           self.reach) for r in self.receivers]
        """One per receiver: its group, its entries in hand."""
        self.follower = Follower(self) if follow_registry else None
        """Follows the other fleets of the registry (None: the default fleet only)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._acks: list[asyncio.Task[None]] = []

    @property
    def held(self) -> int:
        """Entries in hand, every receiver's together: being delivered, retried, or waiting
        for their XACK."""
        return sum(lane.held for lane in self.lanes)

    @property
    def full(self) -> bool:
        """Every receiver has ``max_in_flight`` entries in hand: nothing to read for now."""
        return all(lane.full for lane in self.lanes)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Notifier:
        """Join the groups (creating them when absent) and start reading. Idempotent. Redis
        being down is no error: the readers keep trying."""
        if self._tasks:
            return self
        for receiver in self.receivers:
            receiver.start()
        name = f"fleetgate-notify-{self.fleet}"
        for i, lane in enumerate(self.lanes):
            self._tasks += [
                asyncio.create_task(lane.read_loop(self._own), name=f"{name}-read-{i}"),
                asyncio.create_task(lane.claim_loop(), name=f"{name}-claim-{i}"),
            ]
            self._acks.append(asyncio.create_task(lane.ack_loop(), name=f"{name}-ack-{i}"))
        if self.follower is not None:
            self._tasks.append(asyncio.create_task(self.follower.run(), name=f"{name}-follow"))
        log.info("fleet %s: notifying %d receiver(s) of its events as %s (format %s)",
                 self.fleet, len(self.receivers), self.consumer, self.settings.format)
        if self.settings.secret is None:
            log.warning("fleet %s: notifications go out unsigned: set FLEETGATE_WEBHOOK_SECRET "
                        "so that receivers can tell them from forgeries", self.fleet)
        return self

    async def stop(self) -> None:
        """Stop reading and delivering; acknowledge what was delivered (for at most a second
        or so). What is still undelivered stays pending in Redis, for another server to claim.
        Idempotent."""
        tasks, self._tasks = self._tasks, []
        acks, self._acks = self._acks, []
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        for receiver in self.receivers:
            await receiver.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in acks:
            task.cancel()
        await asyncio.gather(*acks, return_exceptions=True)
        for lane in self.lanes:
            await lane.final_ack()

    async def __aenter__(self) -> Notifier:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ reading

    def follow(self, fleets: Iterable[str]) -> tuple[int, int]:
        """Read the streams of ``fleets`` too (besides the default fleet's), and no longer those
        of a fleet followed before and not listed now; (added, dropped)."""
        wanted = {Keys(name).audit: name for name in fleets if name != self.fleet}
        wanted |= {Keys(name).events: name for name in wanted.values()}
        dropped = [s for s in self._sources if s not in self._own and s not in wanted]
        for stream in dropped:
            del self._sources[stream]
        added = 0
        for stream, name in wanted.items():
            if stream not in self._sources:
                self._sources[stream] = (name, "audit" if stream == Keys(name).audit else "events")
                added += 1
        return added // 2, len(dropped) // 2

    async def ensure_groups(self, streams: Iterable[str] | None = None) -> None:
        """Create every receiver's group on the streams (MKSTREAM; default: the default fleet's
        two), starting ``max_age`` ago; a group that exists is left as it is."""
        chosen = tuple(self._own if streams is None else streams)
        for lane in self.lanes:
            await lane.ensure_groups(chosen)


__all__ = ["Notifier", "default_consumer", "encode", "group_for", "stream_entries"]
