"""Reading the audit and events streams as raw bytes: ``read_group``, ``autoclaim``,
``stream_entries`` and ``decode_fields``.

The commands that return entries are sent undecoded (redis-py's ``NEVER_DECODE``), whatever the
client's ``decode_responses``: no entry's bytes can make a read fail (a reply that fails to
decode would fail the whole batch, and the same batch again at every claim). Each entry is then
decoded on its own (``decode_fields``): one that is not UTF-8 is garbage, skipped, counted and
acknowledged by the notifier, never a stop.

Also here: ``Reach``, the once-only log lines of a notifier that cannot reach Redis (or hit an
error it did not expect) and the backoff between two tries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE

from replica.contract import text
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

RAW: Final = {NEVER_DECODE: True}
"""Command option: read this reply undecoded, even on a client with decode_responses=True."""
RETRY_MAX_S: Final = 5.0
"""The longest pause between two tries of a Redis call that failed."""


async def read_group(
    redis: Redis, group: str, consumer: str, streams: Sequence[str], count: int,
    block: float | None = None,
) -> Any:
    """``XREADGROUP`` of new entries (``>``) on ``streams`` (one slot), undecoded."""
    blocking = [] if block is None else ["BLOCK", max(1, int(block * 1000))]
    return await uncancelled(redis.execute_command(  # type: ignore[no-untyped-call]
        "XREADGROUP", "GROUP", group, consumer, "COUNT", count, *blocking,
        "STREAMS", *streams, *([">"] * len(streams)), **RAW,
    ))


async def autoclaim(
    redis: Redis, stream: str, group: str, consumer: str, idle: float, start: str, count: int,
) -> tuple[str, list[tuple[str, Any]]]:
    """``XAUTOCLAIM``, undecoded: (the next cursor, [(entry id, raw fields)])."""
    reply = await uncancelled(redis.execute_command(  # type: ignore[no-untyped-call]
        "XAUTOCLAIM", stream, group, consumer, int(idle * 1000), start, "COUNT", count, **RAW,
    ))
    entries = [(text(eid), fields) for eid, fields in (reply[1] or []) if eid is not None]
    return text(reply[0]), entries


def stream_entries(reply: Any) -> Iterator[tuple[str, str, Any]]:
    """(stream, entry id, raw fields) of an XREADGROUP reply, RESP2 or RESP3 (redis-py shapes)."""
    pairs = reply.items() if isinstance(reply, dict) else (reply or [])
    for stream, entries in pairs:
        if entries and isinstance(entries[0], list) and (
            not entries[0] or isinstance(entries[0][0], list | tuple)
        ):  # RESP3: one list in a list
            entries = [e for part in entries for e in part]
        for entry_id, fields in entries or []:
            if entry_id is not None:
                yield text(stream), text(entry_id), fields


def decode_fields(raw: Any) -> dict[str, str] | None:
    """An entry's fields as text; None when one is not UTF-8 (or the shape is not a stream
    entry's): garbage. An entry deleted while pending has no fields: ``{}``."""
    if raw is None:
        return {}
    pairs: Any = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=False)
    out: dict[str, str] = {}
    try:
        for key, value in pairs:
            out[_strict(key)] = _strict(value)
    except (UnicodeDecodeError, TypeError):
        return None
    return out


def _strict(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str | int | float):
        return str(value)
    raise TypeError(type(value).__name__)


class Reach:
    """Whether a notifier reaches Redis: one WARNING when it stops, one INFO when it is back;
    an unexpected error is logged once per kind with its traceback."""

    def __init__(self, fleet: str) -> None:
        self.fleet = fleet
        self.down = False
        self._unexpected: set[str] = set()

    async def failed(self, exc: BaseException, failures: int) -> None:
        """Log (once) and wait before the next try."""
        if not self.down:
            self.down = True
            log.warning("fleet %s: the notifier cannot reach Redis: %s", self.fleet, exc)
        await asyncio.sleep(backoff(failures))

    def unexpected(self, what: str, exc: BaseException) -> None:
        """An error the notifier did not expect (a bug, bytes it cannot read): logged with its
        traceback once per kind, for the caller to count and go on."""
        kind = f"{what}:{type(exc).__name__}"
        if kind not in self._unexpected:
            self._unexpected.add(kind)
            log.error("fleet %s: the notifier %s failed unexpectedly (it goes on; logged once): "
                      "%s", self.fleet, what, exc, exc_info=exc)

    def back(self) -> None:
        if self.down:
            self.down = False
            log.info("fleet %s: the notifier reaches Redis again", self.fleet)


def backoff(failures: int) -> float:
    """Seconds to wait after ``failures`` failures in a row (0.2 s doubling, at most 5 s)."""
    return float(min(RETRY_MAX_S, 0.1 * 2 ** min(failures, 10)))


__all__ = ["RAW", "Reach", "autoclaim", "backoff", "decode_fields", "read_group",
           "stream_entries"]
