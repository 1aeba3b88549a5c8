"""Where notifications come from: the audit and events streams through one consumer group.

Two servers deliver each event once; a dead server's events are claimed by another, one being
retried is not; a change made with the CLI while no server ran is announced when one starts;
an event older than max_age is skipped; a forgotten pause is announced once however many
servers watch it; a wait that ended with stragglers is announced."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from coordinator.notify.alerts import Alerts
from coordinator.notify.consumer import Notifier
from coordinator.notify.lane import group_for
from coordinator.notify.settings import GROUP
from coordinator.web.api import create_app
from coordinator.web.metrics import OverdueWatcher
from replica.contract import Keys
from tests.apikit import client_for, make_settings
from tests.fleetkit import replicas, run_cli, until
from tests.notifykit import SECRET, Hook, notifier, quick, settle, verify
from tests.procs import Processes


@pytest.fixture
async def alone(private_redis: LocalRedis) -> AsyncIterator[tuple[str, aioredis.Redis]]:
    """A Redis of the test's own (URL, client): ``fleetgate serve`` notifies every fleet of the
    registry, and the shared server's registry lists every other test's fleets."""
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        yield private_redis.url, client
    finally:
        await client.aclose()


async def nothing_pending(redis: aioredis.Redis, fleet: str) -> bool:
    """No entry pending in any receiver's group, on either stream (and groups there are)."""
    keys = Keys(fleet)
    groups = [g for s in (keys.audit, keys.events) for g in await redis.xinfo_groups(s)]
    return bool(groups) and all(g["pending"] == 0 for g in groups)


async def test_two_servers_deliver_each_event_once(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    count = 20
    async with Hook() as hook, \
            notifier(redis_url, fleet_name, quick(hook.url), "server-a") as a, \
            notifier(redis_url, fleet_name, quick(hook.url), "server-b") as b:
        for i in range(count // 2):
            await fleet.pause(f"drill {i}", by="alice")
            await fleet.resume(by="alice")
        await hook.wait_for(count)
        await settle(lambda: a.stats.acked + b.stats.acked >= count, a, b)
        assert await nothing_pending(redis, fleet_name)  # every entry delivered and acked ...
    ids = [r.json()["id"] for r in hook.requests]
    assert len(ids) == count and len(set(ids)) == count  # ... once each
    assert a.stats.delivered + b.stats.delivered == count
    versions = sorted(r.json()["version"] for r in hook.requests)
    assert versions == list(range(1, count + 1))


async def test_the_events_of_a_server_that_died_are_claimed_and_delivered_by_another(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Hook() as hook:
        # a server that read the entry and died before delivering it
        dead = Notifier(redis, fleet_name, quick(hook.url), consumer="dead-server")
        await dead.ensure_groups()
        await fleet.pause("db maintenance", by="alice")
        taken = await redis.xreadgroup(group_for(GROUP, hook.url), "dead-server",
                                       {keys.audit: ">"}, count=10)
        assert len(taken[0][1]) == 1
        async with notifier(redis_url, fleet_name, quick(hook.url, claim_idle=0.3)) as n:
            await hook.wait_for(1)
            await settle(lambda: n.stats.acked >= 1, n)
    assert n.stats.claimed == 1
    assert [r.json()["reason"] for r in hook.requests] == ["db maintenance"]
    assert await nothing_pending(redis, fleet_name)


async def test_an_event_being_retried_is_not_taken_over_by_another_server(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    # fails for longer than claim_idle: its server renews its claim meanwhile
    slow = quick(backoff=0.15, backoff_max=0.3, claim_idle=0.6)
    async with Hook([500] * 8 + [200]) as hook:
        settings = quick(hook.url, **{k: getattr(slow, k) for k in
                                     ("backoff", "backoff_max", "claim_idle")})
        async with notifier(redis_url, fleet_name, settings, "server-a") as a:
            await fleet.pause("db maintenance", by="alice")
            await hook.wait_for(1)
            async with notifier(redis_url, fleet_name, settings, "server-b") as b:
                await hook.wait_for(1, accepted=True)
                await settle(lambda: a.stats.acked >= 1, a)
    assert len(hook.accepted) == 1 and len(hook.requests) == 9
    assert a.stats.delivered == 1 and b.stats.claimed == 0 and b.stats.delivered == 0


async def test_a_cli_change_with_no_server_running_is_announced_when_a_server_starts(
    alone: tuple[str, aioredis.Redis], fleet_name: str
) -> None:
    redis_url, _ = alone
    done = await asyncio.to_thread(
        run_cli, "pause", "--reason", "made with no server", "--by", "carol",
        redis_url=redis_url, fleet=fleet_name,
    )
    assert done.returncode == 0, done.stderr
    async with Hook() as hook:
        settings = make_settings(redis_url, fleet_name, webhook_urls=hook.url,
                                 webhook_secret=SECRET)
        async with client_for(create_app(settings)):
            await hook.wait_for(1)
    (request,) = hook.requests
    assert verify(SECRET, request.body, request.headers["x-fleetgate-signature"])
    body = request.json()
    assert (body["event"], body["by"], body["reason"]) == ("pause", "carol", "made with no server")


async def test_an_event_older_than_max_age_is_acknowledged_without_being_sent(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook:
        # a group that a server created long ago, and an entry written while every server was
        # down
        await redis.xgroup_create(keys.audit, group_for(GROUP, hook.url), id="0", mkstream=True)
        old_ms = int(time.time() * 1000) - 2 * 3600 * 1000
        await redis.xadd(keys.audit, {"action": "pause", "reason": "long ago", "by": "alice",
                                      "version": "1", "at": ""}, id=f"{old_ms}-0")
        async with notifier(redis_url, fleet_name, quick(hook.url)) as n:
            await fleet.pause("now", by="alice")
            await hook.wait_for(1)
            await settle(lambda: n.stats.acked >= 2, n)
    assert [r.json()["reason"] for r in hook.requests] == ["now"]
    assert n.stats.skipped == 1
    assert await nothing_pending(redis, fleet_name)


async def test_a_forgotten_pause_is_announced_once_however_many_servers_watch_it(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("deploy 4.2", by="alice")
    # the pause began an hour ago (the hash edited by hand): past FLEETGATE_MAX_PAUSE (30 min)
    await redis.hset(fleet.keys.state, "since", "2026-01-01T00:00:00.000Z")
    watcher_settings = make_settings(redis_url, fleet_name)
    watchers = [OverdueWatcher(Fleet(redis, fleet_name), watcher_settings,
                               Alerts(redis, fleet_name)) for _ in range(2)]
    for watcher in watchers * 2:
        await watcher.check()
    entries = await redis.xrange(fleet.keys.events)
    assert [e[1]["action"] for e in entries] == ["overdue"]
    assert entries[0][1]["version"] == str(state.version)
    async with Hook() as hook, notifier(redis_url, fleet_name, quick(hook.url)) as n:
        await hook.wait_for(2)  # the pause, then the alert
        await settle(lambda: n.stats.acked >= 2, n)
    alert = next(r.json() for r in hook.requests if r.json()["event"] == "overdue")
    assert alert["source"] == "events" and alert["by"] == "alice"
    assert alert["text"].startswith(f"Fleet {fleet_name} has been paused for ")
    assert alert["text"].endswith("passed FLEETGATE_MAX_PAUSE. Forgotten?")
    # a new version of the pause, still overdue, is announced again (once)
    await fleet.pause("deploy 4.2, still", by="bob")
    for watcher in watchers:
        await watcher.check()
    assert [e[1]["version"] for e in await redis.xrange(fleet.keys.events)] == [
        str(state.version), str(state.version + 1)]


async def test_a_wait_that_ended_with_stragglers_is_announced(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with replicas(redis_url, fleet_name, n=2) as kit, Hook() as hook, \
            notifier(redis_url, fleet_name, quick(hook.url)):
        kit.put(1, {"hold": True})
        await kit.held.wait()
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("drain for the migration", by="alice")
        report = await fleet.wait(state.version, timeout=0.5)
        assert [r.id for r in report.stragglers] == ["r2"]
        kit.release()
        ok = await fleet.wait(state.version, timeout=20)
        assert ok.ok
        await hook.wait_for(2)
    events = [r.json() for r in hook.requests]
    assert [e["event"] for e in events] == ["pause", "wait"]
    wait = events[1]
    assert (wait["by"], wait["reason"], wait["version"]) == (
        "alice", "drain for the migration", state.version)
    assert wait["details"]["stragglers"] == [{"id": "r2", "why": "still in flight"}]
    assert wait["text"].startswith(f"Fleet {fleet_name}: 1 of 2 replicas did not get quiet within ")
    assert wait["text"].endswith(f"after the pause at version {state.version}: r2 (still in flight).")
    assert len(await redis.xrange(Keys(fleet_name).events)) == 1  # the wait that was ok: none


async def test_a_notifier_finds_its_group_again_after_redis_forgot_it(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook, notifier(redis_url, fleet_name, quick(hook.url)) as n:
        await fleet.pause("before", by="alice")
        await hook.wait_for(1)
        await settle(lambda: n.stats.acked >= 1, n)
        await redis.delete(fleet.keys.audit, fleet.keys.events, fleet.keys.state)
        await fleet.pause("after", by="alice")
        await hook.wait_for(2)
    assert [r.json()["reason"] for r in hook.requests] == ["before", "after"]


async def test_two_fleetgate_serve_processes_announce_each_change_once_a_cli_change_included(
    alone: tuple[str, aioredis.Redis], fleet_name: str, processes: Processes, tmp_path: Path
) -> None:
    redis_url, redis = alone
    done = await asyncio.to_thread(
        run_cli, "pause", "--reason", "before any server", "--by", "carol",
        redis_url=redis_url, fleet=fleet_name,
    )
    assert done.returncode == 0, done.stderr
    async with Hook() as hook:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
        env.update({
            "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_FLEET": fleet_name,
            "FLEETGATE_ADMIN_TOKEN": "t" * 24, "FLEETGATE_WEBHOOK_URLS": hook.url,
            "FLEETGATE_WEBHOOK_SECRET": SECRET,
        })
        ports = [free_port(), free_port()]
        for i, port in enumerate(ports):
            with (tmp_path / f"serve-{i}.log").open("w") as log:
                processes.start(
                    [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
                    env=env, stdout=subprocess.DEVNULL, stderr=log,
                )
        async with httpx.AsyncClient(timeout=2) as client:
            for port in ports:  # both up before the changes: another process, no event to wait on

                async def up(port: int = port) -> bool:
                    try:
                        return (await client.get(f"http://127.0.0.1:{port}/healthz")).is_success
                    except httpx.HTTPError:
                        return False

                await until(up, timeout=30)
        await hook.wait_for(1)
        fleet = Fleet(redis, fleet_name)
        await fleet.resume(by="alice")
        for i in range(3):
            await fleet.pause(f"drill {i}", by="alice")
            await fleet.resume(by="alice")
        await hook.wait_for(8)

        async def all_acked() -> bool:  # the servers are other processes: no event to wait on
            audit = Keys(fleet_name).audit
            (group,) = await redis.xinfo_groups(audit)  # the one receiver's
            (last,) = await redis.xrevrange(audit, count=1)
            return bool(group["pending"] == 0 and group["last-delivered-id"] == last[0])

        await until(all_acked)
        logs = "".join((tmp_path / f"serve-{i}.log").read_text() for i in range(2))
    bodies = [r.json() for r in hook.requests]
    assert len(bodies) == 8 and len({b["id"] for b in bodies}) == 8, logs
    assert bodies[0]["reason"] == "before any server" and bodies[0]["by"] == "carol"
    assert all(verify(SECRET, r.body, r.headers["x-fleetgate-signature"]) for r in hook.requests)
    assert logs.count("notifying 1 receiver(s)") == 2
