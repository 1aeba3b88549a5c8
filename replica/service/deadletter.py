"""DeadLetters: moving a work entry to the dead-letter stream.

A dead letter is written and its work entry acknowledged in one ``MULTI``: ``XADD`` to the
dead-letter stream (FLEETGATE_DEAD_LETTER_STREAM, default ``fleetgate:{NAME}:dead``), ``XACK``
on the work stream and ``HDEL`` of the entry's run count. Either all three happen or none, so an
entry is never both dead and pending, nor lost between the two.

A dead letter's fields:

* ``item``: the entry's ``item`` field exactly as the producer wrote it (bytes, whole), absent
  if the entry had none; every other field of the entry as ``field:<name>``, also whole;
* ``error``: why (the handler's exception, or ``malformed entry: <reason>``), at most 2,000
  characters;
* ``runs``: how many runs of the handler failed (0 for a malformed entry, which never ran);
* ``deliveries``: the same number, under the name the previous release used (it counted
  deliveries, hand-offs included); kept so that readers of that release go on working;
* ``entry``, ``stream``, ``replica``, ``at``: the work entry's id and stream, who wrote the
  letter and when.
"""

from __future__ import annotations

from typing import Final

import redis.asyncio as aioredis

from replica.contract import format_time, now_utc
from replica.service.entry import RawFields, dead_letter_fields

MAX_ERROR_LEN: Final = 2000


class DeadLetters:
    """Writes dead letters for one replica of one work stream."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        stream: str,
        dead_stream: str,
        runs_key: str,
        group: str,
        consumer: str,
    ) -> None:
        self._redis = redis
        self.stream = stream
        self.dead_stream = dead_stream
        self.runs_key = runs_key
        self.group = group
        self.consumer = consumer

    async def write(
        self,
        entry_id: str,
        fields: RawFields | None,
        error: str,
        runs: int,
        *,
        forget_runs: bool = True,
    ) -> None:
        """Dead-letter ``entry_id`` and acknowledge it, in one transaction. ``forget_runs``:
        also delete its run count (False when this replica may not write the runs hash)."""
        letter = dead_letter_fields(fields)
        letter.update({
            b"error": error[:MAX_ERROR_LEN].encode("utf-8", "backslashreplace"),
            b"entry": entry_id.encode(),
            b"stream": self.stream.encode(),
            b"replica": self.consumer.encode(),
            b"runs": str(runs).encode(),
            b"deliveries": str(runs).encode(),
            b"at": format_time(now_utc()).encode(),
        })
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.dead_stream, letter)  # type: ignore[arg-type]
            pipe.xack(self.stream, self.group, entry_id)
            if forget_runs:
                pipe.hdel(self.runs_key, entry_id)
            await pipe.execute()


def error_text(exc: BaseException) -> str:
    """An exception as a dead letter's ``error``."""
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_LEN]


__all__ = ["MAX_ERROR_LEN", "DeadLetters", "error_text"]
