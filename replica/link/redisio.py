"""Redis I/O plumbing for the controller and the coordinator.

redis-py 8.1 (asyncio) can return normally from a call whose task was cancelled, and does not
retry a pipeline on a connection that died with a Redis restart; a replica must also be able to
send a change (its record and its acknowledgement) without waiting for replies. This module
holds the small pieces that deal with that: ``uncancelled()``, a raw RESP writer (``pack``),
``Link`` (one connection of the controller's own), ``Backoff`` (jittered reconnects),
``bounded()`` (cleanup that cannot hang), ``drop()`` (a connection closed now, over TLS too)
and ``cancel_bounded()`` (cancel a task again until it ends, since a cancellation can be lost
inside a call).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import random
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Final, TypeVar

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError, ResponseError

from replica.link.connect import pool_for
from replica.link.tls import own_connection

log = logging.getLogger(__name__)

SKIP: Final = b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n"
"""CLIENT REPLY SKIP: the next command is sent without waiting for (or reading) its reply."""

NET_ERRORS: Final = (RedisError, OSError, TimeoutError)
"""What a lost or refused Redis call raises."""

T = TypeVar("T")


async def uncancelled(aw: Awaitable[T]) -> T:
    """Await a redis-py call, and raise ``CancelledError`` if the task was cancelled meanwhile.

    redis-py 8.1 (asyncio) can swallow a cancellation that lands while a command or pipeline
    runs: the call returns normally, or fails with an error of its own (a ``ConnectionError``,
    a ``TimeoutError``), and the task goes on with its cancel request pending, which turns
    ``stop()`` into a hang. Either way the cancellation is raised here, the error as its
    cause. Every Redis await in fleetgate goes through this (an await that never suspends,
    such as ``disconnect(nowait=True)``, cannot lose one, but goes through it all the same)."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        result = await aw
    except Exception as exc:
        if task is not None and task.cancelling() > before:
            raise asyncio.CancelledError from exc
        raise
    if task is not None and task.cancelling() > before:
        raise asyncio.CancelledError
    return result


@functools.lru_cache(maxsize=16)
def _sha1(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()


def pack_arg(arg: str) -> bytes:
    b = arg.encode()
    return b"$%d\r\n%b\r\n" % (len(b), b)


def pack(command: tuple[Any, ...]) -> bytes:
    """One command in RESP (redis-py's packer costs more than everything else at a change)."""
    out = [b"*%d\r\n" % len(command)]
    for arg in command:
        if isinstance(arg, str):
            b = arg.encode()
        elif isinstance(arg, bytes):
            b = arg
        else:
            b = str(arg).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


def as_mapping(raw: Any) -> Mapping[Any, Any]:
    """An HGETALL reply as a mapping (RESP2 gives a flat list, RESP3 a map)."""
    if isinstance(raw, Mapping):
        return raw
    items = list(raw or [])
    return dict(zip(items[::2], items[1::2], strict=False))


class Link:
    """The controller's own connection for the poll, the record and the acknowledgements.

    A raw connection of the client's pool class and settings, held for the controller's life:
    ``call(commands, quiet)`` sends ``quiet`` commands with ``CLIENT REPLY SKIP`` before each
    (no reply comes back; when the server refuses CLIENT REPLY, their replies are read later
    and only errors kept) and ``commands`` normally, in one write, and returns the replies of
    ``commands`` (an error reply as its exception), as bytes whether the client decodes
    responses or not. Any failure mid-way drops the connection,
    so replies can never get out of step.
    """

    def __init__(self, redis: Redis, key: str | None = None) -> None:
        # the pool that reaches ``key`` (its slot's primary on a cluster)
        self._pool = redis.connection_pool if key is None else pool_for(redis, key)
        self._conn: Any = None
        self._spare: Any = None
        self.generation = 0
        """Counts (re)connections: what was written without replies before one may be lost."""
        self._skip: bool = False
        self._unread = 0
        self._errors: list[BaseException] = []

    def take_errors(self) -> list[BaseException]:
        errors, self._errors = self._errors, []
        return errors

    async def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and conn.is_connected:
            return conn
        self._conn = None
        if self._spare is None:  # one connection object for good (see Subscription.open)
            self._spare = own_connection(self._pool)
        conn = self._spare
        try:
            await uncancelled(conn.connect())
            # Probe CLIENT REPLY: allowed, the first PING's reply is skipped; refused (an ACL),
            # an error comes first and both PINGs answer.
            await uncancelled(conn.send_packed_command(conn.pack_commands(
                [("CLIENT", "REPLY", "SKIP"), ("PING", "a"), ("PING", "b")]
            ), check_health=False))
            first = await self._read(conn)
            if isinstance(first, BaseException):
                self._skip = False
                await self._read(conn)
                await self._read(conn)
            else:
                self._skip = True
        except BaseException:
            await drop(conn)
            raise
        self._conn = conn
        self._unread = 0
        self.generation += 1
        return conn

    @staticmethod
    async def _read(conn: Any) -> Any:
        # Replies as bytes, whatever the client decodes: a value that is not UTF-8 (a state
        # hash written by hand) is the reader's to judge, never an error of the connection.
        try:
            return await uncancelled(conn.read_response(disable_decoding=True))
        except ResponseError as exc:
            return exc

    async def call(
        self, commands: list[tuple[Any, ...]], quiet: Sequence[tuple[Any, ...]] = ()
    ) -> list[Any]:
        conn = await self._connection()
        wire: list[bytes] = []
        unread = self._unread
        for command in quiet:
            if self._skip:
                wire.append(SKIP)
            else:
                unread += 1
            wire.append(pack(command))
        wire += [pack(c) for c in commands]
        try:
            # Written in this very step, not after a turn of the event loop (redis-py writes
            # through a task when the connection has a socket timeout, its default): what the
            # caller computed (a record) must reach Redis before anything write_raw sends
            # later (a change's record and ack), or the record would go back a version.
            writer = getattr(conn, "_writer", None)
            if writer is None or writer.is_closing():
                raise ConnectionError("the connection is closed")
            writer.write(b"".join(wire))
            await uncancelled(writer.drain())
            self._unread = unread
            if not commands:
                return []
            for _ in range(self._unread):
                reply = await self._read(conn)
                if isinstance(reply, BaseException):
                    self._errors.append(reply)
            self._unread = 0
            return [await self._read(conn) for _ in commands]
        except BaseException:
            self._conn = None
            self._unread = 0
            await drop(conn)
            raise

    async def evalsha(
        self, script: str, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run a Lua script by its SHA1 as redis-py's ``Script`` does (EVALSHA; on NOSCRIPT,
        SCRIPT LOAD and EVALSHA again), on this connection, every await cancellable. An error
        reply is raised."""
        numkeys = len(keys)
        (reply,) = await self.call([("EVALSHA", _sha1(script), numkeys, *keys, *args)])
        if isinstance(reply, NoScriptError):
            (sha,) = await self.call([("SCRIPT", "LOAD", script)])
            if isinstance(sha, BaseException):
                raise sha
            sha = sha.decode() if isinstance(sha, bytes) else str(sha)
            (reply,) = await self.call([("EVALSHA", sha, numkeys, *keys, *args)])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @property
    def skips(self) -> bool:
        """Connected, and the server takes CLIENT REPLY SKIP from this client (probed at each
        connect): ``write_raw`` can be used."""
        return self._skip and self._conn is not None

    def write_raw(self, wire: bytes) -> bool:
        """Write commands already in RESP, each behind CLIENT REPLY SKIP (no replies), at
        once. False when that cannot be done now: the caller goes through ``call``."""
        conn = self._conn
        writer = getattr(conn, "_writer", None) if conn is not None else None
        if not self._skip or writer is None or writer.is_closing():
            return False
        writer.write(wire)
        return True

    def write_quiet(self, quiet: Sequence[tuple[Any, ...]]) -> bool:
        """Write ``quiet`` commands at once, without waiting (no replies: CLIENT REPLY SKIP).
        False when that cannot be done now (not connected, or the server refuses CLIENT
        REPLY): the caller then goes through ``call``."""
        conn = self._conn
        writer = getattr(conn, "_writer", None) if conn is not None else None
        if not self._skip or writer is None or writer.is_closing():
            return False
        writer.write(b"".join(SKIP + pack(c) for c in quiet))
        return True

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await drop(conn)


class Backoff:
    """Exponential backoff with jitter (half to full of the current step)."""

    def __init__(self, base: float = 0.05, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0

    def next(self) -> float:
        step = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return float(step * random.uniform(0.5, 1.0))

    def reset(self) -> None:
        self.attempt = 0


async def bounded(aw: Any, timeout: float) -> None:
    """Await a cleanup step for at most ``timeout`` seconds, swallowing its errors."""
    try:
        async with asyncio.timeout(timeout):
            await uncancelled(aw)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.debug("cleanup step failed: %r", exc)


async def drop(conn: Any, timeout: float = 1.0) -> None:
    """Drop a redis-py connection now, whatever its class: its transport is aborted (so over
    TLS too its socket closes within a turn of the loop, see ``replica.link.tls``), then
    redis-py forgets it (``disconnect(nowait=True)``, bounded)."""
    writer = getattr(conn, "_writer", None)
    if writer is not None:
        writer.transport.abort()
    await bounded(conn.disconnect(nowait=True), timeout)


async def cancel_bounded(task: asyncio.Task[Any], timeout: float = 5.0) -> None:
    """Cancel ``task`` and wait for it, cancelling again if a cancellation was lost."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not task.done() and loop.time() < deadline:
        task.cancel()
        await asyncio.wait([task], timeout=0.2)
    if not task.done():
        log.warning("task %s did not stop within %ss", task.get_name(), timeout)
