"""The chaos run on a replicated topology sees what it did not schedule (issue 20 D.19).

A 180 s Sentinel run (seed 7) broke rules 2 and 3 with no product defect behind them:

* the Sentinel group failed its primary over by itself (its sentinels lost their pub/sub links
  to it in a ``pubsub-kill`` fault on a loaded machine, ``down-after-milliseconds`` being 1 s):
  the replicas, still on the old primary until its demotion 18 s later, read its state, and the
  checker, told of no failover, called every change of those seconds late. ``SwitchWatch``
  records such a failover as an ``unplanned-failover`` window, and the pub/sub fault now spares
  the sentinels' own links;
* during a ``SENTINEL FAILOVER`` both nodes took dead letters; the observer, reading the dead
  stream from the last entry id it had seen on the old primary, never read those the new one
  took with lower ids, and items dead-lettered there seemed lost. ``Observer.resync`` reads the
  audit and dead-letter streams whole at the end.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bench.chaos.ha import HaRedis
from bench.chaos.history import HistoryWriter, read_lines
from bench.chaos.observer import Observer
from bench.chaos.switches import SwitchWatch
from bench.redisnode import wait_for
from replica.contract import Keys
from tests.topology import SentinelGroup, sentinel_group_fixture  # noqa: F401 (the fixture)


def _ha(group: SentinelGroup) -> HaRedis:
    """A ``HaRedis`` on the test's own group (the one it made for itself is never started)."""
    ha = HaRedis("sentinel", "fleetgate:{chaos}:state", 7)
    ha.group.stop()
    ha.group = group
    return ha


def _failover(group: SentinelGroup) -> tuple[int, int]:
    """A ``SENTINEL FAILOVER``, asked again while refused (NOGOODSLAVE); (old, new) ports once
    the old primary is the new one's replica. Asked once the group is in sync as every
    sentinel sees it: one asked sooner can be undone (``SentinelGroup.wait_in_sync``)."""
    group.wait_in_sync()
    old = group.master()

    def asked() -> bool | None:
        with group.sentinels[0].client() as c:
            try:
                c.execute_command("SENTINEL", "FAILOVER", group.SERVICE)
            except ResponseError:
                return None
            return True

    wait_for("a sentinel to take the failover", asked, 30.0)
    new = group.wait_for_failover(old, 60.0)
    return old.port, new.port


def _windows(path: Path) -> list[dict[str, Any]]:
    return [e for e in read_lines(path) if e["ev"] in ("fault-start", "fault-end")]


async def test_a_failover_no_fault_scheduled_is_recorded_until_the_old_primary_is_demoted(
    sentinel_group: SentinelGroup, tmp_path: Path
) -> None:
    path = tmp_path / "runner.jsonl"
    moves = [0]
    watch = SwitchWatch(_ha(sentinel_group), HistoryWriter(path), lambda: moves[0])
    task = asyncio.create_task(watch.run())
    try:
        await watch.started.wait()
        old, new = await asyncio.to_thread(_failover, sentinel_group)
        await asyncio.to_thread(wait_for, "the window to end",
                                lambda: True if len(_windows(path)) == 2 else None, 60.0)
        start, end = _windows(path)
        assert start["kind"] == end["kind"] == "unplanned-failover"
        assert start["id"] == end["id"] and start["target"] == "redis"
        assert (start["params"]["old"], start["params"]["new"]) == (old, new)
        assert start["t"] < start["params"]["seen"] <= end["t"]  # begun before it was seen

        # a failover the injector says it is making (moves odd, then moved) is its own window
        moves[0] += 1
        await asyncio.to_thread(_failover, sentinel_group)
        moves[0] += 1
        polls = watch.polls
        await asyncio.to_thread(wait_for, "two more polls",
                                lambda: True if watch.polls >= polls + 2 else None, 30.0)
        assert len(_windows(path)) == 2 and watch.seen == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_pubsub_fault_spares_the_sentinels_links(sentinel_group: SentinelGroup) -> None:
    ha = _ha(sentinel_group)
    primary = sentinel_group.master()
    with primary.client() as subscriber_conn:
        subscriber = subscriber_conn.pubsub()
        subscriber.subscribe("fleetgate:{chaos}:control")
        subscriber.get_message(timeout=2.0)  # the subscription is confirmed

        def pubsub_names() -> list[str]:
            with primary.client() as c:
                return [str(x.get("name") or "") for x in c.client_list(_type="pubsub")]

        before = pubsub_names()
        assert sum(n.startswith("sentinel-") for n in before) == 3
        assert ha.pubsub_kill("the-observer") == len(before) - 3  # the fleet's only
        assert sorted(n for n in pubsub_names() if n.startswith("sentinel-")) == \
            sorted(n for n in before if n.startswith("sentinel-"))
        subscriber.close()


async def test_resync_writes_the_dead_letters_a_cursor_read_missed(
    redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    keys = Keys(fleet_name)
    path = tmp_path / "runner.jsonl"
    observer = Observer(redis_url, keys, [], HistoryWriter(path))
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)

    def letter(ident: str) -> dict[Any, Any]:
        return {"item": json.dumps({"id": ident}), "error": "ToldToFail: x", "runs": "2",
                "replica": "r1", "entry": f"{ident}-entry"}

    def dead() -> list[str]:
        return [str(e["item"]) for e in read_lines(path) if e["ev"] == "dead"]

    try:
        await redis.xadd(keys.dead, letter("old-primary"), id="2000-0")
        await observer.poll_once()
        # the failover: the stream is the new primary's, whose letter (taken while the
        # observer read the old one) has a lower id than the old one's
        await redis.delete(keys.dead)
        await redis.xadd(keys.dead, letter("new-primary"), id="1500-0")
        await observer.poll_once()
        assert dead() == ["old-primary"]  # a cursor never reads back
        assert await observer.resync() == 1
        assert dead() == ["old-primary", "new-primary"]
        assert await observer.resync() == 0  # each entry written once
    finally:
        await redis.delete(keys.dead, keys.audit)
        await redis.aclose()
        await observer.stop()
