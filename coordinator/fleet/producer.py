"""Enqueueing work within the fleet's backlog limit: ``enqueue`` (what ``Fleet.enqueue`` runs).

A batch is one script, ``replica/contract/enqueue.lua``: it reads the limit
(``fleetgate:{NAME}:limits``, ``replica.contract.limits``) and the backlog (the group's lag plus
its pending entries) and adds every item, or none, in one atomic step, so two producers racing
at the limit cannot both pass it. Without a limit the script adds every item, as the pipelined
``XADD``s did before. It is sent by its SHA on one connection of the work stream's node, with
``SCRIPT LOAD`` first when the server does not know it, then ``WAIT`` there for a replica to
confirm what it wrote (``coordinator.fleet.durability.write_confirmed``); a batch the limit
refused wrote nothing and is not waited on.

When the backlog is full:

* ``when_full`` ``reject`` (the default): ``BacklogFull`` at once, carrying the backlog and the
  limit;
* ``wait``: the script is sent again, after 50 ms, then twice as long each time up to 1 s (with
  jitter: producers that wait together do not poll together), until the batch fits or the
  caller's ``timeout`` has passed; then ``BacklogFull``. Room is made by the replicas
  acknowledging their work. A batch larger than the limit never fits: refused at once.

A limits hash that cannot be read refuses every batch: ``BacklogLimitUnreadable``, a
``BacklogFull`` (fail closed: ``replica.contract.limits`` says why).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections.abc import Iterable
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from coordinator.fleet.durability import Durability, write_confirmed
from replica.contract import ITEM_FIELD, WORK_GROUP, Keys, text
from replica.contract.limits import WAIT
from replica.contract.scripts import ENQUEUE_LUA
from replica.errors import BacklogFull, BacklogLimitUnreadable
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S: Final = 60.0
"""How long ``Fleet.enqueue`` waits for room by default (``when_full`` wait)."""
FIRST_POLL_S: Final = 0.05
MAX_POLL_S: Final = 1.0
"""The backoff of a waiting producer: from 50 ms, doubling, to 1 s between polls."""
ENQUEUE_SHA: Final = hashlib.sha1(ENQUEUE_LUA.encode()).hexdigest()


async def enqueue(
    redis: Redis, fleet: str, keys: Keys, items: Iterable[Any], rule: Durability,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[str]:
    """Add ``items`` (as JSON, field ``item``) to the work stream as one batch within the
    fleet's backlog limit; returns the entry ids. Raises ``BacklogFull`` (nothing written),
    ``BatchNotConfirmed`` (written, not confirmed by a replica) or redis-py's errors."""
    payload = [json.dumps(item) for item in items]
    if not payload:
        return []
    started = time.monotonic()
    delay = FIRST_POLL_S
    while True:
        reply, confirm = await _run(redis, keys, payload, rule)
        status = text(reply[0])
        if status == "ok":
            ids = [text(x) for x in reply[1]]
            return ids if confirm is None else confirm.check_batch(fleet, ids)
        if status == "unreadable":
            raise BacklogLimitUnreadable(fleet, text(reply[1]), len(payload))
        backlog, limit, when = int(reply[1]), int(reply[2]), text(reply[3])
        exact = text(reply[4]) == "1"
        waited = time.monotonic() - started
        left = timeout - waited
        if when != WAIT or left <= 0 or len(payload) > limit:
            log.debug("fleet %s: backlog full (%d of %d): %d items refused", fleet, backlog,
                      limit, len(payload))
            raise BacklogFull(fleet, backlog, limit, len(payload),
                              round(waited, 3) if when == WAIT else 0.0, exact=exact)
        await asyncio.sleep(min(left, delay * random.uniform(0.5, 1.0)))
        delay = min(MAX_POLL_S, delay * 2)


def _written(replies: list[Any]) -> bool:
    last = replies[-1]
    return isinstance(last, list) and text(last[0]) == "ok"


async def _run(
    redis: Redis, keys: Keys, payload: list[str], rule: Durability
) -> tuple[Any, Any]:
    """One run of the script (loaded first when the server does not know it): its reply and
    the confirmation of what it wrote (None: nothing written, or confirming is off)."""
    call = ("EVALSHA", ENQUEUE_SHA, 2, keys.work, keys.limits, WORK_GROUP, ITEM_FIELD, *payload)
    try:
        replies, confirm = await uncancelled(
            write_confirmed(redis, keys.work, [call], rule, _written))
    except NoScriptError:  # refused unrun: load it and send it again on one connection
        replies, confirm = await uncancelled(write_confirmed(
            redis, keys.work, [("SCRIPT", "LOAD", ENQUEUE_LUA), call], rule, _written))
    return replies[-1], confirm


__all__ = ["DEFAULT_TIMEOUT_S", "ENQUEUE_SHA", "enqueue"]
