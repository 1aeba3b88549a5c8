"""ASGI middleware in front of the API: ``BodyLimit``, ``JsonWrites`` and ``HeadAsGet``.

``BodyLimit`` reads a request's body before the app sees it, up to ``max_body`` bytes
(``FLEETGATE_MAX_BODY``), and answers 413 with a JSON detail to a body larger than that: at
once for a ``Content-Length`` over the limit (nothing is read), and as soon as a chunked or
streamed body passes it (nothing more is read). So no token, route or parser ever handles a
body over the limit, and a body under it costs the app at most that much parsing.

``JsonWrites`` answers 415 with a JSON detail to a state change (``POST``, ``PUT``, ``PATCH``,
``DELETE``) whose ``Content-Type`` is not JSON (``application/json`` or ``application/*+json``),
missing included, with or without a token, before anything reads its body. A browser sends a
``text/plain``, form or body-less ``POST`` to another origin without asking it first (no CORS
preflight): under ``--insecure-no-auth`` such a request from any web page would pause or resume
a fleet. A JSON ``Content-Type`` makes the browser ask first, and the API never says yes.

``HeadAsGet`` answers ``HEAD`` as the ``GET`` of the same path would, headers included
(``Content-Length`` too), without the body: FastAPI routes declared with ``GET`` alone
otherwise answer 405.
"""

from __future__ import annotations

import json
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_JSON: Final = (b"content-type", b"application/json")
STATE_CHANGES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods ``JsonWrites`` checks."""
NOT_JSON_DETAIL: Final = (
    "a state change takes a JSON body: send it with Content-Type: application/json"
)


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [_JSON, (b"content-length", str(len(body)).encode()), (b"connection", b"close")],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _content_length(scope: Scope) -> int | None:
    """The declared length; -1 when the header is not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else -1
    return None


class BodyLimit:
    """413 for a request body over ``max_body`` bytes, before the app is called."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    def _too_large(self) -> str:
        return f"the request body is over {self.max_body} bytes (FLEETGATE_MAX_BODY)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:
            await _answer(send, 400, "the Content-Length header is not a number")
            return
        if declared is not None and declared > self.max_body:
            await _answer(send, 413, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # http.disconnect: the client is gone, nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _answer(send, 413, self._too_large())
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()  # after the body: only http.disconnect comes

        await self.app(scope, replay, send)


def _is_json(scope: Scope) -> bool:
    """Whether the request's Content-Type is JSON (parameters such as charset aside)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = bytes(value).decode("latin-1").split(";", 1)[0].strip().lower()
            kind, _, subtype = media.partition("/")
            return kind == "application" and (subtype == "json" or subtype.endswith("+json"))
    return False


class JsonWrites:
    """415 for a state change whose Content-Type is not JSON, before the app is called."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in STATE_CHANGES and not _is_json(scope):
            await _answer(send, 415, NOT_JSON_DETAIL)
            return
        await self.app(scope, receive, send)


class HeadAsGet:
    """``HEAD`` is served as ``GET`` with the body left out."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            elif kind == "http.response.pathsend":
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        # a copy: the server's own scope keeps HEAD, so it sends no body either
        await self.app({**scope, "method": "GET"}, receive, headers_only)


__all__ = ["NOT_JSON_DETAIL", "STATE_CHANGES", "BodyLimit", "HeadAsGet", "JsonWrites"]
