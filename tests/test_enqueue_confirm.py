"""Work items survive the failover they meet, or the producer is told (issue 20 D.19).

``Fleet.enqueue`` and ``fleetgate enqueue`` confirm a batch as a pause is confirmed: ``WAIT``
for ``FLEETGATE_MIN_REPLICAS_ACK`` replicas on the connection the ``XADD``s went on. A batch no
replica confirmed raises ``BatchNotConfirmed`` with its entry ids (the CLI: exit 4, one line);
a standalone server with no replicas (``ROLE``) is never waited on.

On a real Sentinel group (``tests.topology``): the Redis replica is frozen (SIGSTOP) and its
replication link filled (``tests.failoverkit.starve_replicas``), so the batch stays in the
primary's memory; the primary is then killed and the frozen node promoted: the batch the
producer was told is unconfirmed is indeed gone, while a confirmed batch survives the same
failover. During a ``SENTINEL FAILOVER`` the old primary, its replica promoted away and itself
not yet demoted, shows no replicas: it is waited on all the same (the chaos run found that it
took writes without ``WAIT`` that its demotion then discarded), where a master alone because
its replica died is not. Whether ``WAIT`` was sent is read from the server's ``INFO commandstats``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from bench.redisnode import wait_for
from coordinator.demo.localredis import LocalRedis
from coordinator.fleet import durability
from coordinator.fleet.durability import BatchNotConfirmed, NotConfirmed, Unconfirmed
from coordinator.fleet.fleet import Fleet
from replica.contract import Keys
from replica.link.connect import connect
from tests.clikit import one_line, run
from tests.failoverkit import starve_replicas
from tests.replication import (
    SHORT,
    Replicated,
    replicated_fixture,  # noqa: F401 (the replicated fixture)
    waits,
)
from tests.topology import Node, SentinelGroup, sentinel_group_fixture  # noqa: F401 (the fixture)


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FLEETGATE_MIN_REPLICAS_TIMEOUT", str(SHORT))
    yield


def entries_on(node: Node, key: str) -> list[str]:
    """The entry ids of the stream ``key`` on ``node``."""
    with node.client() as c:
        return [entry_id for entry_id, _ in c.xrange(key)]


def items(n: int, tag: str) -> list[dict[str, object]]:
    return [{"id": f"{tag}-{i}", "n": i} for i in range(n)]


# ---------------------------------------------------------------------------- Sentinel


async def test_a_batch_the_frozen_replica_cannot_confirm_is_reported_and_is_what_the_failover_loses(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    redis = connect(sentinel_group.url, decode_responses=True)
    try:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        kept = await fleet.enqueue(items(5, "kept"))  # confirmed: the replica is in sync
        old = sentinel_group.master()
        (frozen,) = sentinel_group.replica_nodes()
        frozen.freeze()
        await asyncio.to_thread(starve_replicas, old)
        with pytest.raises(BatchNotConfirmed) as caught:
            await fleet.enqueue(items(7, "lost"))
        lost = caught.value.ids
        assert len(lost) == 7 and caught.value.acked == 0
        assert isinstance(caught.value, Unconfirmed)
        assert isinstance(caught.value, NotConfirmed)  # the name for it
        assert "not confirmed by a replica" in str(caught.value)
        # written to the primary all the same: the producer was told, not lied to
        assert set(lost) <= set(entries_on(old, keys.work))
        old.kill()
        frozen.thaw()
        new = await asyncio.to_thread(sentinel_group.wait_for_failover, old)
    finally:
        await redis.aclose()
    on_new = entries_on(new, keys.work)
    assert set(kept) <= set(on_new)  # what was confirmed survived the failover
    assert not set(lost) & set(on_new)  # what was not is what it lost


def test_fleetgate_enqueue_on_a_sentinel_group_with_a_frozen_replica_exits_4_with_one_line(
    sentinel_group: SentinelGroup, fleet_name: str, capsys: pytest.CaptureFixture[str],
    short_timeout: None,
) -> None:
    (frozen,) = sentinel_group.replica_nodes()
    frozen.freeze()
    try:
        code, out, err = run(capsys, "enqueue", "--count", "3", "--redis-url",
                             sentinel_group.url, "--fleet", fleet_name)
    finally:
        frozen.thaw()
    assert code == 4
    line = one_line(err)
    assert "0 items enqueued and confirmed; 3 more" in line
    assert "not confirmed by a replica" in line and "0 not sent" in line
    assert out == ""
    assert len(entries_on(sentinel_group.master(), Keys(fleet_name).work)) == 3


async def test_a_batch_the_old_primary_takes_during_a_sentinel_failover_is_not_confirmed(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    """``SENTINEL FAILOVER``: the replica is promoted, and for some seconds the old primary,
    not yet demoted, still answers as a master with no replicas, to the connections it had.
    What it takes then its demotion discards: it must not read as a standalone server's
    write (no ``WAIT``), but be reported unconfirmed, and it is indeed lost."""
    keys = Keys(fleet_name)
    old = sentinel_group.master()
    (promoted,) = sentinel_group.replica_nodes()
    redis = connect(sentinel_group.url, decode_responses=True)
    try:
        await Fleet(redis, fleet_name).enqueue(items(1, "warm"))  # a connection to the old one
        sentinel = sentinel_group.sentinels[0]
        with sentinel.client() as c:
            c.execute_command("SENTINEL", "FAILOVER", sentinel_group.SERVICE)

        def split() -> bool | None:
            both = (promoted.info("replication").get("role"), old.info("replication").get("role"))
            return True if both == ("master", "master") else None

        await asyncio.to_thread(wait_for, "the replica promoted, the old primary not yet demoted",
                                split, 30.0)
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)  # nothing remembered
        with pytest.raises(BatchNotConfirmed) as caught:
            await fleet.enqueue(items(3, "split"))
        assert caught.value.acked == 0
        new = await asyncio.to_thread(sentinel_group.wait_for_failover, old)
    finally:
        await redis.aclose()
    assert new is promoted
    assert not set(caught.value.ids) & set(entries_on(new, keys.work))  # what it lost


async def test_a_sentinel_primary_alone_after_its_replica_died_is_not_waited_on(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    """The master every sentinel names, with no failover in progress and its replica dead,
    has no replica a failover could promote: as a standalone server, it is not waited on."""
    (replica,) = sentinel_group.replica_nodes()
    replica.kill()
    redis = connect(sentinel_group.url, decode_responses=True)
    try:
        ids = await Fleet(redis, fleet_name, min_replicas_timeout=SHORT).enqueue(items(2, "a"))
    finally:
        await redis.aclose()
    assert len(ids) == 2
    assert waits(sentinel_group.master().url) == 0


async def test_a_sentinel_primary_alone_is_waited_on_when_a_sentinel_does_not_answer(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    """Only the sentinel leading a ``SENTINEL FAILOVER`` says "failover in progress" until the
    others learn the new master: one that does not answer cannot vouch that the primary alone
    is not being replaced (a 10-minute chaos run wrote an item unwaited to an old primary so,
    reported confirmed, and its demotion lost it)."""
    (replica,) = sentinel_group.replica_nodes()
    replica.kill()
    sentinel_group.sentinels[2].kill()
    redis = connect(sentinel_group.url, decode_responses=True)
    try:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        with pytest.raises(NotConfirmed):
            await fleet.enqueue(items(2, "unsure"))
    finally:
        await redis.aclose()
    assert waits(sentinel_group.master().url) == 1


async def test_a_replica_back_since_the_primary_was_found_alone_is_waited_on(
    sentinel_group: SentinelGroup, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 10-minute Sentinel chaos run lost 7 items it had been told were confirmed: the
    primary, alone while its replica restarted, answered ``ROLE`` with no replica; that "none"
    was remembered for ``REPLICAS_CACHE_S``, the replica synced, was frozen (a lossy failover),
    and the batches of that second went without ``WAIT``, unconfirmed yet reported confirmed,
    and died with the primary. "None" is asked again each time (a count of replicas is still
    remembered: it leads to ``WAIT`` anyway). The cache is made to last the whole test, so
    that what it remembers, not how fast the test runs, decides."""
    monkeypatch.setattr(durability, "REPLICAS_CACHE_S", 3600.0)
    primary = sentinel_group.master()
    (replica,) = sentinel_group.replica_nodes()
    replica.kill()
    redis = connect(sentinel_group.url, decode_responses=True)
    try:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        assert len(await fleet.enqueue(items(2, "alone"))) == 2  # no replica: no WAIT
        replica._args = ["--replicaof", primary.host, str(primary.port)]
        await asyncio.to_thread(replica.start)
        await asyncio.to_thread(sentinel_group.wait_in_sync)
        replica.freeze()  # it acknowledges nothing from now on
        try:
            with pytest.raises(NotConfirmed) as caught:
                await fleet.enqueue(items(3, "back"))
        finally:
            replica.thaw()
    finally:
        await redis.aclose()
    assert isinstance(caught.value, BatchNotConfirmed) and caught.value.acked == 0
    assert waits(primary.url) >= 1


# ---------------------------------------------------------------------------- a primary and its replica


async def test_a_batch_the_replica_confirms_returns_its_ids_after_one_wait(
    replicated: Replicated, fleet_name: str
) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        ids = await Fleet(redis, fleet_name).enqueue(items(3, "ok"))
    assert len(ids) == 3
    assert waits(replicated.url) == 1


def test_fleetgate_enqueue_stops_at_the_first_batch_no_replica_confirms(
    replicated: Replicated, fleet_name: str, capsys: pytest.CaptureFixture[str],
    short_timeout: None,
) -> None:
    replicated.freeze()
    code, out, err = run(capsys, "enqueue", "--count", "2500", "--json", "--redis-url",
                         replicated.url, "--fleet", fleet_name)
    assert code == 4
    assert "1000 more" in one_line(err) and "1500 not sent" in one_line(err)
    report = json.loads(out)
    assert (report["count"], len(report["unconfirmed"]), report["unsent"]) == (0, 1000, 1500)
    with SyncRedis.from_url(replicated.url) as r:
        assert r.xlen(Keys(fleet_name).work) == 1000


async def test_except_NotConfirmed_catches_a_batch_no_replica_confirmed(
    replicated: Replicated, fleet_name: str
) -> None:
    """The issue names the producer's error ``NotConfirmed``: a producer written against it
    (``except NotConfirmed``) is told of an unconfirmed batch, with its ids, to enqueue again."""
    replicated.freeze()
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        try:
            await fleet.enqueue(items(4, "retry"))
        except NotConfirmed as exc:
            caught: NotConfirmed = exc
        else:
            pytest.fail("an enqueue no replica confirmed returned as if confirmed")
    assert isinstance(caught, BatchNotConfirmed) and len(caught.ids) == 4
    assert caught.acked == 0 and caught.fleet == fleet_name
    with SyncRedis.from_url(replicated.url) as r:
        assert r.xlen(Keys(fleet_name).work) == 4  # written, not confirmed: the producer knows


async def test_min_replicas_ack_0_enqueues_without_a_wait(
    replicated: Replicated, fleet_name: str
) -> None:
    replicated.freeze()
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        ids = await Fleet(redis, fleet_name, min_replicas_ack=0).enqueue(items(2, "off"))
    assert len(ids) == 2
    assert waits(replicated.url) == 0


# ---------------------------------------------------------------------------- standalone


async def test_a_standalone_server_without_replicas_is_not_waited_on_for_a_batch(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    async with Redis.from_url(private_redis.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name)
        first = await fleet.enqueue(items(3, "a"))
        second = await fleet.enqueue(items(2, "b"))
    assert len(first) == 3 and len(second) == 2
    assert waits(private_redis.url) == 0


def test_fleetgate_enqueue_on_a_standalone_server_exits_0_without_waiting(
    private_redis: LocalRedis, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "enqueue", "--count", "3", "--redis-url", private_redis.url,
                         "--fleet", fleet_name)
    assert (code, err) == (0, "")
    assert out.startswith("enqueued 3 items")
    assert waits(private_redis.url) == 0


async def test_an_error_reply_in_a_batch_is_raised_and_leaves_the_connection_clean(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    async with Redis.from_url(private_redis.url, decode_responses=True) as redis:
        await redis.set(Keys(fleet_name).work, "not a stream")
        fleet = Fleet(redis, fleet_name)
        with pytest.raises(Exception, match="WRONGTYPE"):
            await fleet.enqueue(items(3, "x"))
        await redis.delete(Keys(fleet_name).work)
        assert len(await fleet.enqueue(items(2, "y"))) == 2
        assert await redis.ping()
