"""A pause during a switch (issue 12, scenario 3 of section 3): ``SENTINEL FAILOVER`` with the
old primary alive, and a pause issued while the sentinels move the service.

Until the sentinels demote the old primary (REPLICAOF, and ``CLIENT KILL`` of its clients), it
still takes writes, which its demotion then discards. A pause that lands there is lost on the
Redis side. The promise is that it is never lost *silently*: either the change is reported not
confirmed (``fleetgate pause`` exits 4, ``Fleet.pause`` raises ``NotConfirmed``: no Redis
replica has it), or the fleet is paused everywhere afterwards (the replicas that applied it on
the old primary restore it on the new one). Each round fails over away from whichever node is
master, waits a seeded delay after the ``SENTINEL FAILOVER`` answer (the timing under test: the
pause lands before, during or after the switch), pauses, and once the old primary serves the new
one and every replica follows the new primary, checks exactly that disjunction; then resumes.

A CLI pause within the first second (before the sentinels name the new master) and a ``Fleet``
pause until the demotion (its connections stay on the old primary) land on the old primary,
which has no Redis replica any more: nothing to ``WAIT`` for, so "ok", and the fleetgate
replicas, still subscribed there, apply it and restore it on the new primary (counted per
round in the printed outcomes). A later CLI pause goes to the new primary, which the replicas
reach at the demotion.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.exceptions import ResponseError

from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from replica.contract import format_time, now_utc, parse_time
from replica.link.connect import connect
from tests.failoverkit import audit_on, records_on, state_on, until
from tests.fleetkit import run_cli
from tests.hakit import logs, pools
from tests.procs import base_env, replica_processes
from tests.topology import Node, SentinelGroup, sentinel_group_fixture  # noqa: F401 (the fixture)

REPLICAS = 3
SEED = 12
ROUNDS = 4
MAX_DELAY_S = 9.0
"""Measured here: the replica is promoted 0.2 s after the command, the sentinels name it 1.2 s
after, and they demote the old primary (which takes writes until then) about 11 s after. The
delays spread over all three phases."""


def delays(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [0.0, *sorted(round(rng.uniform(0.2, MAX_DELAY_S), 2) for _ in range(ROUNDS - 1))]


def failover_command(group: SentinelGroup) -> bool | None:
    """``SENTINEL FAILOVER`` on the first live sentinel; None while it refuses (no replica good
    enough yet, a failover still in progress)."""
    with group.sentinels[0].client() as c:
        try:
            return True if c.execute_command("SENTINEL", "FAILOVER", group.SERVICE) else None
        except ResponseError as exc:  # -NOGOODSLAVE, -INPROG: ask again
            if "NOGOODSLAVE" in str(exc) or "INPROG" in str(exc):
                return None
            raise


def settled(node: Node, fleet: str, ids: list[str], since: str) -> dict[str, Any] | None:
    """The state on ``node`` once every replica's record there was written after ``since``,
    is connected and applied that state's version (restores included)."""
    state = state_on(node, fleet)
    records = records_on(node, fleet, ids)
    cutoff = parse_time(since)
    assert cutoff is not None
    for r in records.values():
        beat = parse_time(r.get("heartbeat_at"))
        if beat is None or beat <= cutoff or r.get("control") != "connected" \
                or r.get("applied_version") != state.get("version"):
            return None
    return {"state": state, "records": records}


def running(found: dict[str, Any] | None) -> dict[str, Any] | None:
    return found if found is not None and found["state"].get("paused") != "1" else None


async def pause_during_switch(via: str, fleet: Fleet, url: str, reason: str) -> str:
    """Pause through ``via`` (``cli`` or ``fleet``); what the caller was told: ``ok``,
    ``not-confirmed`` or the error."""
    if via == "cli":
        done = await asyncio.to_thread(run_cli, "pause", "--reason", reason, "--redis-url", url,
                                       fleet=fleet.name)
        if done.returncode == 4:
            assert "not confirmed by a replica" in done.stderr
            return "not-confirmed"
        return "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}"
    try:
        await fleet.pause(reason, by="tester")
    except NotConfirmed:
        return "not-confirmed"
    except Exception as exc:  # named in the outcome: the disjunction judges it
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def resume_everywhere(fleet: Fleet) -> None:
    """Resume (through whichever node is master now), confirmed or not."""

    async def once() -> bool | None:
        try:
            await fleet.resume(by="tester")
        except NotConfirmed:
            pass
        except Exception:  # a connection of the old primary, killed at its demotion
            return None
        return True

    async with asyncio.timeout(60):
        while True:
            if await once():
                return
            await asyncio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("via", ["cli", "fleet"])
async def test_a_pause_during_a_sentinel_failover_is_reported_not_confirmed_or_holds_everywhere(
    sentinel_group: SentinelGroup, fleet_name: str, tmp_path: Path, via: str
) -> None:
    url = sentinel_group.url
    env = base_env(url, fleet_name, workers=1, demo_item_seconds=0.05)
    redis = connect(url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)
    outcomes: list[tuple[float, str, bool, int]] = []
    restores = 0
    try:
        async with replica_processes(REPLICAS, env, tmp_path, prefix="sw") as procs, \
                httpx.AsyncClient(timeout=10) as http:
            try:
                ids = [rp.id for rp in procs]
                fleet = Fleet(redis, fleet_name)
                await resume_everywhere(fleet)  # a state hash to start from
                for i, delay in enumerate(delays(SEED + (via == "fleet"))):
                    await asyncio.to_thread(sentinel_group.wait_in_sync)
                    old = sentinel_group.master()
                    await until("the sentinels to accept a failover",
                                lambda: failover_command(sentinel_group))
                    await asyncio.sleep(delay)  # the timing under test, not a synchronisation
                    told = await pause_during_switch(via, fleet, url, f"switch round {i}")
                    new = await asyncio.to_thread(sentinel_group.wait_for_failover, old)
                    since = format_time(now_utc())
                    after = await until(
                        "every replica to follow the new primary",
                        lambda new=new, since=since: settled(new, fleet_name, ids, since))
                    state = after["state"]
                    paused_everywhere = state.get("paused") == "1" and all(
                        r.get("fleet_held") == "1" for r in after["records"].values())
                    if paused_everywhere:
                        held = await pools(http, procs)
                        paused_everywhere = all("fleet" in s["holds"] for s in held)
                    # the pause went to the old primary after the promotion: the replicas that
                    # applied it there put it back (what this round exercised, for the record)
                    seen = sum(e.get("action") == "restore" for e in audit_on(new, fleet_name))
                    outcomes.append((delay, told, paused_everywhere, seen - restores))
                    restores = seen
                    assert told == "not-confirmed" or paused_everywhere, (
                        f"round {i} (pause {delay}s after SENTINEL FAILOVER): the caller was "
                        f"told {told!r} and the fleet is not paused everywhere: {after}")
                    if state.get("paused") == "1":
                        await resume_everywhere(fleet)
                        await until("every replica to follow the resume",
                                    lambda new=new, since=since: running(
                                        settled(new, fleet_name, ids, since)))
                print(f"{via}: (delay, told, paused everywhere, restores) per round: {outcomes}")
            except BaseException:
                print(f"{via}: outcomes so far: {outcomes}")
                print(logs(procs))
                raise
    finally:
        await redis.aclose()
