"""Subscription: one pub/sub connection of its own, read with hiredis.

Reading the channel through a reader of its own (rather than redis-py's PubSub object) keeps a
push's cost low enough for a fleet-wide change to reach a thousand replicas in milliseconds.
Two ways to read:

* pull: ``await read(timeout)`` returns the next reply (the coordinator reads a burst of
  acknowledgements this way, many per socket read);
* push: ``open(on_reply)`` hands every reply to ``on_reply`` straight from the transport's
  data callback (into one reused buffer), with no task switch per message (the controller,
  where every replica of a fleet gets the same message at once), and ``await closed()``
  returns when it ends.

``send()`` writes a command on the same connection (a PING while idle).

On a Redis Cluster (``replica.link.connect.sharded``) the subscription is sharded:
``SSUBSCRIBE`` on the primary of the channel's slot (``pool_for``), whose replies read as the
classic ones (``smessage`` as ``message``, ``ssubscribe`` as ``subscribe``), so callers need not
care. A ``MOVED``/``CLUSTERDOWN`` answer or a ``sunsubscribe`` (the slot left the node) ends it
as a lost connection: the next ``open()`` finds the slot's primary of the moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

import hiredis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from replica.link.connect import pool_for, sharded
from replica.link.redisio import drop, pack, uncancelled
from replica.link.tls import own_connection

OnReply = Callable[[Any], None]
"""Called with each reply in push mode; what it raises ends the subscription with that error."""


_MOVED: Final = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")


def _unshard(reply: Any) -> Any:
    """A sharded subscription's reply as the classic one; the slot gone raises."""
    if isinstance(reply, list) and reply:
        kind = reply[0]
        if kind == b"smessage":
            reply[0] = b"message"
        elif kind == b"ssubscribe":
            reply[0] = b"subscribe"
        elif kind == b"sunsubscribe":
            raise RedisConnectionError("the channel's slot left this node")
    elif isinstance(reply, ResponseError) and str(reply).startswith(_MOVED):
        raise RedisConnectionError(f"the channel's slot is not served here now ({reply})")
    return reply


_BUFFER = memoryview(bytearray(65536))
"""Where every push-mode transport of the process reads into (``recv_into``): a read is
parsed, and copied by the parser, before the next one starts. A memoryview, not the
bytearray: asyncio's TLS transport fills a buffer in parts through slices of it, and a slice of
a bytearray is a copy (the data read into it would be lost)."""


class _Push(asyncio.BufferedProtocol):
    """The transport's protocol in push mode: parse what arrives, hand each reply on. A
    buffered protocol: asyncio's plain one allocates a 256 KiB buffer for every read."""

    def __init__(self, parser: Any, on_reply: OnReply, ended: asyncio.Future[None]) -> None:
        self._parser = parser
        self._on_reply = on_reply
        self._ended = ended
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # not called on a swap: set by Subscription.open

    def get_buffer(self, sizehint: int) -> memoryview:
        return _BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        parser = self._parser
        try:
            parser.feed(_BUFFER, 0, nbytes)
            reply = parser.gets()
            while reply is not False:
                self._on_reply(reply)
                reply = parser.gets()
        except Exception as exc:  # a refused SUBSCRIBE, a protocol error: end it
            self._end(exc)

    def eof_received(self) -> bool:
        return False  # the transport closes itself: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._ended.done():
            self._ended.set_exception(
                RedisConnectionError(f"Connection closed: {exc!r}" if exc else
                                     "Connection closed by server.")
            )

    def _end(self, exc: BaseException) -> None:
        if not self._ended.done():
            self._ended.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


class Subscription:
    """A pub/sub subscription on a connection of its own, parsed with a hiredis reader of its
    own, a whole socket read at a time.

    The connection comes from the client's pool class and settings (so AUTH, TLS, the
    database are as configured), is subscribed to one channel and never used for anything
    else. redis-py's PubSub costs a timeout, a retry wrapper and a logger lookup per message.
    Replies are bytes whatever the client decodes. A lost connection raises
    ``ConnectionError`` (from ``read()`` or ``closed()``), an error reply (a refused
    SUBSCRIBE) ``ResponseError``.
    """

    def __init__(self, redis: Redis, channel: str) -> None:
        self._pool = pool_for(redis, channel)
        self.channel = channel
        self.sharded = sharded(redis)
        """SSUBSCRIBE (a cluster), not SUBSCRIBE."""
        self._conn: Any = None
        self._spare: Any = None
        self._reader: Any = None
        self._writer: Any = None
        self._transport: Any = None
        self._ended: asyncio.Future[None] | None = None
        self._parser = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)

    async def open(self, on_reply: OnReply | None = None) -> None:
        """Connect and send SUBSCRIBE (the confirmation is the first reply). With
        ``on_reply``, in push mode. A reopen reuses the connection object (redis-py looks its
        own version up, uncached, for each new one: a millisecond per connection, which a
        reconnect wave multiplies)."""
        conn = self._spare if self._spare is not None else own_connection(self._pool)
        self._spare = conn
        self._parser = parser = hiredis.Reader(
            protocolError=InvalidResponse, replyError=ResponseError
        )
        try:
            await uncancelled(conn.connect())
            reader = getattr(conn, "_reader", None)
            writer = getattr(conn, "_writer", None)
            if reader is None or writer is None:
                raise RedisConnectionError("the connection has no stream to read")
            transport = writer.transport
            if on_reply is not None and self.sharded:
                on_reply = self._sharded_push(on_reply)
            if on_reply is not None:
                # From here the transport calls us, not redis-py's stream reader (which has
                # nothing buffered: the handshake's replies were all read).
                ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                push = _Push(parser, on_reply, ended)
                push.transport = transport
                transport.set_protocol(push)
                self._ended = ended
            transport.write(pack(("SSUBSCRIBE" if self.sharded else "SUBSCRIBE", self.channel)))
        except BaseException:
            await drop(conn)  # aborted: in push mode redis-py's stream never hears of it
            raise
        self._conn, self._reader, self._writer, self._transport = conn, reader, writer, transport

    def _sharded_push(self, on_reply: OnReply) -> OnReply:
        def unsharded(reply: Any) -> None:
            try:
                on_reply(_unshard(reply))
            except RedisConnectionError:
                self._forget_slots()
                raise

        return unsharded

    def _forget_slots(self) -> None:
        slot_map = getattr(self._pool, "slot_map", None)
        if slot_map is not None:
            slot_map.forget()

    def _pulled(self, reply: Any) -> Any:
        if not self.sharded:
            return reply
        try:
            return _unshard(reply)
        except RedisConnectionError:
            self._forget_slots()
            raise

    async def closed(self) -> None:
        """Push mode: wait until the subscription ends, and raise why (``ConnectionError``
        when the connection was lost or aborted, or what ``on_reply`` raised)."""
        ended = self._ended
        if ended is None:
            raise RedisConnectionError("the subscription is not open in push mode")
        await asyncio.shield(ended)

    def buffered(self) -> Any:
        """Pull mode: the next reply already read, or None."""
        reply = self._parser.gets()
        return None if reply is False else self._pulled(reply)

    async def read(self, timeout: float | None) -> Any:
        """Pull mode: the next reply, or None when ``timeout`` passes first."""
        reply = self._parser.gets()
        if reply is not False:
            return self._pulled(reply)
        if self._reader is None or self._ended is not None:
            raise RedisConnectionError("the subscription is closed or in push mode")
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
                return self._pulled(reply)

    def send(self, *command: Any) -> None:
        """Send a command on the subscription (PING)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RedisConnectionError("the subscription is closed")
        transport.write(pack(command))

    def abort(self) -> None:
        """Drop the connection now (a reader blocked in ``read()`` or ``closed()`` sees it
        closed)."""
        transport = self._transport
        if transport is not None:
            transport.abort()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        self._reader = self._writer = self._transport = None
        ended, self._ended = self._ended, None
        if ended is not None and not ended.done():
            ended.set_exception(RedisConnectionError("the subscription was closed"))
        if ended is not None and ended.done() and not ended.cancelled():
            ended.exception()  # retrieved: no "never retrieved" warning
        if conn is not None:
            await drop(conn)  # aborted: in push mode redis-py's stream never hears of it

