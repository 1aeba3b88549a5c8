"""Subscription: one pub/sub connection of the controller's own, read with hiredis.

Reading the channel through a reader of its own (rather than redis-py's PubSub object) keeps a
push's cost low enough for a fleet-wide change to reach a thousand replicas in milliseconds;
``send()`` writes a command on the same connection (a PING while idle).
"""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from replica.redisio import bounded, pack, uncancelled


class Subscription:
    """A pub/sub subscription on a connection of its own, read with a hiredis reader of its
    own, a whole socket read at a time.

    The connection comes from the client's pool class and settings (so AUTH, TLS, the
    database are as configured), is subscribed to one channel and never used for anything
    else. redis-py's PubSub costs a timeout, a retry wrapper and a logger lookup per message;
    here a burst of messages (1000 acknowledgements, say) is parsed from each socket read in
    one go. Replies are bytes whatever the client decodes. ``read()`` raises
    ``ConnectionError`` when the server closes the connection and ``ResponseError`` for an
    error reply (a refused SUBSCRIBE).
    """

    def __init__(self, redis: Redis, channel: str) -> None:
        self._pool = redis.connection_pool
        self.channel = channel
        self._conn: Any = None
        self._spare: Any = None
        self._reader: Any = None
        self._writer: Any = None
        self._parser = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)

    async def open(self) -> None:
        """Connect and send SUBSCRIBE (the confirmation comes through ``read()``). A reopen
        reuses the connection object (redis-py looks its own version up, uncached, for each
        new one: a millisecond per connection, which a reconnect wave multiplies)."""
        conn = self._spare if self._spare is not None else self._pool.make_connection()  # type: ignore[no-untyped-call]
        self._spare = conn
        self._parser = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)
        try:
            await uncancelled(conn.connect())
            reader = getattr(conn, "_reader", None)
            writer = getattr(conn, "_writer", None)
            if reader is None or writer is None:
                raise RedisConnectionError("the connection has no stream to read")
            writer.write(pack(("SUBSCRIBE", self.channel)))
        except BaseException:
            await bounded(conn.disconnect(nowait=True), 1.0)
            raise
        self._conn, self._reader, self._writer = conn, reader, writer

    def buffered(self) -> Any:
        """The next reply already read, or None."""
        reply = self._parser.gets()
        return None if reply is False else reply

    async def read(self, timeout: float | None) -> Any:
        """The next reply, or None when ``timeout`` passes first."""
        reply = self._parser.gets()
        if reply is not False:
            return reply
        if self._reader is None:
            raise RedisConnectionError("the subscription is closed")
        while True:
            if timeout is None:
                data = await self._reader.read(65536)  # no timer per read: it adds up
            else:
                try:
                    async with asyncio.timeout(timeout):
                        data = await self._reader.read(65536)
                except TimeoutError:
                    return None
            if not data:
                raise RedisConnectionError("Connection closed by server.")
            self._parser.feed(data)
            reply = self._parser.gets()
            if reply is not False:
                return reply

    def send(self, *command: Any) -> None:
        """Send a command on the subscription (PING)."""
        if self._writer is None:
            raise RedisConnectionError("the subscription is closed")
        self._writer.write(pack(command))

    def abort(self) -> None:
        """Drop the connection now (a reader blocked in ``read()`` sees it closed)."""
        writer = self._writer
        if writer is not None:
            writer.transport.abort()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        self._reader = self._writer = None
        if conn is not None:
            await bounded(conn.disconnect(nowait=True), 1.0)
