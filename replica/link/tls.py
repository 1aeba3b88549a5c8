"""TLS connections that close at once when redis-py drops them.

redis-py drops a connection with ``disconnect(nowait=True)`` whenever its state is unknown: an
error or a cancellation in the middle of a command, ``PubSub.aclose()``, and fleetgate's own
raw connections (``redisio``, ``subscription``, the work reader) when they stop or fail. Over
plain TCP that closes the socket within a turn of the event loop. Over TLS, asyncio first
sends close_notify and then waits for the server's (up to its 30 s shutdown timeout) before it
closes the socket; nothing awaits that. A loop that ends meanwhile (a replica that stops, an
embedding application's ``asyncio.run`` that returns) leaves the socket open: a file
descriptor held until garbage collection, and a ``ResourceWarning`` then.

``TLSConnection`` is redis-py's ``SSLConnection`` whose dropped connections are aborted
instead: no close_notify (the server sees the TCP close, as for a crashed client), the socket
closed within a turn of the loop, as over plain TCP. A graceful ``disconnect()`` (a client's
``aclose()``) still sends close_notify and waits; one cut short (its timeout, a cancellation)
is aborted too. Every TLS connection fleetgate opens is one (``connect`` sets it on the pool
of a ``rediss://`` client; the Sentinel and Cluster connections derive from it).
"""

from __future__ import annotations

from redis.asyncio.connection import SSLConnection


class TLSConnection(SSLConnection):
    """An ``SSLConnection`` whose ``disconnect(nowait=True)``, or a graceful disconnect cut
    short, aborts the transport: its socket is closed within a turn of the loop."""

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


__all__ = ["TLSConnection"]
