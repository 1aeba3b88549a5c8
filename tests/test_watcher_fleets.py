"""``fleetgate serve`` watches every fleet of the registry, not only its default one (issue 15
with issue 14): forgotten pauses (the warning line and the events stream), state hashes Redis
lost, maintenance windows, and the notifier's deliveries. Each test has a Redis of its own
(``orders`` the default fleet, ``email`` and ``search`` the others, all in the registry):
the shared server's registry lists every other test's fleets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import read_each, read_overview
from coordinator.fleet.registry import forget, touch
from coordinator.notify.consumer import Notifier
from coordinator.notify.lane import group_for
from coordinator.notify.settings import GROUP
from coordinator.notify.windows import WINDOW_ENDED, WINDOW_STARTED
from coordinator.render.fleets import overview_dict
from coordinator.settings import CoordinatorSettings
from coordinator.web.api import create_app
from coordinator.web.watcher import FleetsWatcher
from replica.contract import Keys, format_time, now_utc
from tests.apikit import VIEW, auth, client_for, make_settings
from tests.fleetkit import replicas, run_cli, until
from tests.notifykit import Hook, quick, settle

DEFAULT, OTHERS = "orders", ("email", "search")
WATCHER_LOG = "coordinator.web.watcher"


@pytest.fixture
async def alone(private_redis: LocalRedis) -> AsyncIterator[tuple[str, aioredis.Redis]]:
    """A Redis of the test's own, its registry listing the three fleets."""
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        for name in (DEFAULT, *OTHERS):
            assert await touch(client, name)
        yield private_redis.url, client
    finally:
        await client.aclose()


def settings_for(url: str, **extra: Any) -> CoordinatorSettings:
    values: dict[str, Any] = {"restore_interval": 0.2, "overdue_log_interval": 3600, **extra}
    return make_settings(url, DEFAULT, **values)


def watcher(client: aioredis.Redis, settings: CoordinatorSettings, **options: Any) -> FleetsWatcher:
    """What ``fleetgate serve`` runs, on ``client``, with notifications on."""
    return FleetsWatcher(Fleet(client, DEFAULT), settings, lambda name: Fleet(client, name),
                         notify=True, **options)


async def forgotten(client: aioredis.Redis, fleet: str) -> None:
    """A pause an hour old with no window: overdue (written as an operator would)."""
    await client.hset(Keys(fleet).state, mapping={
        "version": "1", "paused": "1", "reason": "forgot to resume", "by": "erin",
        "since": format_time(now_utc() - timedelta(hours=1)),
    })


async def events(client: aioredis.Redis, fleet: str) -> list[dict[str, Any]]:
    return [fields for _, fields in await client.xrange(Keys(fleet).events)]


async def edges(client: aioredis.Redis, fleet: str) -> list[tuple[str, str]]:
    return [(f["action"], f["hold"]) for _, f in await client.xrange(Keys(fleet).audit)
            if f["action"] in (WINDOW_STARTED, WINDOW_ENDED)]


async def short_window(client: aioredis.Redis, fleet: str) -> None:
    """A hold that starts in a second and ends by itself a second later."""
    await Fleet(client, fleet).pause("pg 16 upgrade", by="alice", hold="dbmaint",
                                     starts_at=now_utc() + timedelta(seconds=1),
                                     auto_resume_after=1)


# ---------------------------------------------------------------------------- watcher


async def test_the_watcher_flags_a_forgotten_pause_in_a_fleet_that_is_not_the_default_one(
    alone: tuple[str, aioredis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    url, client = alone
    caplog.set_level(logging.INFO, logger=WATCHER_LOG)
    await forgotten(client, "search")
    w = watcher(client, settings_for(url))
    await w.check()
    await w.check()
    assert sorted(w.watchers) == sorted([DEFAULT, *OTHERS])
    lines = [r for r in caplog.records if r.getMessage().startswith("fleet pause overdue")]
    assert len(lines) == 1 and "fleet=search" in lines[0].getMessage()
    assert (lines[0].__dict__["fleet"], lines[0].__dict__["by"]) == ("search", "erin")
    (alert,) = await events(client, "search")
    assert (alert["action"], alert["version"], alert["reason"]) == ("overdue", "1", "forgot to resume")
    assert await events(client, DEFAULT) == [] and await events(client, "email") == []


async def test_the_watcher_audits_a_window_in_a_fleet_that_is_not_the_default_one(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    await short_window(client, "email")
    w = await watcher(client, settings_for(url)).start()
    try:
        async def ended() -> bool:
            return (WINDOW_ENDED, "dbmaint") in await edges(client, "email")
        await until(ended, timeout=30)
    finally:
        await w.stop()
    assert await edges(client, "email") == [(WINDOW_STARTED, "dbmaint"), (WINDOW_ENDED, "dbmaint")]
    assert await edges(client, DEFAULT) == [] and await edges(client, "search") == []


async def test_the_watcher_restores_the_forgotten_state_hash_of_a_fleet_that_is_not_the_default_one(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    search = Fleet(client, "search")
    # replicas that poll rarely, so the coordinator's watcher is the one that restores
    async with replicas(url, "search", 2, poll_interval=60, heartbeat_interval=30):
        state = await search.pause("keep me", by="gil")
        assert (await search.wait(state.version, timeout=30)).ok
        await client.delete(Keys("search").state)
        w = watcher(client, settings_for(url))
        await w.check()
        restored = await search.state()
    assert w.restores == 1 and w.watchers["search"].restores == 1
    assert restored.paused and restored.reason == "keep me" and restored.version == state.version


async def test_one_unreadable_fleet_is_logged_once_and_the_others_are_still_watched(
    alone: tuple[str, aioredis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    url, client = alone
    caplog.set_level(logging.INFO, logger=WATCHER_LOG)
    for name in ("bad", "wrongtype"):
        assert await touch(client, name)
    await client.hset(Keys("bad").state, mapping={"version": "1", "paused": "maybe"})
    await client.set(Keys("wrongtype").state, "not a hash")
    await forgotten(client, "search")
    await short_window(client, "email")
    w = watcher(client, settings_for(url), concurrency=1)  # one at a time: the bad ones first too

    async def ended() -> bool:
        await w.check()
        return (WINDOW_ENDED, "dbmaint") in await edges(client, "email")
    await until(ended, timeout=30)
    assert w.passes >= 2
    skipped = [r.getMessage() for r in caplog.records if "cannot read its state" in r.getMessage()]
    assert len(skipped) == 2, skipped  # once each, however many passes
    assert any("fleet bad:" in m for m in skipped) and any("fleet wrongtype:" in m for m in skipped)
    assert [e["action"] for e in await events(client, "search")] == ["overdue"]
    assert w.watchers["bad"].unreadable is not None and w.watchers["search"].unreadable is None
    await client.delete(Keys("bad").state)
    await w.check()
    assert w.watchers["bad"].unreadable is None
    assert "fleet bad: the watcher reads its state again" in caplog.text


async def test_two_watchers_running_at_once_write_each_audit_and_alert_entry_once(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    other = aioredis.Redis.from_url(url, decode_responses=True)  # a second server's client
    try:
        await forgotten(client, "search")
        await short_window(client, "email")
        running = [await watcher(c, settings_for(url)).start() for c in (client, other)]
        try:
            async def ended() -> bool:
                return (WINDOW_ENDED, "dbmaint") in await edges(client, "email")
            await until(ended, timeout=30)
            await asyncio.gather(*(w.check() for w in running * 3))  # and more, at once
        finally:
            for w in running:
                await w.stop()
    finally:
        await other.aclose()
    assert await edges(client, "email") == [(WINDOW_STARTED, "dbmaint"), (WINDOW_ENDED, "dbmaint")]
    assert [e["action"] for e in await events(client, "search")] == ["overdue"]


async def test_fleetgate_serve_runs_the_watcher_over_every_fleet_of_the_registry(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    await forgotten(client, "email")
    app = create_app(settings_for(url))
    async with client_for(app):
        w = app.state.runtime.watcher
        assert isinstance(w, FleetsWatcher) and sorted(w.watchers) == sorted([DEFAULT, *OTHERS])
        assert w.warnings == 1


# ---------------------------------------------------------------------------- notifier


async def test_the_notifier_delivers_an_event_of_a_fleet_that_is_not_the_default_one_once(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    other = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        async with Hook() as hook:
            notifiers = [Notifier(c, DEFAULT, quick(hook.url, block=0.2), consumer=name,
                                  follow_registry=True) for c, name in ((client, "a"), (other, "b"))]
            for n in notifiers:
                await n.start()
            try:
                await Fleet(client, "email").pause("smtp relay down", by="alice")
                await hook.wait_for(1)
                await settle(lambda: sum(n.stats.acked for n in notifiers) >= 1, *notifiers)
                # one more round of each follower: nothing is left to deliver twice
                for n in notifiers:
                    assert n.follower is not None
                    rounds = n.follower.rounds

                    async def went_round(n: Notifier = n, rounds: int = rounds) -> bool:
                        return n.follower is not None and n.follower.rounds > rounds
                    await until(went_round)
            finally:
                for n in notifiers:
                    await n.stop()
    finally:
        await other.aclose()
    (request,) = hook.requests
    body = request.json()
    assert (body["fleet"], body["event"], body["reason"]) == ("email", "pause", "smtp relay down")
    group = group_for(GROUP, hook.url)  # the receiver's own group
    assert (await client.xpending(Keys("email").audit, group))["pending"] == 0


# ---------------------------------------------------------------------------- rows


async def test_every_fleets_row_gives_each_hold_its_status_in_the_api_and_the_cli(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    email = Fleet(client, "email")
    await email.pause("db", by="alice", hold="db")
    await email.pause("later", by="bob", hold="later", starts_at=now_utc() + timedelta(hours=1))
    async with client_for(create_app(settings_for(url), run_watcher=False)) as http:
        answer = await http.get("/api/fleets", headers=auth(VIEW))
    assert answer.status_code == 200
    api_rows = {r["fleet"]: r for r in answer.json()["fleets"]}
    cli_rows = {r["fleet"]: r for r in overview_dict(await read_overview(client), 1800)["fleets"]}
    for rows in (api_rows, cli_rows):
        holds = rows["email"]["holds"]
        assert {name: h["status"] for name, h in holds.items()} == {
            "db": "active", "later": "scheduled"}
        assert holds["later"]["by"] == "bob"
        assert "holds" not in rows["search"]  # a state without holds shows none


def test_each_fleets_row_of_a_multi_fleet_pause_says_what_the_change_did(
    private_redis: LocalRedis,
) -> None:
    url = private_redis.url
    done = run_cli("pause", "--fleet", "email", "--fleet", "search", "--hold", "db",
                   "--reason", "migration", "--by", "alice", "--json", redis_url=url)
    assert done.returncode == 0, done.stderr
    single = run_cli("pause", "--fleet", "orders", "--hold", "db", "--reason", "migration",
                     "--by", "alice", "--json", redis_url=url)
    assert single.returncode == 0, single.stderr
    expected = json.loads(single.stdout)["change"]
    for row in json.loads(done.stdout):
        assert row["change"] == expected, row
    again = run_cli("resume", "--fleet", "email", "--fleet", "search", "--hold", "db", "--json",
                    redis_url=url)
    assert again.returncode == 0, again.stderr
    for row in json.loads(again.stdout):
        assert row["change"]["event"] == "resume" and row["change"]["holds"] == ["db"], row


async def test_the_watcher_follows_the_registry_as_fleets_come_and_go(
    alone: tuple[str, aioredis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    url, client = alone
    w = watcher(client, settings_for(url), registry_interval=0)  # the registry read each pass
    await w.check()
    assert sorted(w.watchers) == sorted([DEFAULT, *OTHERS])
    await forgotten(client, "late")
    assert await touch(client, "late")
    assert await forget(client, "email") and await forget(client, DEFAULT)
    await w.check()
    assert sorted(w.watchers) == sorted([DEFAULT, "late", "search"])  # the default one stays
    assert [e["action"] for e in await events(client, "late")] == ["overdue"]


# ---------------------------------------------------------------------------- read_each


async def test_read_each_runs_at_most_its_concurrency_in_as_many_tasks_and_keeps_the_order() -> None:
    running, most, tasks = 0, 0, set()

    async def call(i: int) -> int:
        nonlocal running, most
        tasks.add(asyncio.current_task())
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return i * 2

    assert await read_each(list(range(50)), call, 3) == [i * 2 for i in range(50)]
    assert most == 3 and len(tasks) == 3
    assert await read_each([], call, 3) == []


async def test_read_each_raises_the_first_failure_as_itself_and_cancels_the_rest() -> None:
    started: list[int] = []
    gate = asyncio.Event()

    async def call(i: int) -> int:
        started.append(i)
        if i == 1:
            raise aioredis.ConnectionError("gone")
        await gate.wait()  # never set: the failure must cancel these
        return i

    with pytest.raises(aioredis.ConnectionError, match="gone"):
        await read_each(list(range(10)), call, 4)
    assert started == [0, 1, 2, 3]
