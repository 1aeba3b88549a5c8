"""Slow and idle HTTP clients: a request must arrive in time, and connections are counted.

Both HTTP servers (the replica's and ``fleetgate serve``) run uvicorn's h11 protocol, whose own
limits leave a connection open for as long as its client likes: ``timeout_keep_alive`` is armed
only after a response and disarmed by any byte, so a client that sends nothing, or half a
request line or header block (a byte now and then), holds its connection for ever; and
``limit_concurrency`` answers 503 only once a whole request arrived, so idle connections are
never refused. Enough of them exhaust the process's file descriptors and starve the probes.

``guarded_h11(header_timeout, max_connections)`` is the h11 protocol with both bounds:

* from the moment a connection opens, and again after each response, the client has
  ``header_timeout`` seconds (``FLEETGATE_HTTP_HEADER_TIMEOUT``) to send a whole request: its
  request line, its headers and its body. The deadline is not moved by the bytes that trickle
  in; past it the connection is closed. Once a request is in, the time the app takes to answer
  is not bounded here (a pause with ``wait`` may take minutes).
* a connection beyond ``max_connections`` open at once (``FLEETGATE_HTTP_MAX_CONNECTIONS``) is
  answered ``503`` with a JSON detail and closed at once, before anything is read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

_WAITING: Final = (h11.IDLE, h11.SEND_BODY)
"""The client's h11 states in which a request is still to come, or still coming."""


def _refusal(max_connections: int) -> bytes:
    body = json.dumps({
        "detail": f"too many connections (FLEETGATE_HTTP_MAX_CONNECTIONS={max_connections})"
    }).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    ).encode()
    return head + body


def guarded_h11(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request does not arrive within
    ``header_timeout`` seconds and refusing connections beyond ``max_connections``. Pass it as
    ``uvicorn.Config(http=...)``."""
    if header_timeout <= 0 or max_connections < 1:
        raise ValueError("header_timeout must be > 0 and max_connections >= 1")
    refusal = _refusal(max_connections)
    refusing = False  # one warning per run of refusals, not one per connection

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            nonlocal refusing
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                if not refusing:
                    log.warning(
                        "refusing connections: %d open, the limit is %d "
                        "(FLEETGATE_HTTP_MAX_CONNECTIONS)", len(self.connections) - 1,
                        max_connections,
                    )
                refusing = True
                self.connections.discard(self)  # never counted: it is closed at once
                transport.write(refusal)
                transport.close()
                return
            refusing = False
            self._watch()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self._unwatch()
            super().connection_lost(exc)

        def _watch(self) -> None:
            """Arm the deadline while a request is still to come (never moving one already
            armed), disarm it once the request is in."""
            if self.transport.is_closing() or self.conn.their_state not in _WAITING:
                self._unwatch()
            elif self._deadline is None:
                self._deadline = self.loop.call_later(header_timeout, self._expire)

        def _unwatch(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.transport.is_closing() or self.conn.their_state not in _WAITING:
                return
            log.debug(
                "closing the connection of %s: no whole request within %.1f s "
                "(FLEETGATE_HTTP_HEADER_TIMEOUT)", self.client, header_timeout,
            )
            self.transport.close()

    return GuardedH11Protocol


__all__ = ["guarded_h11"]
