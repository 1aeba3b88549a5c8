"""coordinator.fleet.reads: one bad entry in the ``replicas`` set (any replica may write it)
blinds no reader. Readers skip it and count it; a change that was applied is never reported as
failed because of it. Against a real Redis, through the library and the CLI."""

from __future__ import annotations

import json
import time

import pytest
import redis as syncredis
import redis.asyncio as aioredis
from cpkit import Replicas

from coordinator import Fleet
from coordinator.cli.app import main
from coordinator.fleet.reads import parse_flat_members, parse_members
from replica.contract import Keys
from tests.fleetkit import ReplicaThread

BAD_IDS = ("bad id", "{braces}", "x" * 300, "")


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _spoil(redis: aioredis.Redis, fleet: str) -> None:
    """What a careless or hostile replica can write: members that are not replica ids, and a
    record key that is not a hash."""
    keys = Keys(fleet)
    await redis.zadd(keys.replicas, dict.fromkeys(BAD_IDS, _now_ms()))
    await redis.set(f"{keys.prefix}:replica:imposter-1", "not a hash")
    await redis.zadd(keys.replicas, {"imposter-1": _now_ms()})


def test_members_that_are_not_replica_ids_or_have_no_number_are_counted_not_kept() -> None:
    assert parse_members([("a\nb", 1.0), ("c", 2.0)]).unreadable == 1
    members = parse_members([("pod-1", 1.0), ("bad id", 2.0), (b"\xff\xfe", 3.0),
                             ("pod-2", float("nan")), ("pod-3", "not a number"), (b"pod-4", 4)])
    assert members.scores == {"pod-1": 1.0, "pod-4": 4.0}
    assert members.unreadable == 4
    flat = parse_flat_members(["pod-1", "1", "bad id", "2"])
    assert (flat.scores, flat.unreadable) == ({"pod-1": 1.0}, 1)


async def test_status_and_replicas_skip_and_count_what_they_cannot_read(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2) as replicas:
        await _spoil(redis, fleet_name)
        status = await fleet.status()
        assert [r.id for r in status.replicas] == ["pod-0", "pod-1"]
        assert status.unreadable == len(BAD_IDS) + 1
        assert status.state == await fleet.state()
        assert [r.id for r in await fleet.replicas()] == ["pod-0", "pod-1"]
        assert [r.id for r in (await fleet.status(include_stale=False)).replicas] == [
            "pod-0", "pod-1"]
        assert len(replicas) == 2
    assert (await fleet.status()).unreadable == len(BAD_IDS) + 1  # still there, still skipped


@pytest.mark.parametrize("listening", [False, True], ids=["own subscription", "listening"])
async def test_a_pause_and_a_resume_end_ok_despite_a_bad_member(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, listening: bool
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    async with Replicas(redis_url, fleet_name, 3) as replicas:
        if listening:
            await fleet.listen()
        try:
            await _spoil(redis, fleet_name)
            state = await fleet.pause("bad member", by="t")
            report = await fleet.wait(state.version, timeout=10)
            assert report.ok, report.to_dict()
            assert [r.id for r in report.replicas] == ["pod-0", "pod-1", "pod-2"]
            state = await fleet.resume(by="t")
            report = await fleet.wait(state.version, timeout=10)
            assert report.ok, report.to_dict()
            assert not any(replicas.fleet_held())
        finally:
            await fleet.aclose()


async def test_a_restore_reads_past_a_bad_member(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=60.0) as replicas:
        state = await fleet.pause("keep me", by="t")
        assert (await fleet.wait(state.version, timeout=10)).ok
        await _spoil(redis, fleet_name)
        await redis.delete(Keys(fleet_name).state)
        assert await fleet.restore_if_missing()
        assert await fleet.state() == state
        assert len(replicas) == 2


# ---------------------------------------------------------------------------- the CLI


def test_the_cli_status_pause_wait_and_resume_wait_succeed_despite_a_bad_member(
    redis_url: str, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread = ReplicaThread(redis_url, fleet_name, 3)
    with thread:
        with syncredis.Redis.from_url(redis_url, decode_responses=True) as client:
            keys = Keys(fleet_name)
            client.zadd(keys.replicas, dict.fromkeys(BAD_IDS, _now_ms()))
            client.set(f"{keys.prefix}:replica:imposter-1", "not a hash")
            client.zadd(keys.replicas, {"imposter-1": _now_ms()})
        common = ["--redis-url", redis_url, "--fleet", fleet_name]
        assert main([*common, "status", "--json", "--all"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert sorted(r["id"] for r in shown["replicas"]) == ["r1", "r2", "r3"]
        code = main([*common, "pause", "--reason", "bad member", "--by", "t", "--wait", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out)["wait"]["ok"] is True
        code = main([*common, "resume", "--by", "t", "--wait", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out)["wait"]["ok"] is True
