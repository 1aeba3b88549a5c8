"""How the coordinator's library calls Redis: reads, and the scripts that change a fleet.

A read that fails on a connection that died with a Redis restart is sent once more (``again``):
a client keeps such connections, and redis-py (8.1) does not always retry on them.

A change (``ChangeScript``) is sent once, on a connection taken from the client's pool and
checked before anything goes out, so that two failures are told apart:

* nothing was sent (no connection, the connection found dead before writing): the error is
  raised as it is (``ConnectionError``, ``TimeoutError``: "Redis unreachable"), after one more
  try on a fresh connection;
* the script was sent and no answer came (the reply timed out, the connection dropped while
  waiting): ``OutcomeUnknown``. The change may have been applied; read the state to know. It is
  not sent again: a pause sent twice bumps the version twice, and the caller must decide.

A change may carry a read made with it (``read=``): the read and the script go in one
``MULTI``/``EXEC`` on that connection, so the read sees Redis as it was at the change, in the
change's round trip (``wait``'s membership at the change, read only when a caller waits).
A command refused while queued (``MOVED``, ``NOPERM``) aborts the ``EXEC``: nothing ran.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from replica.errors import OutcomeUnknown
from replica.link.connect import NotServedHere, pool_for
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOST = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
"""What a call that got no answer raises."""


async def again(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Redis read, once more after a ConnectionError (a connection that died with a
    Redis restart). Only for calls whose second run is harmless."""
    try:
        return await uncancelled(call())
    except RedisConnectionError:
        return await uncancelled(call())


class _NotSent(Exception):
    """The connection failed before the change went out (internal: becomes its cause)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ChangeScript:
    """A Lua script that changes a fleet, called so that a lost answer is ``OutcomeUnknown``.

    The script is sent by its SHA; a server that does not know it gets ``SCRIPT LOAD`` first
    (no ``EVAL``: the deployment's ACL may refuse it)."""

    def __init__(self, redis: Redis, lua: str) -> None:
        self._redis = redis
        self._script = redis.register_script(lua)

    async def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[str],
        what: str,
        then: Callable[[Any], Awaitable[None]] | None = None,
        read: Sequence[Any] | None = None,
    ) -> Any:
        """The script's reply. ``what`` names the change in an error ("pause of fleet x").
        ``then(connection)`` runs after the reply, on the connection the script ran on (a
        ``WAIT`` for replicas: ``coordinator.fleet.durability``); it must not raise.

        With ``read`` (a read-only command of the script's slot), the pair ``(read's reply,
        script's reply)``: the read runs just before the script, in one ``MULTI``/``EXEC``;
        its reply is a ``ResponseError`` when Redis refused it at run time (``WRONGTYPE``)."""
        for attempt in range(2):
            try:
                return await uncancelled(
                    self._send(list(keys), list(args), what, then, read))
            except _NotSent as exc:
                if attempt:
                    raise exc.cause from None
                log.debug("%s: the connection failed before sending (%r): trying a fresh one",
                          what, exc.cause)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(
        self,
        keys: list[str],
        args: list[str],
        what: str,
        then: Callable[[Any], Awaitable[None]] | None,
        read: Sequence[Any] | None = None,
    ) -> Any:
        pool = pool_for(self._redis, keys[0]) if keys else self._redis.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await _alive(conn)
            command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
            load = ("SCRIPT", "LOAD", self._script.script)
            reply: Any
            if read is not None:
                reply = await _transaction(conn, tuple(read), command, what)
                if isinstance(reply[1], NoScriptError):  # nothing ran but the read
                    await _request(conn, load, what, load=True)
                    reply = await _transaction(conn, tuple(read), command, what)
                if isinstance(reply[1], ResponseError):
                    raise reply[1]
            else:
                try:
                    reply = await _request(conn, command, what)
                except NoScriptError:
                    await _request(conn, load, what, load=True)
                    reply = await _request(conn, command, what)
            if then is not None:
                await then(conn)
            return reply
        finally:
            await pool.release(conn)


async def _alive(conn: Any) -> None:
    """Make sure ``conn`` is connected before anything is sent on it: let the event loop take
    in what its socket holds first (the end of a connection whose server went away, which the
    pool's own check misses until the loop has read it), and connect afresh when it is closed.
    A failure here sent nothing."""
    for _ in range(2):  # one turn of the loop polls the socket, the next runs its callback
        await asyncio.sleep(0)
    try:
        if conn.is_connected and not await conn.can_read():
            return
        await conn.disconnect()
        await conn.connect()
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise _NotSent(exc) from exc


async def _request(conn: Any, command: tuple[Any, ...], what: str, *, load: bool = False) -> Any:
    """Send ``command`` on ``conn`` and read its reply (a ``SCRIPT LOAD`` changes nothing: its
    lost answer is an error like any read's)."""
    try:
        await conn.send_command(*command)
    except RedisTimeoutError as exc:
        if load:
            raise
        # a write that timed out may have put part or all of the command on the wire
        raise OutcomeUnknown(_unknown(what, exc)) from exc
    except (RedisConnectionError, OSError) as exc:
        raise _NotSent(exc) from exc
    try:
        return await conn.read_response()
    except NotServedHere as exc:  # refused unrun (MOVED, READONLY): sending it again is safe
        raise _NotSent(exc) from exc
    except _LOST as exc:
        if load:
            raise
        raise OutcomeUnknown(_unknown(what, exc)) from exc


async def _transaction(
    conn: Any, read: tuple[Any, ...], command: tuple[Any, ...], what: str
) -> tuple[Any, Any]:
    """``read`` then ``command`` in one ``MULTI``/``EXEC`` on ``conn``, sent in one write:
    their two replies (each may be a ``ResponseError`` Redis answered at run time). Lost
    answers are ``OutcomeUnknown``, as for a script alone; a command refused while queued
    (``NotServedHere``: ``MOVED``; ``NOPERM``) aborts the ``EXEC``, so nothing ran."""
    try:
        await conn.send_packed_command(conn.pack_commands([("MULTI",), read, command, ("EXEC",)]))
    except RedisTimeoutError as exc:
        raise OutcomeUnknown(_unknown(what, exc)) from exc
    except (RedisConnectionError, OSError) as exc:
        raise _NotSent(exc) from exc
    refused: ResponseError | None = None
    try:
        for _ in range(3):  # OK, QUEUED, QUEUED
            try:
                await conn.read_response()
            except NotServedHere as exc:  # dropped the connection; EXEC would abort
                raise _NotSent(exc) from exc
            except ResponseError as exc:
                refused = refused or exc
        try:
            replies = await conn.read_response()
        except ResponseError as exc:  # EXECABORT: a queued command was refused
            raise (refused or exc) from None
    except _LOST as exc:
        raise OutcomeUnknown(_unknown(what, exc)) from exc
    if not isinstance(replies, list) or len(replies) != 2:
        raise ResponseError(f"the {what}: EXEC answered {replies!r}")
    if isinstance(replies[1], ReadOnlyError):
        # a demoted primary (Sentinel): the script wrote nothing; ask the new one
        await conn.disconnect()
        raise _NotSent(NotServedHere(f"the master was demoted ({replies[1]})"))
    return replies[0], replies[1]


def _unknown(what: str, exc: BaseException) -> str:
    cause = " ".join(str(exc).split()) or type(exc).__name__
    return (f"the {what} was sent to Redis and no answer came ({cause}): it may have been "
            "applied; read the fleet's state before trying again")
