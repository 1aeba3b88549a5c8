"""``fleetgate fleets`` and the registry of fleets (issue 15 section 1, "Listing").

Each test has a Redis of its own (``private_redis``), so the registry ``fleetgate:fleets``
holds exactly the fleets the test made. Replicas are real: ``FleetController``s in a thread
(``tests.fleetkit.ReplicaThread``) and a ``fleetgate-replica`` process; records that must be
stale or behind are written as a replica writes them, with the times the test needs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.registry import list_fleets, read_registry, touch
from replica.contract import Keys, format_time
from replica.contract.keys import FLEETS_KEY
from tests.clikit import one_line, run
from tests.fleetkit import ReplicaThread, until, wait_until
from tests.procs import base_env, replica_processes


@pytest.fixture
def url(private_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", private_redis.url)
    monkeypatch.delenv("FLEETGATE_FLEET", raising=False)
    return private_redis.url


@pytest.fixture
def client(url: str) -> Iterator[syncredis.Redis]:
    with syncredis.Redis.from_url(url, decode_responses=True) as c:
        yield c


def registered(client: syncredis.Redis) -> set[str]:
    return {str(m) for m in client.zrange(FLEETS_KEY, 0, -1)}


def write_record(
    client: syncredis.Redis, fleet: str, replica_id: str, heard_s_ago: float, version: int
) -> None:
    """A replica record as a replica writes it (the fields the summary reads), heard
    ``heard_s_ago`` seconds ago (heartbeat every second), at ``version``; it does not expire."""
    heard = time.time() - heard_s_ago
    client.hset(Keys(fleet).replica(replica_id), mapping={
        "paused": "0", "holds": "{}", "fleet_held": "0", "applied_version": str(version),
        "in_flight": "0", "queued": "0", "quiet": "0", "control": "connected",
        "heartbeat_at": format_time(datetime.fromtimestamp(heard, tz=UTC)),
        "heartbeat_interval": "1", "poll_interval": "1", "host": "h",
    })
    client.zadd(Keys(fleet).replicas, {replica_id: int(heard * 1000)})


def test_fleets_lists_every_fleet_paused_ones_first_with_replicas_live_stale_and_unacknowledged(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    with ReplicaThread(url, "orders", 2), ReplicaThread(url, "billing", 1):
        wait_until(lambda: {"orders", "billing"} <= registered(client))
        code, out, err = run(capsys, "pause", "--fleet", "search", "-r", "reindex", "--for", "1h")
        assert code == 0, err
        # billing: one replica silent for a minute (stale), one alive but behind the version
        assert run(capsys, "pause", "--fleet", "billing", "-r", "db failover", "--wait")[0] == 0
        write_record(client, "billing", "gone-quiet", heard_s_ago=60, version=1)
        write_record(client, "billing", "behind", heard_s_ago=0, version=0)

        code, out, err = run(capsys, "fleets", "--json")
        assert code == 0, err
        data = json.loads(out)
        rows = {r["fleet"]: r for r in data["fleets"]}
        assert [r["fleet"] for r in data["fleets"]] == ["billing", "search", "orders"]
        assert rows["billing"]["paused"] and rows["billing"]["reason"] == "db failover"
        assert (rows["billing"]["live"], rows["billing"]["stale"],
                rows["billing"]["unacknowledged"]) == (2, 1, 1)
        assert rows["search"]["paused"] and rows["search"]["live"] == 0
        assert rows["search"]["pause_age_s"] >= 0 and rows["search"]["overdue"] is False
        assert not rows["orders"]["paused"] and rows["orders"]["reason"] == ""
        assert (rows["orders"]["live"], rows["orders"]["stale"],
                rows["orders"]["unacknowledged"]) == (2, 0, 0)
        assert all(r["last_activity"] for r in data["fleets"])
        assert data["unreadable"] == 0 and data["truncated"] is False

        code, out, err = run(capsys, "fleets")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == "3 fleets: 2 paused, 1 running"
        assert lines[1].split()[:2] == ["fleet", "state"]
        assert lines[2].split()[:2] == ["billing", "PAUSED"]
        assert lines[3].split()[:2] == ["search", "PAUSED"]
        assert lines[4].split()[:3] == ["orders", "running", "-"]


def test_fleets_names_an_overdue_pause_and_the_holds_in_force(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, "pause", "--fleet", "orders", "-r", "forgotten")[0] == 0
    assert run(capsys, "pause", "--fleet", "billing", "-r", "fresh")[0] == 0
    client.hset(Keys("orders").state, "since", "2026-01-01T00:00:00.000Z")  # long ago
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    rows = {r["fleet"]: r for r in json.loads(out)["fleets"]}
    assert rows["orders"]["overdue"] is True and rows["billing"]["overdue"] is False
    holds = rows["orders"].get("holds")
    if holds is not None:  # the state carries holds (issue 14): the pause is one of them
        assert list(holds) == ["default"]
    code, out, err = run(capsys, "fleets")
    assert code == 0, err
    orders = next(line for line in out.splitlines() if line.startswith("orders"))
    assert "OVERDUE" in orders and "forgotten" in orders


def test_fleets_on_a_redis_with_no_fleet_says_so(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "fleets")
    assert (code, err) == (0, "")
    assert "no fleet on this Redis yet" in out
    code, out, err = run(capsys, "fleets", "--json")
    assert json.loads(out)["fleets"] == []


def test_fleets_skips_and_counts_registry_members_that_are_not_fleet_names(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--fleet", "orders", "-r", "x")[0] == 0
    client.zadd(FLEETS_KEY, {"Not A Fleet": 1, "{orders}": 2})
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["fleet"] for r in data["fleets"]] == ["orders"] and data["unreadable"] == 2


def test_fleets_without_redis_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", "redis://127.0.0.1:1/0")
    code, _out, err = run(capsys, "fleets")
    assert code == 1
    assert "cannot reach Redis" in one_line(err)


def test_a_change_registers_its_fleet_with_the_time_of_the_change(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    before = time.time() * 1000
    assert run(capsys, "pause", "--fleet", "orders", "-r", "x")[0] == 0
    first = client.zscore(FLEETS_KEY, "orders")
    assert first is not None and first >= before - 5
    assert run(capsys, "resume", "--fleet", "orders")[0] == 0
    second = client.zscore(FLEETS_KEY, "orders")
    assert second is not None and second >= first
    assert registered(client) == {"orders"}


def test_a_replica_start_registers_its_fleet(url: str, client: syncredis.Redis) -> None:
    with ReplicaThread(url, "orders", 1):
        wait_until(lambda: registered(client) == {"orders"})
    assert client.exists(Keys("orders").state) == 0  # no change was made: the replica did it


async def test_a_replica_process_registers_its_fleet_at_start(
    url: str, tmp_path: Path
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        async with replica_processes(1, base_env(url, "search"), tmp_path):
            async def listed() -> bool:  # another process: polled, bounded
                return "search" in await list_fleets(client)

            await until(listed)
    finally:
        await client.aclose()


async def test_the_registry_lists_newest_activity_first_and_touch_never_raises(
    url: str,
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        assert await touch(client, "old", at_ms=1_000)
        assert await touch(client, "new", at_ms=2_000)
        assert await list_fleets(client) == ["new", "old"]
        assert (await read_registry(client)).fleets == {"new": 2000.0, "old": 1000.0}
    finally:
        await client.aclose()
    gone = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    try:
        assert await touch(gone, "orders") is False
    finally:
        await gone.aclose()
