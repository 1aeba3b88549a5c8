"""The API's browser-facing edges: a state change must say it is JSON, and the interactive docs
(scripts from a CDN, on the dashboard's origin) are off unless asked for.

A browser sends a cross-origin POST whose Content-Type is text/plain, a form or missing without a
CORS preflight. Under --insecure-no-auth any web page could then resume a paused fleet; so every
state change whose Content-Type is not JSON gets 415 (JSON detail), with or without a token,
before its body is read. Real Redis, the app in the test's event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from coordinator.settings import CoordinatorSettings
from coordinator.web.api import STATIC_DIR, create_app
from tests.apikit import ADMIN, VIEW, auth, client_for, make_settings

NOT_JSON = [
    ("text/plain", b'{"reason": "from another origin"}'),
    ("text/plain;charset=UTF-8", b'{"reason": "from another origin"}'),
    ("application/x-www-form-urlencoded", b"reason=from+another+origin"),
    ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="reason"'
                                        b'\r\n\r\nfrom another origin\r\n--x--\r\n'),
    (None, b""),  # a body-less POST (fetch with mode: "no-cors")
    (None, b'{"reason": "from another origin"}'),
    ("application/jsonp", b'{"reason": "from another origin"}'),
]
NOT_JSON_IDS = ["text", "text-charset", "form", "multipart", "no-type-no-body", "no-type",
                "jsonp"]


@pytest.fixture
async def insecure(redis_url: str, fleet_name: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = CoordinatorSettings.model_validate({"redis_url": redis_url, "fleet": fleet_name})
    app = create_app(settings, insecure_no_auth=True, run_watcher=False)
    async with client_for(app) as client:
        yield client


async def _paused(api: httpx.AsyncClient, headers: dict[str, str]) -> bool:
    return bool((await api.get("/api/fleet", headers=headers)).json()["state"]["paused"])


def _headers(content_type: str | None, base: dict[str, str]) -> dict[str, str]:
    headers = {**base, "Origin": "https://evil.example"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


@pytest.mark.parametrize(("content_type", "body"), NOT_JSON, ids=NOT_JSON_IDS)
async def test_a_cross_origin_non_json_resume_without_auth_is_refused_and_the_fleet_stays_paused(
    insecure: httpx.AsyncClient, fleet_name: str, content_type: str | None, body: bytes
) -> None:
    json_only = {"Content-Type": "application/json"}
    paused = await insecure.post("/api/fleet/pause", headers=json_only, json={"reason": "db"})
    assert paused.status_code == 200, paused.text
    for path in ("/api/fleet/resume", f"/api/fleets/{fleet_name}/resume"):
        response = await insecure.post(path, headers=_headers(content_type, {}), content=body)
        assert response.status_code == 415, response.text
        assert "application/json" in response.json()["detail"]
        assert await _paused(insecure, {})
    resumed = await insecure.post("/api/fleet/resume", headers=json_only)
    assert resumed.status_code == 200 and not await _paused(insecure, {})


@pytest.mark.parametrize(("content_type", "body"), NOT_JSON, ids=NOT_JSON_IDS)
async def test_a_non_json_pause_with_a_valid_token_is_refused_and_changes_nothing(
    redis_url: str, fleet_name: str, content_type: str | None, body: bytes
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        for path in ("/api/fleet/pause", f"/api/fleets/{fleet_name}/pause"):
            for token in (ADMIN, VIEW):
                response = await api.post(path, headers=_headers(content_type, auth(token)),
                                          content=body)
                assert response.status_code == 415, response.text
                assert response.json()["detail"]
        state = (await api.get("/api/fleet", headers=auth(ADMIN))).json()["state"]
        assert state["version"] == 0 and not state["paused"]


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON",
])
async def test_a_json_state_change_still_works_with_a_charset_or_any_case(
    redis_url: str, fleet_name: str, content_type: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        headers = {**auth(ADMIN), "Content-Type": content_type}
        paused = await api.post("/api/fleet/pause", headers=headers, content=b'{"reason": "db"}')
        assert paused.status_code == 200, paused.text
        resumed = await api.post("/api/fleet/resume", headers=headers)  # no body: fine
        assert resumed.status_code == 200, resumed.text


async def test_a_non_json_body_is_refused_before_it_is_read(
    redis_url: str, fleet_name: str
) -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(100):
            pulled += 1
            yield b"x" * 1024

    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        headers = {**auth(ADMIN), "Content-Type": "text/plain", "Content-Length": str(100 * 1024)}
        response = await api.post("/api/fleet/pause", headers=headers, content=chunks())
    assert response.status_code == 415 and pulled == 0


def test_the_dashboard_sends_every_post_as_json() -> None:
    script = (STATIC_DIR / "common.js").read_text(encoding="utf-8")
    assert 'if (json) h["Content-Type"] = "application/json";' in script
    posts = [line for path in Path(STATIC_DIR).glob("*.js")
             for line in path.read_text(encoding="utf-8").splitlines() if 'method: "POST"' in line]
    assert posts and all("headers(true)" in line for line in posts), posts


# ---------------------------------------------------------------------------- /docs


async def test_the_interactive_docs_are_off_by_default_and_the_openapi_json_is_served(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            response = await api.get(path)
            assert response.status_code == 404, (path, response.text)
            assert "cdn" not in response.text.lower()
        schema = await api.get("/openapi.json")
        assert schema.status_code == 200 and "/api/fleet/pause" in schema.json()["paths"]


async def test_fleetgate_api_docs_turns_the_interactive_docs_on(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name, api_docs=True), run_watcher=False)
    async with client_for(app) as api:
        assert (await api.get("/docs")).status_code == 200
        assert (await api.get("/redoc")).status_code == 200


async def test_the_openapi_description_lists_the_415_of_every_state_change(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        paths = (await api.get("/openapi.json")).json()["paths"]
    writes = [op for item in paths.values() for method, op in item.items() if method == "post"]
    assert len(writes) >= 4 and all("415" in op["responses"] for op in writes)
    reads = [op for item in paths.values() for method, op in item.items() if method == "get"]
    assert reads and not any("415" in op["responses"] for op in reads)
