"""The backlog limit routes of the API: read, set and clear a fleet's limit.

    GET    /api/fleets/{name}/limits   view   {"fleet", "limit": {...} | null}  (404: never seen)
    PUT    /api/fleets/{name}/limits   admin  {"max_backlog": N, "when_full"?: "reject"|"wait"}
    DELETE /api/fleets/{name}/limits   admin  clear it (200 with "changed": false without one)
    GET/PUT/DELETE /api/fleet/limits          the same for the default fleet (FLEETGATE_FLEET)

The limit is what every producer obeys (``Fleet.enqueue``, ``fleetgate enqueue``, the script
``replica/contract/enqueue.lua``); a change is audited in the fleet's audit stream with the
token's operator name as ``by``. ``limit`` is ``{"max_backlog", "when_full", "by", "at",
"error"}``: ``error`` says why a limits hash cannot be obeyed (every enqueue is then refused;
the other fields are null). A write answers ``{"fleet", "limit", "previous", "changed"}``. A
body that does not validate is a 422 with the usual ``detail`` (strict types: ``"5000"``,
``5000.5`` and ``true`` are refused); a write, like every state change, must be sent as JSON
(415 otherwise; a ``DELETE`` too, with or without a body).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from coordinator.web.bodies import LimitRequest
from coordinator.web.deps import (
    Access,
    DefaultChange,
    DefaultView,
    NamedChange,
    NamedView,
    runtime_of,
)


def install(app: FastAPI) -> None:
    """Add the limit routes to ``app``."""

    async def read(access: Access) -> dict[str, Any]:
        reading = await access.fleet.limit()
        return {"fleet": access.fleet.name, "limit": reading.to_dict()}

    async def put(access: Access, body: LimitRequest, request: Request) -> dict[str, Any]:
        change = await access.fleet.set_limit(body.max_backlog, body.when_full,
                                              by=access.operator.name)
        _forget(request, access)
        return change.to_dict()

    async def delete(access: Access, request: Request) -> dict[str, Any]:
        change = await access.fleet.clear_limit(by=access.operator.name)
        _forget(request, access)
        return change.to_dict()

    @app.get("/api/fleet/limits", tags=["fleet"])
    async def get_limits(access: DefaultView) -> dict[str, Any]:
        """The default fleet's backlog limit (null: none)."""
        return await read(access)

    @app.put("/api/fleet/limits", tags=["fleet"])
    async def put_limits(body: LimitRequest, access: DefaultChange, request: Request) -> dict[str, Any]:
        """Set the default fleet's backlog limit (audited, ``limit_set``)."""
        return await put(access, body, request)

    @app.delete("/api/fleet/limits", tags=["fleet"])
    async def delete_limits(access: DefaultChange, request: Request) -> dict[str, Any]:
        """Clear the default fleet's backlog limit (audited, ``limit_cleared``)."""
        return await delete(access, request)

    @app.get("/api/fleets/{name}/limits", tags=["fleets"])
    async def get_named_limits(access: NamedView) -> dict[str, Any]:
        """The backlog limit of the fleet ``name`` (404 if it was never seen)."""
        return await read(access)

    @app.put("/api/fleets/{name}/limits", tags=["fleets"])
    async def put_named_limits(
        body: LimitRequest, access: NamedChange, request: Request
    ) -> dict[str, Any]:
        """Set the backlog limit of the fleet ``name`` (any valid name: a limit may come
        before the fleet's first replica)."""
        return await put(access, body, request)

    @app.delete("/api/fleets/{name}/limits", tags=["fleets"])
    async def delete_named_limits(access: NamedChange, request: Request) -> dict[str, Any]:
        """Clear the backlog limit of the fleet ``name``."""
        return await delete(access, request)


def _forget(request: Request, access: Access) -> None:
    """The next read of the fleet (status, /metrics) shows the new limit at once."""
    snapshots = runtime_of(request).snapshots
    if snapshots is not None:
        snapshots.forget(access.fleet.name)


__all__ = ["install"]
