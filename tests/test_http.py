"""The replica's HTTP side: probes, the admin routes and their auth, and a schemathesis pass."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from replica.pool.pool import PausablePool
from replica.service.http import create_app
from replica.service.settings import ReplicaSettings
from replica.service.source import SourceStats

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(**kw: Any) -> ReplicaSettings:
    base: dict[str, Any] = {"fleet": "http-tests", "replica_id": "r1", "admin_token": TOKEN}
    base.update(kw)
    return ReplicaSettings(**base)


class Gate:
    """A handler whose items wait until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, item: Any) -> None:
        self.started.set()
        await self.release.wait()


class FakeControl:
    """The two controller properties the HTTP side reads (the real controller is tested with
    Redis in its own module and in the service tests)."""

    connected = True
    applied_version = 7


@pytest.fixture
async def pool() -> AsyncIterator[PausablePool]:
    async with PausablePool(Gate(), workers=2, maxsize=4, name="http-test") as p:
        yield p


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica")


async def test_liveness_stays_200_while_paused(pool: PausablePool) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        assert (await client.get("/healthz")).status_code == 200
        pool.hold("maintenance", "fleet")
        r = await client.get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True and r.json()["paused"] is True


async def test_liveness_fails_when_the_service_reports_a_dead_part(pool: PausablePool) -> None:
    app = create_app(pool, make_settings(), alive=lambda: "the work source stopped")
    async with client_for(app) as client:
        r = await client.get("/healthz")
    assert r.status_code == 503 and r.json()["reason"] == "the work source stopped"


async def test_readiness_names_every_hold_while_paused(pool: PausablePool) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        assert (await client.get("/readyz")).json() == {"ready": True, "reason": None, "holds": {}}
        pool.hold("db maintenance", "fleet")
        pool.hold("investigating", "operator")
        r = await client.get("/readyz")
        assert r.status_code == 503
        body = r.json()
        assert body["ready"] is False
        assert body["reason"] == "fleet: db maintenance; operator: investigating"
        pool.resume("fleet")
        pool.resume("operator")
        assert (await client.get("/readyz")).status_code == 200


async def test_readiness_may_pass_during_a_fleet_pause_but_not_an_operator_one(
    pool: PausablePool,
) -> None:
    app = create_app(pool, make_settings(ready_when_fleet_paused=True))
    async with client_for(app) as client:
        pool.hold("deploy window", "fleet")
        r = await client.get("/readyz")
        assert r.status_code == 200 and r.json()["holds"] == {"fleet": "deploy window"}
        pool.hold("breaker open", "breaker")
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["reason"] == "breaker: breaker open"


class StoppedSource:
    """A work source whose reader stopped on its own (the real one is tested with Redis in
    tests/test_source.py and tests/test_service.py)."""

    def stats(self) -> SourceStats:
        numbers = {f.name: 0 for f in dataclasses.fields(SourceStats) if f.type == "int"}
        return SourceStats(**numbers, group_ready=True, stopped="RuntimeError('boom')")


async def test_readiness_fails_while_the_work_source_is_stopped(pool: PausablePool) -> None:
    app = create_app(pool, make_settings(ready_when_fleet_paused=True), source=StoppedSource())
    async with client_for(app) as client:
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["reason"] == "work source stopped: RuntimeError('boom')"
        pool.hold("deploy window", "fleet")
        pool.hold("investigating", "operator")
        r = await client.get("/readyz")
        assert r.json()["reason"] == (
            "work source stopped: RuntimeError('boom'); operator: investigating"
        )


async def test_pool_state_shows_holds_counts_and_the_control_plane(pool: PausablePool) -> None:
    app = create_app(pool, make_settings(), control=FakeControl())
    async with client_for(app) as client:
        pool.hold("syncing", "control-plane")
        r = await client.get("/pool", headers=AUTH)
    body = r.json()
    assert r.status_code == 200
    assert body["paused"] is True and body["holds"] == {"control-plane": "syncing"}
    assert body["fleet_version"] == 7 and body["control"] == "connected"
    assert body["queue_capacity"] == 4 and body["workers"] == 2 and body["in_flight"] == 0


async def test_operator_pause_answers_once_quiet_and_resume_releases_only_its_hold() -> None:
    gate = Gate()
    async with PausablePool(gate, workers=1, name="p") as pool:
        await pool.put("a")
        await gate.started.wait()
        async with client_for(create_app(pool, make_settings())) as client:
            pausing = asyncio.create_task(
                client.post("/pool/pause", json={"reason": "investigating"}, headers=AUTH)
            )
            await asyncio.sleep(0.05)
            assert not pausing.done()  # one item in flight: the answer waits for it
            gate.release.set()
            r = await pausing
            assert r.status_code == 200 and r.json()["quiet"] is True
            assert r.json()["holds"] == {"operator": "investigating"}
            pool.hold("maintenance", "fleet")
            r = await client.post("/pool/resume", headers=AUTH)
            assert r.status_code == 200 and r.json()["holds"] == {"fleet": "maintenance"}


async def test_operator_pause_answers_202_when_items_outlast_the_timeout() -> None:
    gate = Gate()
    async with PausablePool(gate, workers=1, name="p") as pool:
        await pool.put("a")
        await gate.started.wait()
        async with client_for(create_app(pool, make_settings())) as client:
            r = await client.post(
                "/pool/pause", json={"reason": "stuck item", "timeout": 0.05}, headers=AUTH
            )
        assert r.status_code == 202
        assert r.json()["quiet"] is False and r.json()["in_flight"] == 1
        assert pool.holds == {"operator": "stuck item"}
        gate.release.set()


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({}, "no"),
        ({"Authorization": "Bearer wrong"}, "wrong"),
        ({"Authorization": f"Basic {TOKEN}"}, "no"),
        ({"Authorization": f"Bearer {TOKEN}x"}, "wrong"),
        ({"Authorization": "Bearer \u00e9t\u00e9".encode("latin-1")}, "wrong"),
    ],
)
async def test_admin_routes_refuse_a_missing_or_wrong_token_with_401_and_never_log_it(
    pool: PausablePool, caplog: pytest.LogCaptureFixture, headers: dict[str, Any], why: str
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.service.http")
    async with client_for(create_app(pool, make_settings())) as client:
        for method, path in (("GET", "/pool"), ("POST", "/pool/pause"), ("POST", "/pool/resume")):
            r = await client.request(method, path, headers=headers, json={"reason": "x"})
            assert r.status_code == 401, (method, path)
            assert r.json() == {"detail": "missing or wrong bearer token"}
            assert r.headers["www-authenticate"] == "Bearer"
    assert not pool.paused
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 3 and all(f"{why} bearer token" in line for line in lines)
    assert not any(TOKEN in line or "wrong" in line.split(":")[0] for line in lines)


@pytest.mark.parametrize(
    "body",
    [
        None,
        {},
        {"reason": ""},
        {"reason": "x" * 501},
        {"reason": "line\nbreak"},
        {"reason": "   "},
        {"reason": 42},
        {"reason": "ok", "timeout": -1},
        {"reason": "ok", "extra": 1},
        [1, 2],
        "just a string",
    ],
)
async def test_bad_pause_bodies_get_422_with_a_json_detail(
    pool: PausablePool, body: Any
) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        r = await client.post("/pool/pause", json=body, headers=AUTH)
        assert r.status_code == 422
        assert isinstance(r.json()["detail"], list) and r.json()["detail"]
        r = await client.post(
            "/pool/pause", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"}
        )
        assert r.status_code == 422
    assert not pool.paused


async def test_a_reason_of_exactly_500_printable_characters_is_accepted(pool: PausablePool) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        r = await client.post("/pool/pause", json={"reason": "é" * 500}, headers=AUTH)
    assert r.status_code == 200 and pool.holds == {"operator": "é" * 500}


async def test_insecure_mode_serves_admin_routes_without_a_token(pool: PausablePool) -> None:
    app = create_app(pool, make_settings(admin_token=None, insecure_no_auth=True))
    async with client_for(app) as client:
        assert (await client.get("/pool")).status_code == 200


async def test_probes_and_metrics_need_no_token(pool: PausablePool) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await client.get(path)).status_code == 200, path
        r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    assert "fleetgate_pool_paused" in r.text


async def test_an_unexpected_error_becomes_a_json_503_not_a_500(pool: PausablePool) -> None:
    def broken() -> str | None:
        raise RuntimeError("boom")

    app = create_app(pool, make_settings(), alive=broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        r = await client.get("/healthz")
    assert r.status_code == 503 and r.json() == {"detail": "temporarily unavailable"}


async def test_unknown_routes_and_methods_answer_json_4xx(pool: PausablePool) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        r = await client.get("/nope")
        assert r.status_code == 404 and "detail" in r.json()
        r = await client.delete("/pool", headers=AUTH)
        assert r.status_code == 405 and "detail" in r.json()


# ---------------------------------------------------------------------------- schemathesis
# A pool that is never started: the app only reads it and holds/releases it (no event loop is
# shared with the ASGI transport schemathesis runs the app in).

_pool = PausablePool(Gate(), workers=1, maxsize=2, name="schemathesis")
_app = create_app(_pool, make_settings(pause_timeout=0.1), control=FakeControl())
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_generated_request_gets_a_server_error(case: schemathesis.Case) -> None:
    """Every operation, with generated bodies and headers, with and without the token."""
    for headers in (AUTH, None):
        response = case.call(headers=headers)
        if case.path == "/readyz" and response.status_code == 503:
            assert response.json()["ready"] is False  # readiness' documented "paused" answer
            continue
        case.validate_response(
            response, checks=[schemathesis.checks.not_a_server_error]
        )
    _pool.resume("operator")


@pytest.mark.parametrize("reason", ["   ", "a\tb", "nul\x00", "x" * 501, "line\u2028sep"])
async def test_the_admin_pause_refuses_what_the_contract_refuses_for_a_reason(
    pool: PausablePool, reason: str
) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        r = await client.post("/pool/pause", json={"reason": reason}, headers=AUTH)
    assert r.status_code == 422
    assert not pool.paused


async def test_the_admin_pause_keeps_a_reason_stripped_as_the_contract_does(
    pool: PausablePool,
) -> None:
    async with client_for(create_app(pool, make_settings())) as client:
        r = await client.post("/pool/pause", json={"reason": "  db migration  "}, headers=AUTH)
    assert r.status_code == 200 and pool.holds == {"operator": "db migration"}
