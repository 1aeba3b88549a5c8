"""How the API answers what went wrong: always JSON ``{"detail": ...}``, never a 500 for bad
input, never an echo of more than a short, safely encoded excerpt of it.

    422  a body or query that does not validate: ``detail`` is a list of at most
         ``MAX_ERRORS`` ``{"loc", "msg", "type"}`` (no ``input``, no ``ctx``: they would echo
         the body, and a NaN or a lone surrogate in them cannot even be encoded)
    422  a value that breaks the Redis contract (``ContractError``)
    503  Redis unreachable, or slow to answer a read
    504  a change was sent and no answer came (``OutcomeUnknown``): it may have been applied
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from replica.errors import ContractError, OutcomeUnknown

log = logging.getLogger(__name__)

MAX_ERRORS: Final = 10
"""Validation errors listed in a 422 (a body of 6,000 unknown keys has 6,000)."""
EXCERPT: Final = 40
"""The most characters of the input a 422 repeats (an unknown key's name, in ``loc``)."""
UNKNOWN_OUTCOME: Final = (
    "the outcome is unknown: the change was sent to Redis and no answer came in time, so it "
    "may have been applied. Check the state (GET /api/fleet) before trying again"
)


def excerpt(value: str, limit: int = EXCERPT) -> str:
    """``value`` cut to ``limit`` characters, with anything not printable (control
    characters, lone surrogates) written as a Python escape: safe to encode and to show."""
    head = value[:limit]
    safe = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in head)
    return safe + ("…" if len(value) > limit else "")


def _loc(loc: Sequence[Any]) -> list[str | int]:
    return [part if isinstance(part, int) else excerpt(str(part)) for part in loc]


def validation_detail(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """pydantic's errors without what they echo, at most ``MAX_ERRORS`` of them."""
    detail: list[dict[str, Any]] = [
        {
            "loc": _loc(error.get("loc", ())),
            "msg": excerpt(str(error.get("msg", "invalid")), 200),
            "type": excerpt(str(error.get("type", "invalid"))),
        }
        for error in errors[:MAX_ERRORS]
    ]
    if len(errors) > MAX_ERRORS:
        detail.append({
            "loc": [],
            "msg": f"and {len(errors) - MAX_ERRORS} more errors",
            "type": "too_many_errors",
        })
    return detail


def unknown_outcome(request: Request, why: object) -> JSONResponse:
    """504: the change may or may not have been applied."""
    log.warning("%s %s: outcome unknown: %s", request.method, request.url.path, why)
    return JSONResponse({"detail": UNKNOWN_OUTCOME}, status_code=504)


def install(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    @app.exception_handler(OutcomeUnknown)
    async def _unknown(request: Request, exc: OutcomeUnknown) -> JSONResponse:
        return unknown_outcome(request, exc)

    @app.exception_handler(RedisError)
    async def _redis_down(request: Request, exc: RedisError) -> JSONResponse:
        log.warning("%s %s: Redis unreachable: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": f"Redis unreachable: {exc}"}, status_code=503)

    @app.exception_handler(TimeoutError)
    async def _redis_slow(request: Request, exc: TimeoutError) -> JSONResponse:
        log.warning("%s %s: Redis did not answer in time", request.method, request.url.path)
        return JSONResponse({"detail": "Redis did not answer in time"}, status_code=503)

    @app.exception_handler(ContractError)
    async def _contract(request: Request, exc: ContractError) -> JSONResponse:
        return JSONResponse({"detail": excerpt(str(exc), 300)}, status_code=422)


__all__ = ["UNKNOWN_OUTCOME", "excerpt", "install", "unknown_outcome", "validation_detail"]
