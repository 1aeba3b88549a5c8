"""The coordinator's HTTP API against a real Redis and real replicas (pools with controllers).

Requests go through httpx's ASGI transport inside the test's event loop, with the app's
lifespan running (its own Redis client), so replicas, API and Redis are all real.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode

from coordinator.demo.localredis import LocalRedis
from coordinator.settings import CoordinatorSettings
from coordinator.web.api import create_app
from replica.contract import Keys, format_time, now_utc
from replica.errors import ConfigError
from tests.apikit import ADMIN, BOB, VIEW, auth, client_for, json_headers, make_settings
from tests.fleetkit import replicas

# ---------------------------------------------------------------------------- auth matrix

READS = [("GET", "/api/fleet"), ("GET", "/api/fleet/history")]
WRITES = [("POST", "/api/fleet/pause"), ("POST", "/api/fleet/resume")]
BODIES: dict[str, Any] = {"/api/fleet/pause": {"reason": "auth matrix"}, "/api/fleet/resume": {}}


@pytest.mark.parametrize(("method", "path"), READS + WRITES)
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        (auth("wrong-token-000000000000"), 401),
        ({"Authorization": "Basic YWxpY2U6eA=="}, 401),
        ({"Authorization": f"Bearer {ADMIN[:-1]}"}, 401),
    ],
)
async def test_requests_without_a_valid_token_get_401_with_a_json_detail(
    api: httpx.AsyncClient, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    response = await api.request(method, path, headers=headers, json=BODIES.get(path))
    assert response.status_code == status
    assert response.headers["www-authenticate"] == "Bearer"
    assert isinstance(response.json()["detail"], str)


@pytest.mark.parametrize(("method", "path"), READS)
async def test_the_view_token_reads(api: httpx.AsyncClient, method: str, path: str) -> None:
    assert (await api.request(method, path, headers=auth(VIEW))).status_code == 200


@pytest.mark.parametrize(("method", "path"), WRITES)
async def test_the_view_token_on_a_write_gets_403_and_changes_nothing(
    api: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await api.request(method, path, headers=auth(VIEW), json=BODIES.get(path))
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"]
    state = (await api.get("/api/fleet", headers=auth(VIEW))).json()["state"]
    assert state["version"] == 0


@pytest.mark.parametrize(("method", "path"), READS + WRITES)
async def test_the_admin_token_reads_and_writes(api: httpx.AsyncClient, method: str, path: str) -> None:
    response = await api.request(method, path, headers=auth(ADMIN), json=BODIES.get(path))
    assert response.status_code == 200, response.text


async def test_health_dashboard_and_docs_need_no_token(api: httpx.AsyncClient) -> None:
    health = await api.get("/healthz")
    assert health.status_code == 200 and health.json()["redis"] == "up"
    page = await api.get("/")
    assert page.status_code == 200 and "<title>fleetgate</title>" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert (await api.get("/static/app.js")).status_code == 200
    assert (await api.get("/docs")).status_code == 404  # off unless FLEETGATE_API_DOCS
    paths = (await api.get("/openapi.json")).json()["paths"]
    assert {"/api/fleet", "/api/fleet/pause", "/api/fleet/resume", "/api/fleet/history"} <= set(paths)


# ---------------------------------------------------------------------------- identity


async def test_the_audit_trail_records_the_tokens_configured_name(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/fleet/pause", headers=auth(ADMIN), json={"reason": "deploy 4.2"})
    assert response.status_code == 200
    assert response.json()["state"]["by"] == "alice"
    history = (await api.get("/api/fleet/history", headers=auth(VIEW))).json()["events"]
    assert [(e["action"], e["by"], e["reason"]) for e in history] == [("pause", "alice", "deploy 4.2")]


async def test_a_resume_may_say_why_and_a_bad_reason_gets_422(api: httpx.AsyncClient) -> None:
    await api.post("/api/fleet/pause", headers=auth(ADMIN), json={"reason": "deploy 4.2"})
    bad = await api.post("/api/fleet/resume", headers=auth(ADMIN), json={"reason": "  "})
    assert bad.status_code == 422 and "detail" in bad.json()
    ok = await api.post("/api/fleet/resume", headers=auth(ADMIN), json={"reason": "deployed"})
    assert ok.status_code == 200 and ok.json()["state"]["paused"] is False
    history = (await api.get("/api/fleet/history", headers=auth(VIEW))).json()["events"]
    assert [(e["action"], e["reason"]) for e in history] == [
        ("resume", "deployed"), ("pause", "deploy 4.2")]


async def test_a_body_cannot_claim_another_identity(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/fleet/pause", headers=auth(ADMIN), json={"reason": "x", "by": "mallory"}
    )
    assert response.status_code == 422
    assert (await api.get("/api/fleet", headers=auth(ADMIN))).json()["state"]["version"] == 0


async def test_a_tokens_file_names_each_operator_in_the_audit(
    redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"bob:{BOB}\n")
    app = create_app(make_settings(redis_url, fleet_name, tokens_file=str(tokens)), run_watcher=False)
    async with client_for(app) as api:
        await api.post("/api/fleet/pause", headers=auth(BOB), json={"reason": "bob's turn"})
        await api.post("/api/fleet/resume", headers=json_headers(ADMIN))
        events = (await api.get("/api/fleet/history", headers=auth(BOB))).json()["events"]
    assert [(e["action"], e["by"]) for e in events] == [("resume", "alice"), ("pause", "bob")]


def test_the_app_refuses_to_start_without_an_admin_token(redis_url: str, fleet_name: str) -> None:
    settings = CoordinatorSettings.model_validate(
        {"redis_url": redis_url, "fleet": fleet_name, "view_token": VIEW}
    )
    with pytest.raises(ConfigError, match="--insecure-no-auth"):
        create_app(settings)


async def test_insecure_no_auth_records_anonymous_and_warns_loudly(
    redis_url: str, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = CoordinatorSettings.model_validate({"redis_url": redis_url, "fleet": fleet_name})
    with caplog.at_level(logging.WARNING, logger="coordinator.web.api"):
        app = create_app(settings, insecure_no_auth=True, run_watcher=False)
    assert "AUTHENTICATION IS OFF" in caplog.text
    async with client_for(app) as api:
        response = await api.post("/api/fleet/pause", json={"reason": "no auth here"})
    assert response.status_code == 200
    assert response.json()["state"]["by"] == "anonymous"


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 501},
        {"reason": "line\nbreak"},
        {"reason": "bell\x07"},
        {"reason": 42},
        {"reason": "x", "for_seconds": 0},
        {"reason": "x", "for_seconds": 0.5},
        {"reason": "x", "for_seconds": 604801},
        {"reason": "x", "for_seconds": "30m"},
        {"reason": "x", "timeout": 0},
        {"reason": "x", "timeout": 10**9},
        {"reason": "x", "auto_resume": True},
        {"reason": "x", "wait": "maybe"},
        {"reason": "x", "extra": 1},
        [],
        "reason",
    ],
)
async def test_bad_pause_bodies_get_422_with_a_json_detail(api: httpx.AsyncClient, body: Any) -> None:
    response = await api.post("/api/fleet/pause", headers=auth(ADMIN), json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]
    assert (await api.get("/api/fleet", headers=auth(ADMIN))).json()["state"]["version"] == 0


async def test_a_body_that_is_not_json_gets_422(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/fleet/pause", headers={**auth(ADMIN), "Content-Type": "application/json"}, content=b"{nope"
    )
    assert response.status_code == 422
    assert response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [{"stagger_seconds": 0}, {"stagger_seconds": 3601}, {"timeout": -1}, {"reason": " "},
     {"reason": "x" * 501}, {"by": "mallory"}],
)
async def test_bad_resume_bodies_get_422(api: httpx.AsyncClient, body: Any) -> None:
    response = await api.post("/api/fleet/resume", headers=auth(ADMIN), json=body)
    assert response.status_code == 422


@pytest.mark.parametrize("limit", ["0", "1001", "x", "-5"])
async def test_a_bad_history_limit_gets_422(api: httpx.AsyncClient, limit: str) -> None:
    response = await api.get("/api/fleet/history", params={"limit": limit}, headers=auth(VIEW))
    assert response.status_code == 422


async def test_a_reason_of_500_printable_characters_is_accepted_and_trimmed(api: httpx.AsyncClient) -> None:
    reason = "é" * 500
    response = await api.post("/api/fleet/pause", headers=auth(ADMIN), json={"reason": f"  {reason} "})
    assert response.status_code == 200
    assert response.json()["state"]["reason"] == reason


async def test_a_window_sets_expected_until_and_auto_resume_sets_the_same_time(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/fleet/pause", headers=auth(ADMIN),
        json={"reason": "deploy", "for_seconds": 900, "auto_resume": True},
    )
    state = response.json()["state"]
    assert state["expected_until"] is not None
    assert state["auto_resume_at"] == state["expected_until"]


# ---------------------------------------------------------------------------- with replicas


async def test_pause_with_wait_answers_once_every_replica_is_quiet(
    redis_url: str, fleet_name: str, api: httpx.AsyncClient
) -> None:
    async with replicas(redis_url, fleet_name, 3) as kit:
        response = await api.post(
            "/api/fleet/pause", headers=auth(ADMIN), json={"reason": "drill", "wait": True, "timeout": 30}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["wait"]["ok"] is True
        assert sorted(r["id"] for r in body["wait"]["replicas"]) == kit.ids
        assert all(r.pool.quiet for r in kit.replicas)

        status = (await api.get("/api/fleet", headers=auth(VIEW))).json()
        assert set(status) == {"fleet", "state", "replicas", "summary"}
        assert status["summary"]["quiet"] == 3 and status["summary"]["unacknowledged"] == 0

        response = await api.post("/api/fleet/resume", headers=auth(ADMIN), json={"wait": True})
        assert response.status_code == 200 and response.json()["wait"]["ok"] is True
        assert not any(r.pool.paused for r in kit.replicas)


async def test_pause_with_wait_answers_202_naming_the_replica_still_in_flight(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name, max_wait=1), run_watcher=False)
    async with client_for(app) as api, replicas(redis_url, fleet_name, 2) as kit:
        kit.put(0, {"hold": True})
        await asyncio.wait_for(kit.held.wait(), 10)
        # timeout 60 s asked, capped at FLEETGATE_MAX_WAIT = 1 s
        response = await api.post(
            "/api/fleet/pause", headers=auth(ADMIN), json={"reason": "stuck", "wait": True, "timeout": 60}
        )
        assert response.status_code == 202, response.text
        report = response.json()["wait"]
        assert report["ok"] is False
        assert report["stragglers"] == ["r1"]
        (straggler,) = [r for r in report["replicas"] if r["id"] == "r1"]
        assert (straggler["id"], straggler["why"], straggler["in_flight"]) == (
            "r1", "still in flight", 1)
        assert straggler["last_heard"] is not None and report["excused"] == []
        by_id = {r["id"]: r for r in report["replicas"]}
        assert by_id["r1"]["reached"] is False and by_id["r1"]["why"] == "still in flight"
        assert by_id["r2"]["reached"] is True
        kit.release()


async def test_pause_with_wait_answers_202_naming_a_replica_gone_silent_unreachable(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    # a replica frozen just before the pause: its heartbeat (every 0.5 s) goes stale during
    # the wait, with two items in flight when it was last heard
    keys = Keys(fleet_name)
    beat = now_utc()
    await redis.hset(keys.replica("frozen-1"), mapping={
        "applied_version": "0", "fleet_held": "0", "quiet": "0", "in_flight": "2",
        "control": "connected", "heartbeat_at": format_time(beat), "heartbeat_interval": "0.5"})
    await redis.zadd(keys.replicas, {"frozen-1": int(beat.timestamp() * 1000)})
    app = create_app(make_settings(redis_url, fleet_name, max_wait=2), run_watcher=False)
    async with client_for(app) as api:
        response = await api.post(
            "/api/fleet/pause", headers=auth(ADMIN), json={"reason": "db", "wait": True}
        )
    assert response.status_code == 202, response.text
    report = response.json()["wait"]
    assert report["ok"] is False and report["excused"] == []
    assert report["stragglers"] == ["frozen-1"]
    (frozen,) = report["replicas"]
    assert frozen["reached"] is False and frozen["last_heard"] == format_time(beat)
    assert (frozen["why"], frozen["in_flight"]) == ("unreachable", 2)


async def test_get_fleet_counts_the_entries_of_the_replicas_set_it_cannot_read(
    redis: aioredis.Redis, fleet_name: str, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/api/fleet", headers=auth(VIEW))).json()["summary"]["unreadable"] == 0
    await redis.zadd(Keys(fleet_name).replicas, {"bad id": int(now_utc().timestamp() * 1000)})
    response = await api.get("/api/fleet", headers=auth(VIEW))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["summary"]["unreadable"] == 1 and body["replicas"] == []


async def test_redis_down_gets_503_with_a_json_detail_not_500(private_redis: LocalRedis) -> None:
    app = create_app(make_settings(private_redis.url, "down"), run_watcher=False)
    async with client_for(app) as api:
        private_redis.kill()
        for method, path in READS + WRITES:
            response = await api.request(
                method, path, headers=auth(ADMIN), json=BODIES.get(path)
            )
            assert response.status_code == 503, (path, response.text)
            assert "Redis unreachable" in response.json()["detail"]
        health = await api.get("/healthz")
        assert health.status_code == 200 and health.json()["redis"] == "down"
        assert (await api.get("/metrics")).status_code == 503


# ---------------------------------------------------------------------------- schemathesis


@pytest.mark.slow
# every route of the API, 25-40 generated requests each: the route count grows with the API,
# and on a loaded 2-core machine the whole took over the suite's 120 s hang guard
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_makes_the_api_answer_a_server_error(
    redis_url: str, fleet_name: str, mode: GenerationMode
) -> None:
    app = create_app(make_settings(redis_url, fleet_name, max_wait=1), run_watcher=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    checked: list[str] = []
    try:
        for result in schema.get_all_operations():
            operation = result.ok()

            @given(case=operation.as_strategy(generation_mode=mode))
            @hsettings(
                max_examples=25, deadline=None, database=None,
                suppress_health_check=list(HealthCheck),
            )
            def no_server_error(case: schemathesis.Case) -> None:
                response = case.call(headers=auth(ADMIN))
                case.validate_response(response, checks=[not_a_server_error])
                assert response.status_code < 500, (case.method, case.path, response.text)
                if response.status_code >= 400:
                    assert json.loads(response.text)["detail"]

            try:
                no_server_error()
            except Unsatisfiable:
                # nothing to make invalid (an operation without parameters or body)
                assert mode is GenerationMode.NEGATIVE, operation.label
                checked.append(f"{operation.label}: nothing to negate")
            else:
                checked.append(operation.label)
        assert len(checked) >= 5, checked
    finally:
        schemathesis.python.asgi.shutdown_lifespans()
