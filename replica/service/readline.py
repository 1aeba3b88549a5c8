"""ReadLine: the work reader's own Redis connection, which a hold or a stop can close under a
blocked read.

A read blocked in Redis (``XREADGROUP ... BLOCK``) must neither keep a stop or a pause waiting
nor return entries once the pool is held. Cancelling the task that waits for it does neither
well: redis-py (asyncio) may swallow the cancellation (see
``replica.link.redisio.uncancelled``), and a pool listener, which is where a hold is heard,
is synchronous. So the reads go over a connection of their own, and ``abort()`` closes it: the
read fails at once (``ReadAborted``), and Redis drops the blocked client when it sees the
connection close. What Redis delivered to it just before is pending for the consumer all the
same; the reader hands that back (``StreamReader._settle``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from replica.link.connect import pool_for
from replica.link.redisio import drop, uncancelled
from replica.link.tls import own_connection


class ReadAborted(Exception):
    """A read ended by ``ReadLine.abort()``: a hold or a stop came first."""


class ReadLine:
    """The reader's own connection, for its ``XREADGROUP``s only: ``abort()`` closes it under
    a read in progress. A connection of the client's pool class and settings (the same user:
    the replica ACL allows it), opened at the first read and again after an abort or a
    failure."""

    def __init__(self, redis: aioredis.Redis, key: str | None = None) -> None:
        # the pool that reaches the stream ``key`` (its slot's primary on a cluster)
        self._pool = redis.connection_pool if key is None else pool_for(redis, key)
        self._conn: Any = None
        self._busy = False
        self.aborted = False
        """The last read was aborted (its reply, if any came, was still returned)."""

    async def read(self, args: Sequence[Any], timeout: float) -> Any:
        """Send one command and return its reply, undecoded; ``TimeoutError`` when it takes
        longer than ``timeout`` seconds, ``ReadAborted`` when ``abort()`` ended it."""
        self.aborted = False
        self._busy = True
        try:
            conn = self._conn
            if conn is None:  # one connection object for good (see Subscription.open)
                conn = self._conn = own_connection(self._pool)
            writer = getattr(conn, "_writer", None)
            if writer is not None and writer.is_closing():  # aborted after its last reply
                await drop(conn)
            if not conn.is_connected:
                await uncancelled(conn.connect())
            if self.aborted:  # during the connect, before there was anything to close
                raise ReadAborted
            async with asyncio.timeout(timeout):
                await uncancelled(conn.send_command(*args, check_health=False))
                # math.inf: the timeout is the one above, not the client's socket timeout.
                return await uncancelled(
                    conn.read_response(disable_decoding=True, timeout=math.inf)
                )
        except (RedisError, OSError) as exc:  # redis-py has dropped the connection
            if self.aborted:
                raise ReadAborted from exc
            raise
        finally:
            self._busy = False

    def abort(self) -> None:
        """End the read in progress, if any, now: its connection is closed (the read raises
        ``ReadAborted``, unless its reply had come already). Safe from a pool listener."""
        if not self._busy:
            return
        self.aborted = True
        writer = getattr(self._conn, "_writer", None)
        if writer is not None:
            writer.transport.abort()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await drop(conn)


__all__ = ["ReadAborted", "ReadLine"]
