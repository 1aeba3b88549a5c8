"""One coordinator serves every fleet on its Redis: ``GET /api/fleets``, the
``/api/fleets/{name}`` routes beside the legacy ``/api/fleet`` ones (the default fleet), tokens
limited to some fleets, and ``/metrics`` with a series per fleet. Real Redis (a private server
where the registry must hold only the test's fleets), real replicas, the real app."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from coordinator.web.api import create_app
from coordinator.web.deps import FleetCache
from replica.contract import Keys
from tests.apikit import VIEW, auth, client_for, json_headers, make_settings
from tests.fleetkit import FLEETGATE, ROOT, replicas, until
from tests.procs import Processes

ADMIN_TOKEN = "fleets-admin-token-012345"
ORDERS_ONCALL = "orders-oncall-token-0123"
ORDERS_DASH = "orders-dash-token-012345"


def tokens_file(tmp_path: Path, *fleets: str) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([
        {"name": "orders-oncall", "token": ORDERS_ONCALL, "role": "admin", "fleets": list(fleets)},
        {"name": "orders-dash", "token": ORDERS_DASH, "role": "view", "fleets": list(fleets)},
    ]))
    return str(path)


async def listed(api: httpx.AsyncClient, token: str = VIEW) -> list[dict[str, Any]]:
    response = await api.get("/api/fleets", headers=auth(token))
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["fleets"]
    return rows


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


# ---------------------------------------------------------------------------- every fleet


async def test_get_fleets_lists_every_fleet_of_the_registry_with_the_paused_ones_first(
    private_redis: LocalRedis,
) -> None:
    url = private_redis.url
    app = create_app(make_settings(url, "email"), run_watcher=False)
    async with replicas(url, "orders", 2), replicas(url, "email", 1), replicas(url, "search", 1), \
            client_for(app) as api:
        await until(lambda: _has(api, {"orders", "email", "search"}))
        paused = await api.post("/api/fleets/search/pause", headers=json_headers(),
                                json={"reason": "reindex", "wait": True, "timeout": 20})
        assert paused.status_code == 200, paused.text
        assert paused.json()["wait"]["ok"] is True
        rows = await listed(api)
    assert [r["fleet"] for r in rows] == ["search", "email", "orders"]
    search, email, orders = rows
    assert (search["paused"], search["reason"], search["by"]) == (True, "reindex", "alice")
    assert search["pause_age_s"] >= 0 and search["overdue"] is False
    assert (search["live"], search["stale"], search["unacknowledged"]) == (1, 0, 0)
    assert (orders["paused"], orders["reason"], orders["pause_age_s"]) == (False, "", None)
    assert (orders["live"], orders["stale"], orders["unacknowledged"]) == (2, 0, 0)
    assert email["live"] == 1
    assert all(r["last_activity"] for r in rows)


async def _has(api: httpx.AsyncClient, names: set[str]) -> bool:
    return names <= {r["fleet"] for r in await listed(api)}


async def test_a_named_fleet_is_paused_resumed_and_read_without_touching_the_default_fleet(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    other = f"{fleet_name}-b"
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with replicas(redis_url, other, 2), client_for(app) as api:
        paused = await api.post(f"/api/fleets/{other}/pause", headers=json_headers(),
                                json={"reason": "db failover", "wait": True, "timeout": 20})
        assert paused.status_code == 200, paused.text
        assert paused.json()["fleet"] == other and paused.json()["state"]["paused"] is True
        assert len(paused.json()["wait"]["replicas"]) == 2
        assert (await Fleet(redis, fleet_name).state()).paused is False

        view = (await api.get(f"/api/fleets/{other}", headers=auth(VIEW))).json()
        assert view["fleet"] == other and view["summary"]["effectively_paused"] is True
        assert view["summary"]["live"] == 2 and view["summary"]["quiet"] == 2
        every = await api.get(f"/api/fleets/{other}?replicas=all", headers=auth(VIEW))
        assert sorted(r["id"] for r in every.json()["replicas"]) == ["r1", "r2"]

        resumed = await api.post(f"/api/fleets/{other}/resume", headers=json_headers(),
                                 json={"reason": "done", "wait": True, "timeout": 20})
        assert resumed.status_code == 200, resumed.text
        history = (await api.get(f"/api/fleets/{other}/history", headers=auth(VIEW))).json()
    assert history["fleet"] == other
    assert [(e["action"], e["by"]) for e in history["events"]][:2] == [
        ("resume", "alice"), ("pause", "alice"),
    ]
    assert (await Fleet(redis, fleet_name).history()) == []


async def test_the_legacy_routes_act_on_the_default_fleet_as_its_named_routes_do(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with replicas(redis_url, fleet_name, 1), client_for(app) as api:
        paused = await api.post("/api/fleet/pause", headers=json_headers(),
                                json={"reason": "legacy", "wait": True, "timeout": 20})
        assert paused.status_code == 200, paused.text
        legacy = (await api.get("/api/fleet", headers=auth(VIEW))).json()
        every = (await api.get(f"/api/fleets/{fleet_name}?replicas=all", headers=auth(VIEW))).json()
        summary = (await api.get(f"/api/fleets/{fleet_name}", headers=auth(VIEW))).json()
        legacy_history = (await api.get("/api/fleet/history", headers=auth(VIEW))).json()
        named_history = (await api.get(f"/api/fleets/{fleet_name}/history", headers=auth(VIEW))).json()
    assert legacy["fleet"] == fleet_name and legacy["state"]["reason"] == "legacy"
    assert [r["id"] for r in legacy["replicas"]] == ["r1"]  # the status shape, as before
    for body in (every, summary):
        assert body["fleet"] == fleet_name
        for field in ("version", "paused", "reason", "by", "since"):
            assert body["state"][field] == legacy["state"][field], field
    assert [r["id"] for r in every["replicas"]] == ["r1"]
    assert summary["summary"]["quiet"] == legacy["summary"]["quiet"] == 1
    assert legacy_history == named_history and legacy_history["events"][0]["reason"] == "legacy"


async def test_a_fleet_from_before_the_registry_is_found_by_its_keys(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    old = f"{fleet_name}-old"
    await redis.hset(Keys(old).state, mapping={"version": "3", "paused": "1", "reason": "old"})
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        response = await api.get(f"/api/fleets/{old}", headers=auth(VIEW))
    assert response.status_code == 200, response.text
    assert response.json()["state"]["reason"] == "old"


# ---------------------------------------------------------------------------- bad names


@pytest.mark.parametrize("name", ["Orders", "-orders", "a" * 64, "or ders", "orders%0A", "ü"])
async def test_an_invalid_fleet_name_is_a_422_with_a_json_detail_on_every_route(
    redis_url: str, fleet_name: str, name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        answers = [
            await api.get(f"/api/fleets/{name}", headers=auth(VIEW)),
            await api.get(f"/api/fleets/{name}/history", headers=auth(VIEW)),
            await api.post(f"/api/fleets/{name}/pause", headers=json_headers(), json={"reason": "x"}),
            await api.post(f"/api/fleets/{name}/resume", headers=json_headers()),
        ]
    for response in answers:
        assert response.status_code == 422, (name, response.text)
        assert response.json()["detail"][0]["loc"] == ["path", "name"]
        assert name not in response.text


async def test_a_fleet_never_seen_is_a_404_to_read_or_resume_and_may_be_paused(
    redis_url: str, fleet_name: str
) -> None:
    new = f"{fleet_name}-new"
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    async with client_for(app) as api:
        for response in (
            await api.get(f"/api/fleets/{new}", headers=auth(VIEW)),
            await api.get(f"/api/fleets/{new}/history", headers=auth(VIEW)),
            await api.post(f"/api/fleets/{new}/resume", headers=json_headers()),
        ):
            assert response.status_code == 404, response.text
            assert response.json() == {"detail": f"no fleet {new} on this Redis"}
        paused = await api.post(f"/api/fleets/{new}/pause", headers=json_headers(),
                                json={"reason": "before its first deploy"})
        assert paused.status_code == 200, paused.text
        view = await api.get(f"/api/fleets/{new}", headers=auth(VIEW))
        assert view.status_code == 200 and view.json()["state"]["paused"] is True
        assert (await api.post(f"/api/fleets/{new}/resume", headers=json_headers())).status_code == 200


# ---------------------------------------------------------------------------- tokens


async def test_a_token_limited_to_some_fleets_gets_403_on_every_other_fleet(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, tmp_path: Path
) -> None:
    mine, other, unseen = f"{fleet_name}-orders", f"{fleet_name}-email", f"{fleet_name}-nope"
    await Fleet(redis, other).pause("theirs", by="someone")
    settings = make_settings(redis_url, fleet_name, tokens_file=tokens_file(tmp_path, mine))
    app = create_app(settings, run_watcher=False)
    async with client_for(app) as api:
        ok = await api.post(f"/api/fleets/{mine}/pause", headers=json_headers(ORDERS_ONCALL),
                            json={"reason": "mine"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["state"]["by"] == "orders-oncall"
        assert (await api.get(f"/api/fleets/{mine}", headers=auth(ORDERS_DASH))).status_code == 200
        refused = [
            await api.get(f"/api/fleets/{other}", headers=auth(ORDERS_DASH)),
            await api.get(f"/api/fleets/{other}/history", headers=auth(ORDERS_ONCALL)),
            await api.post(f"/api/fleets/{other}/resume", headers=json_headers(ORDERS_ONCALL)),
            await api.post(f"/api/fleets/{other}/pause", headers=json_headers(ORDERS_ONCALL),
                           json={"reason": "not mine"}),
            # a fleet it is not given: 403 whether or not it exists
            await api.get(f"/api/fleets/{unseen}", headers=auth(ORDERS_ONCALL)),
            # the legacy routes mean the default fleet, which it is not given either
            await api.get("/api/fleet", headers=auth(ORDERS_DASH)),
            await api.get("/api/fleet/history", headers=auth(ORDERS_DASH)),
            await api.post("/api/fleet/pause", headers=json_headers(ORDERS_ONCALL),
                           json={"reason": "not mine"}),
            await api.post("/api/fleet/resume", headers=json_headers(ORDERS_ONCALL)),
        ]
        # a view token limited to its fleet still cannot write to it
        read_only = await api.post(f"/api/fleets/{mine}/resume", headers=json_headers(ORDERS_DASH))
    for response in refused:
        assert response.status_code == 403, response.text
        assert response.json()["detail"].startswith("the token of orders-")
        assert "is not given fleet" in response.json()["detail"]
    assert read_only.status_code == 403
    state = await Fleet(redis, other).state()
    assert (state.paused, state.reason) == (True, "theirs")


async def test_a_token_limited_to_the_default_fleet_uses_the_legacy_routes(
    redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    settings = make_settings(redis_url, fleet_name, tokens_file=tokens_file(tmp_path, fleet_name))
    app = create_app(settings, run_watcher=False)
    async with client_for(app) as api:
        paused = await api.post("/api/fleet/pause", headers=json_headers(ORDERS_ONCALL),
                                json={"reason": "allowed"})
        read = await api.get("/api/fleet", headers=auth(ORDERS_DASH))
    assert paused.status_code == 200, paused.text
    assert read.status_code == 200 and read.json()["state"]["by"] == "orders-oncall"


async def test_get_fleets_lists_only_the_fleets_a_token_is_given(
    private_redis: LocalRedis, tmp_path: Path
) -> None:
    url = private_redis.url
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        for name in ("orders", "email", "search"):
            await Fleet(client, name).pause("maintenance", by="ops")
    finally:
        await client.aclose()
    settings = make_settings(url, "orders", tokens_file=tokens_file(tmp_path, "orders", "search"))
    app = create_app(settings, run_watcher=False)
    async with client_for(app) as api:
        limited = [r["fleet"] for r in await listed(api, ORDERS_DASH)]
        everyone = [r["fleet"] for r in await listed(api, VIEW)]
        anonymous = await api.get("/api/fleets")
    assert limited == ["orders", "search"]
    assert everyone == ["email", "orders", "search"]
    assert anonymous.status_code == 401


# ---------------------------------------------------------------------------- metrics


async def test_metrics_label_the_series_of_every_fleet_of_the_registry(
    private_redis: LocalRedis,
) -> None:
    url = private_redis.url
    app = create_app(make_settings(url, "orders"), run_watcher=False)
    async with replicas(url, "orders", 2), replicas(url, "email", 1), client_for(app) as api:
        await until(lambda: _has(api, {"orders", "email"}))
        paused = await api.post("/api/fleets/email/pause", headers=json_headers(),
                                json={"reason": "smtp down", "wait": True, "timeout": 20})
        assert paused.status_code == 200, paused.text
        response = await api.get("/metrics")
    assert response.status_code == 200
    m = metric_samples(response.text)

    def value(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    assert value("fleetgate_fleet_paused", fleet="email", reason="smtp down") == 1
    assert value("fleetgate_fleet_paused", fleet="orders", reason="") == 0
    assert value("fleetgate_fleet_replicas", fleet="email", state="quiet") == 1
    assert value("fleetgate_fleet_replicas", fleet="orders", state="running") == 2
    assert value("fleetgate_fleet_unacknowledged", fleet="orders") == 0
    assert value("fleetgate_fleet_state_version", fleet="email") >= 1
    assert value("fleetgate_fleet_pause_overdue", fleet="email") == 0
    fleets = {dict(labels)["fleet"] for (name, labels) in m if name == "fleetgate_fleet_pause_overdue"}
    assert fleets == {"orders", "email"}


# ---------------------------------------------------------------------------- the cache


async def test_the_fleet_cache_keeps_the_default_fleet_and_a_bounded_number_of_others(
    redis: aioredis.Redis,
) -> None:
    cache = FleetCache(redis, "main", size=3)
    first = cache.get("a")
    assert cache.get("a") is first and cache.get("main") is cache.default
    for name in ("b", "c", "d"):
        cache.get(name)
    assert len(cache) == 4  # three others and the default
    assert cache.get("a") is not first  # the least recently used went out
    assert cache.get("main") is cache.default
    assert all(cache.get(name).redis is redis for name in ("a", "b", "main"))


# ---------------------------------------------------------------------------- the real server


@pytest.mark.slow
async def test_fleetgate_serve_serves_two_fleets_to_their_tokens(
    private_redis: LocalRedis, processes: Processes, tmp_path: Path
) -> None:
    """The real ``fleetgate serve`` process: both fleets in ``GET /api/fleets`` and ``/metrics``,
    a token limited to one of them refused the other."""
    url = private_redis.url
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Fleet(client, "email").pause("smtp down", by="ops")
    finally:
        await client.aclose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    port = free_port()
    env.update({
        "FLEETGATE_REDIS_URL": url, "FLEETGATE_FLEET": "orders", "FLEETGATE_ADMIN_TOKEN": ADMIN_TOKEN,
        "FLEETGATE_TOKENS_FILE": tokens_file(tmp_path, "orders"),
    })
    with (tmp_path / "serve.log").open("w") as log:
        proc = processes.start(
            [FLEETGATE, "serve", "--port", str(port)], stdout=log, stderr=log, env=env, cwd=ROOT
        )
        async with replicas(url, "orders", 2), \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:

            async def serving_both() -> bool:
                try:
                    response = await api.get("/api/fleets", headers=auth(ADMIN_TOKEN))
                except httpx.TransportError:
                    return False
                return response.status_code == 200 and \
                    [r["fleet"] for r in response.json()["fleets"]] == ["email", "orders"]

            await until(serving_both)
            rows = (await api.get("/api/fleets", headers=auth(ADMIN_TOKEN))).json()["fleets"]
            limited = (await api.get("/api/fleets", headers=auth(ORDERS_DASH))).json()["fleets"]
            refused = await api.get("/api/fleets/email", headers=auth(ORDERS_DASH))
            paused = await api.post("/api/fleet/pause", headers=json_headers(ORDERS_ONCALL),
                                    json={"reason": "deploy", "wait": True, "timeout": 20})
            metrics = metric_samples((await api.get("/metrics")).text)
        proc.terminate()
        assert proc.wait(timeout=20) == 0, (tmp_path / "serve.log").read_text()
    assert (rows[0]["paused"], rows[0]["reason"], rows[1]["live"]) == (True, "smtp down", 2)
    assert [r["fleet"] for r in limited] == ["orders"]
    assert refused.status_code == 403 and "is not given fleet email" in refused.json()["detail"]
    assert paused.status_code == 200, paused.text
    assert metrics[("fleetgate_fleet_paused", (("fleet", "email"), ("reason", "smtp down")))] == 1
    assert metrics[("fleetgate_fleet_paused", (("fleet", "orders"), ("reason", "deploy")))] == 1
    assert metrics[("fleetgate_fleet_replicas", (("fleet", "orders"), ("state", "quiet")))] == 2
