"""TLS connections that close at once when redis-py drops them.

redis-py drops a connection with ``disconnect(nowait=True)`` whenever its state is unknown: an
error or a cancellation in the middle of a command, ``PubSub.aclose()``, and fleetgate's own
raw connections (``redisio``, ``subscription``, the work reader) when they stop or fail. Over
plain TCP that closes the socket within a turn of the event loop. Over TLS, asyncio first
sends close_notify and then waits for the server's (up to its 30 s shutdown timeout) before it
closes the socket; nothing awaits that. A loop that ends meanwhile (a replica that stops, an
embedding application's ``asyncio.run`` that returns) leaves the socket open: a file
descriptor held until garbage collection, and a ``ResourceWarning`` then.

A connection that *drops at once* aborts its transport instead: no close_notify (the server
sees the TCP close, as for a crashed client), the socket closed within a turn of the loop, as
over plain TCP. A graceful ``disconnect()`` (a client's ``aclose()``) still sends close_notify
and waits; one cut short (its timeout, a cancellation) is aborted too.

* ``TLSConnection``: redis-py's ``SSLConnection`` that drops at once. ``connect`` uses it for
  a ``rediss://`` client; the Sentinel and Cluster TLS connections derive from it.
* ``own_connection(pool)``: a connection of ``pool``'s settings for fleetgate's own use (the
  controller's link, the subscription, the work reader), never handed to the pool, that drops
  at once whatever client the application gave (one it made itself with
  ``Redis.from_url("rediss://...")`` too).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool, SSLConnection


class _DropsAtOnce(AbstractConnection):
    """Put before a TLS connection class: ``disconnect(nowait=True)``, or a graceful
    disconnect cut short, aborts the transport."""

    async def disconnect(
        self,
        nowait: bool = False,
        error: Exception | None = None,
        failure_count: int | None = None,
        health_check_failed: bool = False,
    ) -> None:
        writer = self._writer
        if nowait and writer is not None:
            writer.transport.abort()
        try:
            await super().disconnect(nowait, error, failure_count, health_check_failed)
        except BaseException:
            if writer is not None:
                writer.transport.abort()
            raise


class TLSConnection(_DropsAtOnce, SSLConnection):
    """An ``SSLConnection`` whose dropped connections close their socket at once."""


_DROPPING: dict[type[Any], type[Any]] = {}


def _dropping(cls: type[Any]) -> type[Any]:
    """``cls`` when its connections drop at once already (or are not TLS); else a subclass of
    it that does (made once per class)."""
    if issubclass(cls, _DropsAtOnce) or not issubclass(cls, SSLConnection):
        return cls
    made = _DROPPING.get(cls)
    if made is None:
        made = _DROPPING[cls] = type(cls.__name__, (_DropsAtOnce, cls), {
            "__module__": __name__,
            "__doc__": f"{cls.__qualname__} whose dropped connections close their socket at once.",
        })
    return made


def own_connection(pool: ConnectionPool) -> Any:
    """A new connection with ``pool``'s class and settings, for the caller to own (never in
    the pool); over TLS, one that drops at once."""
    cls = _dropping(pool.connection_class)
    if cls is pool.connection_class:
        return pool.make_connection()  # type: ignore[no-untyped-call]
    return cls(**pool.connection_kwargs)


__all__ = ["TLSConnection", "own_connection"]
