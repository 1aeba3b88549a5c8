"""Issue 19 B.4: one unreadable fleet never blinds the views of the others.

A replicas key retyped (``WRONGTYPE``) or a state hash edited by hand (``paused maybe``) makes
that fleet unreadable. ``GET /api/fleets``, ``/metrics`` and ``fleetgate fleets`` still answer:
the bad fleet's row says what is wrong (``error``; ``fleetgate_fleet_read_error`` 1), the others
are read as usual. Real Redis (a private server each), the real app and CLI.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.web.api import create_app
from replica.contract import Keys
from tests.apikit import VIEW, auth, client_for, make_settings
from tests.clikit import run
from tests.test_api_fleets import metric_samples


def retyped_replicas(client: syncredis.Redis, fleet: str) -> None:
    """The fleet's replicas set made a hash (DEL, then HSET)."""
    client.delete(Keys(fleet).replicas)
    client.hset(Keys(fleet).replicas, "r1", "1")


def paused_maybe(client: syncredis.Redis, fleet: str) -> None:
    """The fleet's state hash edited by hand into a value no reader accepts."""
    client.hset(Keys(fleet).state, "paused", "maybe")


BREAKS: dict[str, Callable[[syncredis.Redis, str], None]] = {
    "wrongtype": retyped_replicas,
    "paused-maybe": paused_maybe,
}


@pytest.fixture
def url(private_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", private_redis.url)
    monkeypatch.delenv("FLEETGATE_FLEET", raising=False)
    return private_redis.url


async def two_fleets_one_broken(url: str, broken: str) -> None:
    """``orders`` paused (db failover) and ``email`` running, then ``email`` broken."""
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Fleet(client, "orders").pause("db failover", by="alice")
        await Fleet(client, "email").pause("smtp", by="alice")
        await Fleet(client, "email").resume(by="alice")
    finally:
        await client.aclose()
    with syncredis.Redis.from_url(url, decode_responses=True) as client_sync:
        BREAKS[broken](client_sync, "email")


@pytest.mark.parametrize("broken", sorted(BREAKS))
async def test_one_unreadable_fleet_is_a_row_and_a_series_of_its_own_in_the_api_and_metrics(
    url: str, broken: str
) -> None:
    await two_fleets_one_broken(url, broken)
    app = create_app(make_settings(url, "orders"), run_watcher=False)
    async with client_for(app) as api:
        fleets = await api.get("/api/fleets", headers=auth(VIEW))
        assert fleets.status_code == 200, fleets.text
        body = fleets.json()
        assert [r["fleet"] for r in body["fleets"]] == ["email", "orders"]  # unreadable first
        email, orders = body["fleets"]
        assert email["error"] and "paused" not in email and body["errors"] == 1
        assert ("WRONGTYPE" in email["error"]) == (broken == "wrongtype")
        assert (orders["paused"], orders["reason"]) == (True, "db failover")
        assert "error" not in orders

        metrics = await api.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        samples = metric_samples(metrics.text)
        assert samples[("fleetgate_fleet_read_error", (("fleet", "email"),))] == 1
        assert samples[("fleetgate_fleet_read_error", (("fleet", "orders"),))] == 0
        paused = ("fleetgate_fleet_paused", (("fleet", "orders"), ("reason", "db failover")))
        assert samples[paused] == 1
        assert not any(name == "fleetgate_fleet_paused" and ("fleet", "email") in labels
                       for name, labels in samples)


@pytest.mark.parametrize("broken", sorted(BREAKS))
def test_fleets_shows_an_unreadable_fleet_as_a_line_of_its_own_and_reads_the_others(
    url: str, broken: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(two_fleets_one_broken(url, broken))
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["fleet"] for r in data["fleets"]] == ["email", "orders"] and data["errors"] == 1
    assert data["fleets"][0]["error"] and data["fleets"][1]["paused"] is True
    code, out, err = run(capsys, "fleets")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "2 fleets: 1 paused, 0 running, 1 cannot be read"
    assert lines[2].split()[:2] == ["email", "UNREADABLE"]
    assert ["orders", "PAUSED"] in [line.split()[:2] for line in lines[3:]]  # after the error
