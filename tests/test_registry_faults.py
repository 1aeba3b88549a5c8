"""Issue 19 B.3 and B.5: what replicas write never blinds the coordinator's views.

A replica may ``ZADD`` any member to the registry ``fleetgate:fleets`` and write its own record
(the deployment's ACL lets it): bytes that are not UTF-8, a score of ``+inf``, a thousand fake
names. ``fleetgate fleets``, ``GET /api/fleets``, ``/metrics`` and the watcher skip and count
what they cannot read, ``fleetgate serve`` starts, and a paused fleet a coordinator changed is
never crowded out. Real Redis (a private server each, or the deployment's rendered ACL), the
real CLI and app; records are written as a replica writes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import read_overview
from coordinator.fleet.registry import (
    MAX_FLEETS,
    fleets_with_state,
    list_fleets,
    read_registry,
    touch,
)
from coordinator.web.api import create_app
from coordinator.web.watcher import FleetsWatcher
from replica.contract import Keys, format_time, now_utc
from replica.contract.keys import FLEETS_CHANGED_KEY, FLEETS_KEY
from tests.apikit import VIEW, auth, client_for, make_settings
from tests.clikit import run
from tests.test_api_fleets import metric_samples
from tests.test_cli_fleets import write_record
from tests.test_deploy_acl import (  # noqa: F401  (module fixtures: the rendered ACL's server)
    FLEET,
    Server,
    _denied,
    admin,
    replica,
    server,
)

NOT_UTF8 = b"\xff\xfeorders\xc3"
WATCHER_LOG = "coordinator.web.watcher"


@pytest.fixture
def url(private_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", private_redis.url)
    monkeypatch.delenv("FLEETGATE_FLEET", raising=False)
    return private_redis.url


@pytest.fixture
def raw(url: str) -> Iterator[syncredis.Redis]:
    """A client that neither decodes nor encodes for us: what a replica may send."""
    with syncredis.Redis.from_url(url) as c:
        yield c


def now_ms() -> int:
    return int(time.time() * 1000)


def forgotten(client: syncredis.Redis, fleet: str) -> None:
    """Make the fleet's pause an hour old with no window: overdue."""
    client.hset(Keys(fleet).state, "since", format_time(now_utc() - timedelta(hours=1)))


# ---------------------------------------------------------------------------- B.3 bytes


def test_a_registry_member_that_is_not_utf8_is_skipped_and_counted_by_fleets(
    url: str, raw: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--fleet", "orders", "-r", "db failover")[0] == 0
    raw.zadd(FLEETS_KEY, {NOT_UTF8: now_ms() + 1000})
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["fleet"] for r in data["fleets"]] == ["orders"] and data["unreadable"] == 1
    assert data["fleets"][0]["paused"] is True
    code, out, err = run(capsys, "fleets")
    assert code == 0, err
    assert "1 member(s) of fleetgate:fleets are not fleet names" in out


def test_a_registry_member_scored_inf_is_skipped_and_counted_by_fleets(
    url: str, raw: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--fleet", "orders", "-r", "db failover")[0] == 0
    raw.execute_command("ZADD", FLEETS_KEY, "+inf", "ghost", "-inf", "abyss")
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["fleet"] for r in data["fleets"]] == ["orders"] and data["unreadable"] == 2


async def pause(url: str, fleet: str, reason: str) -> None:
    """Pause ``fleet`` as the CLI does (``Fleet.pause``, which notes it in the registry)."""
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Fleet(client, fleet).pause(reason, by="alice")
    finally:
        await client.aclose()


async def test_serve_starts_and_answers_every_view_with_a_registry_member_that_is_not_utf8(
    url: str, raw: syncredis.Redis
) -> None:
    await pause(url, "search", "reindex")
    forgotten(raw, "search")

    def garbage() -> None:
        raw.zadd(FLEETS_KEY, {NOT_UTF8: now_ms() + 1000})
        raw.execute_command("ZADD", FLEETS_KEY, "+inf", "ghost")

    garbage()
    app = create_app(make_settings(url, "orders"))  # the watcher runs
    async with client_for(app) as api:  # the lifespan (the watcher's first pass) went through
        watcher = app.state.runtime.watcher
        assert isinstance(watcher, FleetsWatcher)
        assert watcher.passes >= 1 and (watcher.failures, watcher.registry_dropped) == (0, 2)
        assert "search" in watcher.watchers and watcher.watchers["search"].warnings == 1
        garbage()  # again, after the watcher pruned them
        fleets = await api.get("/api/fleets", headers=auth(VIEW))
        assert fleets.status_code == 200, fleets.text
        body = fleets.json()
        assert [r["fleet"] for r in body["fleets"]] == ["search"] and body["unreadable"] == 2
        metrics = await api.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        samples = metric_samples(metrics.text)
        assert samples[("fleetgate_fleet_paused", (("fleet", "search"), ("reason", "reindex")))] == 1
        assert samples[("fleetgate_registry_unreadable", ())] == 2
        assert samples[("fleetgate_registry_dropped_total", ())] == 2
        assert samples[("fleetgate_watcher_failures_total", ())] == 0
        passes = watcher.passes
        await watcher.check()  # a pass: the fleets read, whatever the registry holds
        assert watcher.passes > passes and watcher.failures == 0


def test_a_record_field_that_is_not_utf8_is_one_unreadable_replica_of_its_fleet(
    url: str, raw: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_record_field_not_utf8(url, raw))
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    assert {r["fleet"]: r["unreadable"] for r in json.loads(out)["fleets"]} == \
        {"orders": 2, "email": 0}


async def _record_field_not_utf8(url: str, raw: syncredis.Redis) -> None:
    await pause(url, "orders", "db failover")
    await pause(url, "email", "smtp")
    with syncredis.Redis.from_url(url, decode_responses=True) as client:
        write_record(client, "orders", "good", heard_s_ago=0, version=1)
        write_record(client, "orders", "evil", heard_s_ago=0, version=1)
    raw.hset(Keys("orders").replica("evil"), b"host", b"\xff\xfe")
    raw.zadd(Keys("orders").replicas, {b"\xc3\x28": now_ms()})  # a member, not UTF-8
    app = create_app(make_settings(url, "orders"), run_watcher=False)
    async with client_for(app) as api:
        fleets = await api.get("/api/fleets", headers=auth(VIEW))
        assert fleets.status_code == 200, fleets.text
        rows = {r["fleet"]: r for r in fleets.json()["fleets"]}
        assert (rows["orders"]["live"], rows["orders"]["unreadable"]) == (1, 2)
        assert rows["email"]["paused"] is True
        metrics = await api.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        samples = metric_samples(metrics.text)
        assert samples[("fleetgate_fleet_replicas_unreadable", (("fleet", "orders"),))] == 2
        assert samples[("fleetgate_fleet_paused", (("fleet", "email"), ("reason", "smtp")))] == 1
        one = await api.get("/api/fleets/orders", headers=auth(VIEW))
        assert one.status_code == 200, one.text


async def test_the_watcher_survives_an_unexpected_exception_and_logs_it_once_with_its_traceback(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    caplog.set_level(logging.DEBUG, logger=WATCHER_LOG)
    try:
        assert await touch(client, "orders") and await touch(client, "broken")

        def make(name: str) -> Fleet:
            if name == "broken":
                raise RuntimeError("a bug in making a fleet")
            return Fleet(client, name)

        w = FleetsWatcher(Fleet(client, "orders"), make_settings(url, "orders"), make,
                          registry_interval=0)
        await w.check()
        await w.check()
        assert w.failures == 2
        logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(logged) == 1 and logged[0].exc_info is not None
        assert "RuntimeError" in caplog.text
        await w.start()  # the task keeps going: start() ran a pass and did not raise
        await w.stop()
        assert w.failures == 3
    finally:
        await client.aclose()


# ---------------------------------------------------------------------------- B.5 flooding


async def test_names_a_replica_floods_the_registry_with_never_hide_a_paused_fleet(
    server: Server, admin: syncredis.Redis, replica: syncredis.Redis,  # noqa: F811
) -> None:
    admin.flushall()
    client = server.async_client("coordinator")
    try:
        victim = Fleet(client, "victim")
        await victim.pause("forgot to resume", by="erin")
        admin.hset(Keys("victim").state, "since", format_time(now_utc() - timedelta(hours=1)))
        soon = now_ms() + 60_000
        flood = {f"fake-{i}": soon for i in range(1001)}
        assert replica.zadd(FLEETS_KEY, flood) == 1001  # what the replica ACL allows
        _denied(lambda: replica.zadd(FLEETS_CHANGED_KEY, {"fake-x": soon}))
        _denied(lambda: replica.zrem(FLEETS_CHANGED_KEY, "victim"))

        overview = await read_overview(client)
        first = overview.statuses[0]
        assert first.state.fleet == "victim" and first.state.paused and overview.truncated
        assert (await list_fleets(client))[0] == "victim"

        settings = make_settings(server.url("coordinator"), FLEET, restore_interval=0.2,
                                 overdue_log_interval=3600)
        w = FleetsWatcher(Fleet(client, FLEET), settings, lambda n: Fleet(client, n),
                          notify=True, registry_interval=0)
        await w.check()
        assert w.failures == 0 and "victim" in w.watchers
        events = await client.xrange(Keys("victim").events)
        assert [f["action"] for _, f in events] == ["overdue"]
        assert await fleets_with_state(client, ["fake-1", "victim", "fake-2"]) == ["victim"]
    finally:
        await client.aclose()


async def test_the_watcher_bounds_the_registry_and_counts_what_it_drops(
    url: str, raw: syncredis.Redis
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        assert await touch(client, "orders", at_ms=1)  # changed long ago: kept whatever comes
        extra = 250
        raw.zadd(FLEETS_KEY, {f"fake-{i}": 1_000 + i for i in range(MAX_FLEETS + extra)})
        raw.zadd(FLEETS_KEY, {NOT_UTF8: now_ms()})
        w = FleetsWatcher(Fleet(client, "orders"), make_settings(url, "orders"),
                          lambda n: Fleet(client, n), registry_interval=0)
        await w.check()
        # the bad member, and the oldest names past the bound ("orders" is the oldest of all)
        assert w.registry_dropped == extra + 2
        assert raw.zcard(FLEETS_KEY) == MAX_FLEETS
        assert raw.zscore(FLEETS_KEY, NOT_UTF8) is None
        assert raw.zscore(FLEETS_KEY, "fake-0") is None
        registry = await read_registry(client)
        assert "orders" in registry.fleets and registry.unreadable == 0
        assert (await list_fleets(client))[0] == "orders"
    finally:
        await client.aclose()


async def test_a_fleet_paused_before_the_changed_registry_existed_is_noted_and_never_crowded_out(
    url: str, raw: syncredis.Redis
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Fleet(client, "legacy").pause("paused by an older coordinator", by="erin")
        await client.zrem(FLEETS_CHANGED_KEY, "legacy")  # as an older coordinator left it
        w = FleetsWatcher(Fleet(client, "orders"), make_settings(url, "orders"),
                          lambda n: Fleet(client, n), registry_interval=0)
        await w.check()
        assert await client.zscore(FLEETS_CHANGED_KEY, "legacy") is not None
        assert await client.zscore(FLEETS_CHANGED_KEY, "orders") is None  # no state: not noted
        raw.zadd(FLEETS_KEY, {f"fake-{i}": now_ms() + 60_000 for i in range(1001)})
        assert (await read_overview(client)).statuses[0].state.fleet == "legacy"
    finally:
        await client.aclose()
