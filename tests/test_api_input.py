"""What the API does with bodies it must refuse: not JSON, NaN and Infinity, lone surrogates,
loose types, many keys and oversized bodies. Every refusal is a 4xx with a JSON detail that
echoes at most a short, safely encoded excerpt of the input; none is a 500."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pydantic import ValidationError
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from starlette.routing import Route

from coordinator.settings import CoordinatorSettings
from coordinator.web.api import create_app
from coordinator.web.errors import MAX_ERRORS, excerpt, validation_detail
from tests.apikit import ADMIN, VIEW, auth, client_for, json_headers, make_settings, strict_json

PAUSE = "/api/fleet/pause"
RESUME = "/api/fleet/resume"


async def version(api: httpx.AsyncClient) -> int:
    state = (await api.get("/api/fleet", headers=auth(VIEW))).json()["state"]
    return int(state["version"])


def assert_refused_without_echo(response: httpx.Response, status: int, *echo: str) -> Any:
    """``status`` with a strict JSON detail, short, that contains none of ``echo``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = strict_json(response)
    assert body["detail"]
    assert len(response.content) < 2048, len(response.content)
    for text in echo:
        assert text not in response.text
    if isinstance(body["detail"], list):
        assert all("input" not in error for error in body["detail"])
    return body


# ---------------------------------------------------------------------------- C.7


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        (PAUSE, '{"reason":"x","for_seconds":NaN}'),
        (PAUSE, '{"reason":"x","for_seconds":Infinity}'),
        (PAUSE, '{"reason":"x","for_seconds":-Infinity,"auto_resume":true}'),
        (PAUSE, '{"reason":"x","timeout":NaN,"wait":true}'),
        (PAUSE, '{"reason":"x","wait":NaN}'),
        (PAUSE, '{"reason":NaN}'),
        (RESUME, '{"stagger_seconds":NaN}'),
        (RESUME, '{"timeout":Infinity,"wait":true}'),
        (PAUSE, '{"reason":"x","extra":NaN}'),
    ],
)
async def test_nan_and_infinity_get_422_that_does_not_echo_them(
    api: httpx.AsyncClient, path: str, raw: str
) -> None:
    response = await api.post(path, headers=json_headers(), content=raw.encode())
    assert_refused_without_echo(response, 422, "NaN", "Infinity")
    assert await version(api) == 0


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        (PAUSE, r'{"reason":"a\ud800b"}'),
        (PAUSE, r'{"reason":"\udfff"}'),
        (RESUME, r'{"reason":"a\ud800b"}'),
        (PAUSE, r'{"reason":"x","a\ud800":1}'),
    ],
)
async def test_a_lone_surrogate_gets_422_that_is_valid_utf8(
    api: httpx.AsyncClient, path: str, raw: str
) -> None:
    response = await api.post(path, headers=json_headers(), content=raw.encode())
    assert_refused_without_echo(response, 422)
    assert await version(api) == 0


async def test_a_422_names_a_long_unknown_key_by_a_short_excerpt(api: httpx.AsyncClient) -> None:
    key = "k" * 10_000
    response = await api.post(PAUSE, headers=auth(ADMIN), json={"reason": "x", key: 1})
    body = assert_refused_without_echo(response, 422, "k" * 100)
    assert any("kkkk" in str(error["loc"]) for error in body["detail"])


async def test_a_body_of_many_unknown_keys_gets_one_short_error(api: httpx.AsyncClient) -> None:
    body = {f"k{i}": 0 for i in range(6000)}  # just under 64 KiB
    raw = json.dumps(body, separators=(",", ":")).encode()
    assert len(raw) < 64 * 1024
    response = await api.post(PAUSE, headers=json_headers(), content=raw)
    detail = assert_refused_without_echo(response, 422)["detail"]
    assert len(detail) == 1 and "6000 fields" in detail[0]["msg"]


async def test_at_the_largest_body_limit_70000_keys_still_get_one_short_error(
    redis_url: str, fleet_name: str
) -> None:
    # pydantic would build one error per unknown key: seconds of the event loop for 200,000
    app = create_app(make_settings(redis_url, fleet_name, max_body=1024 * 1024), run_watcher=False)
    raw = json.dumps({f"k{i}": 0 for i in range(70_000)}, separators=(",", ":")).encode()
    assert len(raw) < 1024 * 1024
    async with client_for(app) as api:
        for path in (PAUSE, RESUME):
            response = await api.post(path, headers=json_headers(), content=raw)
            detail = assert_refused_without_echo(response, 422)["detail"]
            assert len(detail) == 1 and "70000 fields" in detail[0]["msg"]


def test_fleetgate_max_body_is_4_kib_to_1_mib() -> None:
    assert CoordinatorSettings().max_body == 64 * 1024
    for wrong in (4095, 1024 * 1024 + 1):
        with pytest.raises(ValidationError):
            CoordinatorSettings(max_body=wrong)


def test_a_422_lists_at_most_ten_errors_and_says_how_many_more() -> None:
    errors = [{"loc": ("query", f"p{i}"), "msg": "bad", "type": "t", "input": "x"} for i in range(25)]
    detail = validation_detail(errors)
    assert len(detail) == MAX_ERRORS + 1
    assert detail[-1] == {"loc": [], "msg": "and 15 more errors", "type": "too_many_errors"}
    assert all("input" not in error for error in detail)


def test_an_excerpt_is_short_and_escapes_what_is_not_printable() -> None:
    assert excerpt("a\ud800b\x1b[31m") == "a\\ud800b\\x1b[31m"
    assert excerpt("k" * 100) == "k" * 40 + "…"
    excerpt("\udfff" * 100).encode("utf-8")  # never a lone surrogate


@pytest.mark.parametrize(
    "raw",
    [b"[" * 30_000 + b"]" * 30_000, b'{"reason": "\xff\xfe"}', b'{"reason": "x"', b"\x00"],
)
async def test_a_body_that_cannot_be_parsed_gets_4xx_with_a_json_detail(
    api: httpx.AsyncClient, raw: bytes
) -> None:
    response = await api.post(PAUSE, headers=json_headers(), content=raw)
    assert 400 <= response.status_code < 500, response.text
    assert strict_json(response)["detail"]


# ---------------------------------------------------------------------------- C.10


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (PAUSE, {"reason": "x", "for_seconds": True}),
        (PAUSE, {"reason": "x", "for_seconds": "900"}),
        (PAUSE, {"reason": "x", "wait": "yes"}),
        (PAUSE, {"reason": "x", "wait": 1}),
        (PAUSE, {"reason": "x", "auto_resume": "true", "for_seconds": 900}),
        (PAUSE, {"reason": "x", "timeout": "5"}),
        (PAUSE, {"reason": "x", "timeout": False}),
        (RESUME, {"stagger_seconds": True}),
        (RESUME, {"wait": "yes"}),
        (RESUME, {"reason": 7}),
    ],
)
async def test_a_value_of_the_wrong_type_is_not_coerced(
    api: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    response = await api.post(path, headers=auth(ADMIN), json=body)
    assert_refused_without_echo(response, 422)
    assert await version(api) == 0


async def test_whole_numbers_are_still_accepted_as_seconds(api: httpx.AsyncClient) -> None:
    response = await api.post(
        PAUSE, headers=auth(ADMIN), json={"reason": "x", "for_seconds": 900, "timeout": 5}
    )
    assert response.status_code == 200, response.text


def get_paths(app: Any) -> list[str]:
    paths = [
        route.path for route in app.routes
        if isinstance(route, APIRoute | Route) and "GET" in (route.methods or ())
    ]
    return [*paths, "/static/app.js", "/static/app.css"]


async def test_head_of_every_get_route_answers_like_get_without_a_body(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    paths = [path.replace("{name}", fleet_name) for path in get_paths(app)]
    assert {"/", "/healthz", "/api/fleet", "/api/fleet/history", "/metrics"} <= set(paths)
    async with client_for(app) as api:
        for path in paths:
            get = await api.get(path, headers=auth(VIEW))
            head = await api.head(path, headers=auth(VIEW))
            assert get.status_code == 200, path
            assert head.status_code == 200, path
            assert head.content == b"", path
            assert head.headers["content-type"] == get.headers["content-type"], path
            if path.startswith("/static") or path in ("/", "/openapi.json"):
                assert head.headers["content-length"] == get.headers["content-length"], path
        # a HEAD without a token is refused as its GET is
        assert (await api.head("/api/fleet")).status_code == 401
        # and a route that has no GET still has no HEAD
        assert (await api.head(PAUSE, headers=auth(ADMIN))).status_code == 405


# ---------------------------------------------------------------------------- C.8


async def test_a_body_over_the_limit_gets_413_with_or_without_a_token(api: httpx.AsyncClient) -> None:
    raw = json.dumps({"reason": "x" * (64 * 1024)}).encode()
    for headers in (json_headers(), json_headers(VIEW), {"Content-Type": "application/json"}):
        for path in (PAUSE, RESUME, "/api/fleet"):
            response = await api.request("POST" if path != "/api/fleet" else "GET", path,
                                         headers=headers, content=raw)
            body = assert_refused_without_echo(response, 413, "xxxx")
            assert "65536" in body["detail"]
    assert await version(api) == 0


async def test_a_body_of_200000_keys_gets_413_without_being_parsed(api: httpx.AsyncClient) -> None:
    raw = json.dumps({f"k{i}": 0 for i in range(200_000)}).encode()
    response = await api.post(PAUSE, headers=json_headers(), content=raw)
    assert_refused_without_echo(response, 413, "k1")


class Chunks:
    """A request body sent in chunks without a Content-Length; counts what the app pulled."""

    def __init__(self, chunk: bytes, count: int) -> None:
        self.chunk = chunk
        self.count = count
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            self.pulled += 1
            yield self.chunk


async def test_a_chunked_body_is_cut_off_with_413_once_it_passes_the_limit(
    api: httpx.AsyncClient,
) -> None:
    body = Chunks(b" " * 16 * 1024, 1000)  # 16 MB in 16 KiB chunks
    response = await api.post(PAUSE, headers=json_headers(), content=body)
    assert_refused_without_echo(response, 413)
    assert body.pulled <= 6  # 64 KiB and one chunk past it, not the 16 MB


async def test_a_declared_content_length_over_the_limit_is_refused_before_reading(
    api: httpx.AsyncClient,
) -> None:
    body = Chunks(b" " * 1024, 100)
    headers = {**json_headers(), "Content-Length": str(100 * 1024)}
    response = await api.post(PAUSE, headers=headers, content=body)
    assert_refused_without_echo(response, 413)
    assert body.pulled == 0


async def test_the_limit_is_fleetgate_max_body(redis_url: str, fleet_name: str) -> None:
    settings = make_settings(redis_url, fleet_name, max_body=8192)
    app = create_app(settings, run_watcher=False)
    reason = "y" * 450
    async with client_for(app) as api:
        small = await api.post(PAUSE, headers=auth(ADMIN), json={"reason": reason})
        assert small.status_code == 200, small.text
        chunked = Chunks(json.dumps({"reason": reason}).encode(), 1)
        response = await api.post(PAUSE, headers=json_headers(), content=chunked)
        assert response.status_code == 200, response.text
        padded = json.dumps({"reason": reason}) + " " * 8192
        response = await api.post(PAUSE, headers=json_headers(), content=padded.encode())
        assert_refused_without_echo(response, 413)


# ---------------------------------------------------------------------------- schemathesis

POISON = [math.nan, math.inf, -math.inf, "a\ud800b", "\udfff"]


@pytest.mark.slow
# every route of the API, 25-40 generated requests each: the route count grows with the API,
# and on a loaded 2-core machine the whole took over the suite's 120 s hang guard
@pytest.mark.timeout(600)
def test_no_generated_body_with_nan_infinity_or_a_lone_surrogate_makes_a_server_error(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name, max_wait=1), run_watcher=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    checked: list[str] = []
    try:
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.method.upper() != "POST":
                continue

            @given(
                case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                data=st.data(),
            )
            @hsettings(
                max_examples=40, deadline=None, database=None,
                suppress_health_check=list(HealthCheck),
            )
            def poisoned_body_gets_422(case: schemathesis.Case, data: st.DataObject) -> None:
                body = dict(case.body) if isinstance(case.body, dict) else {}
                fields = sorted({*body, "reason", "timeout", "wait", "extra"})
                body[data.draw(st.sampled_from(fields))] = data.draw(st.sampled_from(POISON))
                case.body = json.dumps(body).encode()  # NaN, Infinity and \ud800 escapes
                response = case.call(headers=json_headers())
                case.validate_response(response, checks=[not_a_server_error])
                assert response.status_code == 422, (case.path, body, response.text)
                detail = json.loads(response.content.decode("utf-8"))["detail"]
                assert detail and all("input" not in error for error in detail)

            poisoned_body_gets_422()
            checked.append(operation.label)
        assert sorted(checked) == [
            "POST /api/fleet/pause", "POST /api/fleet/resume",
            "POST /api/fleets/{name}/pause", "POST /api/fleets/{name}/resume",
            "POST /api/fleets/{name}/schedules",
            "POST /api/fleets/{name}/schedules/{schedule}/canary",
            "POST /api/fleets/{name}/schedules/{schedule}/end",
        ]
    finally:
        schemathesis.python.asgi.shutdown_lifespans()
