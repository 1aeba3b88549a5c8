"""Notifications when one receiver, one fleet name or one entry goes bad: a receiver that is down
holds back no other receiver and catches up when it comes back; a registry name with no state
gets no stream and no group; an entry that is not UTF-8, or an error nobody expected, is
skipped and counted, and the notifier goes on. Real HTTP receivers on loopback, real Redis."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.notify.consumer import Notifier
from coordinator.notify.follow import Follower
from coordinator.notify.settings import GROUP
from replica.contract import Keys
from replica.contract.keys import FLEETS_KEY
from tests.fleetkit import until
from tests.notifykit import Hook, hooks, notifier, quick, settle


@pytest.fixture
async def alone(private_redis: LocalRedis) -> AsyncIterator[tuple[str, aioredis.Redis]]:
    """A Redis of the test's own (URL, client): the follower reads every fleet of the registry."""
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        yield private_redis.url, client
    finally:
        await client.aclose()


async def nothing_pending(redis: aioredis.Redis, fleet: str) -> bool:
    keys = Keys(fleet)
    groups = [g for s in (keys.audit, keys.events) for g in await redis.xinfo_groups(s)]
    return bool(groups) and all(g["pending"] == 0 for g in groups)


async def test_a_receiver_that_is_down_holds_back_no_other_and_catches_up_when_it_comes_back(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    in_flight = 4
    backlog = [f"drill {i}" for i in range(3 * in_flight)]  # more events than max_in_flight
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        async with Hook([500]) as down, Hook() as healthy:
            settings = quick(down.url, healthy.url, max_in_flight=in_flight, batch=in_flight)
            async with Notifier(client, fleet_name, settings) as n:
                for reason in backlog:
                    await fleet.pause(reason, by="alice")
                await healthy.wait_for(len(backlog), timeout=20)
                # a new pause after the backlog still reaches the healthy receiver
                await fleet.pause("after the backlog", by="bob")
                await healthy.wait_for(len(backlog) + 1, timeout=20)
                down_lane, healthy_lane = n.lanes
                assert down_lane.receiver.url == down.url
                assert down_lane.held <= in_flight  # what the down one costs: its own backlog
                await settle(lambda: healthy_lane.held == 0, n)
                assert not down.accepted and {r.json()["reason"] for r in down.requests} == {
                    "drill 0"}  # in order: retrying its first event
                down.answers = [200]  # it comes back, well within max_age
                await down.wait_for(len(backlog) + 1, accepted=True, timeout=20)
                await settle(lambda: n.held == 0, n)
            assert await nothing_pending(redis, fleet_name)
    finally:
        await client.aclose()
    wanted = [*backlog, "after the backlog"]
    assert [r.json()["reason"] for r in healthy.requests] == wanted
    assert [r.json()["reason"] for r in down.accepted] == wanted
    assert n.stats.skipped == 0 and n.stats.given_up == 0


async def test_a_registry_name_with_no_state_gets_no_stream_and_no_group(
    alone: tuple[str, aioredis.Redis]
) -> None:
    _, client = alone
    fakes = [f"fake-{i}" for i in range(50)]
    await client.zadd(FLEETS_KEY, dict.fromkeys(fakes, 9_999_999_999_999))  # a replica's flood
    await Fleet(client, "victim").pause("forgotten", by="alice")
    async with Hook() as hook:
        n = Notifier(client, "home", quick(hook.url, block=0.1), follow_registry=True)
        async with n:
            await hook.wait_for(1)
            assert n.follower is not None
            rounds = n.follower.rounds

            async def went_round() -> bool:
                return n.follower is not None and n.follower.rounds > rounds + 1

            await until(went_round)
            created = [k for name in fakes for k in (Keys(name).audit, Keys(name).events)]
            assert await client.exists(*created) == 0
            assert n.stats.unstated >= len(fakes)
            # a name that gets a state is followed from then on
            await Fleet(client, "fake-7").pause("a real fleet after all", by="bob")
            await hook.wait_for(2)
    assert [(r.json()["fleet"], r.json()["reason"]) for r in hook.requests] == [
        ("victim", "forgotten"), ("fake-7", "a real fleet after all")]


async def test_an_entry_that_is_not_utf8_is_skipped_and_counted_and_the_next_is_delivered(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.xadd(keys.audit, {b"action": b"pause", b"reason": b"\xff\xfe bad bytes"})
    finally:
        await raw.aclose()
    fleet = Fleet(redis, fleet_name)
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        async with Hook() as hook, Notifier(client, fleet_name, quick(hook.url)) as n:
            await fleet.pause("after the garbage", by="alice")
            await hook.wait_for(1, timeout=20)
            await settle(lambda: n.stats.acked >= 2, n)
    finally:
        await client.aclose()
    assert [r.json()["reason"] for r in hook.requests] == ["after the garbage"]
    assert n.stats.garbage == 1
    assert await nothing_pending(redis, fleet_name)


async def test_the_follower_skips_a_garbage_entry_and_a_garbage_registry_member_and_goes_on(
    alone: tuple[str, aioredis.Redis]
) -> None:
    url, client = alone
    raw = aioredis.Redis.from_url(url)
    try:
        await Fleet(client, "email").pause("first", by="alice")
        await raw.xadd(Keys("email").audit, {b"action": b"\xc3(", b"by": b"\xff"})
        await raw.zadd(FLEETS_KEY, {b"\xff\xfe-not-text": 1})
    finally:
        await raw.aclose()
    async with Hook() as hook:
        n = Notifier(client, "home", quick(hook.url, block=0.1), follow_registry=True)
        async with n:
            await hook.wait_for(1, timeout=20)
            await Fleet(client, "email").resume(by="bob")
            await hook.wait_for(2, timeout=20)
            await settle(lambda: n.stats.garbage >= 1, n)
    assert [r.json()["event"] for r in hook.requests] == ["pause", "resume"]


class Broken(Follower):
    """A follower with a bug in its registry reads until ``fixed``."""

    fixed = False

    async def refresh(self) -> None:
        if not self.fixed:
            raise RuntimeError("an injected bug")
        await super().refresh()


async def test_an_error_the_follower_did_not_expect_is_logged_once_counted_and_it_goes_on(
    alone: tuple[str, aioredis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.notify")
    _, client = alone
    await Fleet(client, "email").pause("while the follower is broken", by="alice")
    async with Hook() as hook:
        n = Notifier(client, "home", quick(hook.url, block=0.1))
        broken = Broken(n)
        n.follower = broken
        async with n:
            await settle(lambda: n.stats.errors >= 3, n)
            broken.fixed = True
            await hook.wait_for(1, timeout=20)
    assert [r.json()["reason"] for r in hook.requests] == ["while the follower is broken"]
    logged = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert "an injected bug" in logged[0].getMessage()


async def test_after_an_upgrade_each_receiver_starts_where_the_old_single_group_stood(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    # the previous release's one group: "announced" acked, "in flight" read but not acked
    await redis.xgroup_create(keys.audit, GROUP, id="0", mkstream=True)
    await fleet.pause("announced", by="alice")
    await fleet.pause("in flight", by="alice")
    ((_, entries),) = await redis.xreadgroup(GROUP, "old-server", {keys.audit: ">"})
    await redis.xack(keys.audit, GROUP, entries[0][0])
    await fleet.pause("unread", by="alice")
    async with hooks([200], [200]) as (a, b), \
            notifier(redis_url, fleet_name, quick(a.url, b.url)) as n:
        await a.wait_for(2)
        await b.wait_for(2)
        await fleet.resume(by="bob")
        await a.wait_for(3)
        await b.wait_for(3)
        await settle(lambda: n.held == 0, n)
    for hook in (a, b):
        assert [r.json()["reason"] for r in hook.requests] == ["in flight", "unread", ""]
