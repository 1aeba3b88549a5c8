"""A canary resume of a recurring schedule's occurrence (issue 22 C.8: "works with a scheduled
or selected hold alike"): the schedule's ``canaries``/``canary_for`` release the occurrence's
hold on the canaries only, for that occurrence only; garbage in them holds every replica; the
CLI's ``resume --hold NAME --canary N`` names the one it releases, ``--promote`` ends the
occurrence, a soak that sees failed runs puts the hold back, and a schedule with no occurrence
in force is refused saying when the next one starts. Real Redis, real controllers on their own
clocks, real ``fleetgate-replica`` processes."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from cpkit import Replica, until

from coordinator import Fleet
from coordinator.cli.occurrence import settle
from coordinator.fleet.canary import CanarySpec, Verdict
from coordinator.fleet.occurrence_canary import choose_canaries, occurrence_canary
from coordinator.fleet.overview import status_with_backlog
from coordinator.fleet.schedules import ScheduleConflict
from coordinator.fleet.timeline import read_timeline
from coordinator.render.schedules import occurrence_line, schedule_dict
from replica.contract import Keys, now_utc
from replica.contract.recurrence import Occurrence
from replica.contract.schedules import Schedule
from replica.demo import dependency_key
from tests.apikit import ADMIN, VIEW, auth, strict_json
from tests.fleetkit import run_cli
from tests.fleetkit import until as until_async
from tests.procs import base_env, enqueue, replica_processes

T0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)


def dependency_key_of(fleet: str) -> str:
    """The demo dependency's key of ``fleet`` (``replica.demo.dependency_key``)."""
    class _Ctx:
        keys = Keys(fleet)
    return dependency_key(_Ctx())  # type: ignore[arg-type]


def _occ(start: datetime) -> Occurrence:
    return Occurrence(start, start + timedelta(hours=2), start)


def test_the_canaries_apply_to_their_own_occurrence_only() -> None:
    sch = Schedule("backup", "0 2 * * SUN", 7200, "UTC", "backup", "ops",
                   canaries=("pod-1",), canary_for=T0)
    assert sch.hold(_occ(T0)).canaries == ("pod-1",)
    assert sch.hold(_occ(T0 + timedelta(days=7))).canaries == ()  # the next holds every one
    again = Schedule.from_json("backup", sch.to_json())
    assert again == sch
    assert json.loads(sch.to_json())["canary_for"] == "2026-12-06T02:00:00.000Z"


@pytest.mark.parametrize("fields", [
    {"canaries": "pod-1", "canary_for": "2026-12-06T02:00:00.000Z"},
    {"canaries": ["pod 1!"], "canary_for": "2026-12-06T02:00:00.000Z"},
    {"canaries": [7], "canary_for": "2026-12-06T02:00:00.000Z"},
    {"canaries": ["pod-1"], "canary_for": "tuesday"},
    {"canaries": ["pod-1"], "canary_for": 12},
    {"canaries": ["pod-1"]},
    {"canaries": {"pod-1": 1}, "canary_for": None},
])
def test_garbage_in_the_canary_fields_holds_every_replica_and_keeps_the_schedule(
    fields: dict[str, Any],
) -> None:
    good = Schedule("backup", "0 2 * * SUN", 7200, "UTC", "backup", "ops")
    sch = Schedule.from_json("backup", json.dumps({**good.to_dict(), **fields}))
    assert sch.hold(_occ(T0)).canaries == ()


async def _held(reps: list[Replica], name: str) -> dict[str, bool]:
    return {r.id: f"fleet:{name}" in r.pool.holds for r in reps}


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_controllers_release_the_canaries_of_an_occurrence_and_the_next_holds_all_again(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    reps = [await Replica(redis_url, fleet_name, f"pod-{i}", poll_interval=0.2).start()
            for i in range(3)]
    try:
        # every 30 s for 24 s: the steps run inside one occurrence, then the next one comes
        sch = await fleet.add_schedule("cycle", "*/30 * * * * *", 24, "UTC", "cycle", by="ops")

        def roomy() -> bool:  # in an occurrence with time to spare, every replica held
            occ = sch.current_or_next(now_utc())
            return (occ is not None and occ.active(now_utc())
                    and occ.end - now_utc() > timedelta(seconds=14)
                    and all("fleet:cycle" in r.pool.holds for r in reps))
        await until(roomy, timeout=60, what="an occurrence with time to spare")
        records = (await fleet.status()).replicas
        occ = sch.current_or_next(now_utc())
        assert occ is not None
        chosen, live = choose_canaries(fleet_name, sch, occ, records, CanarySpec(1, False))
        assert live == 3 and len(chosen) == 1
        canary = chosen[0]
        _, after, got = await occurrence_canary(fleet, "cycle", "canary", "ops", "try", chosen)
        assert got == occ and after.canaries == (canary,) and after.canary_for == occ.start

        def released() -> bool:
            return all(("fleet:cycle" in r.pool.holds) == (r.id != canary) for r in reps)
        await until(released, what="the canary released, the others held")
        status = await status_with_backlog(fleet)
        hold = {h.name: h for h in status.state.effective_holds()}["cycle"]
        assert hold.canaries == (canary,)

        await occurrence_canary(fleet, "cycle", "rollback", "ops", "bad")
        await until(lambda: all("fleet:cycle" in r.pool.holds for r in reps),
                    what="the hold back on the canary")
        with pytest.raises(ScheduleConflict) as refused:
            await occurrence_canary(fleet, "cycle", "promote", "ops")
        assert refused.value.kind == "no_canary"

        await occurrence_canary(fleet, "cycle", "canary", "ops", "again", chosen)
        await until(released, what="the canary released again")
        await occurrence_canary(fleet, "cycle", "promote", "ops", "fine")
        await until(lambda: not any("fleet:cycle" in r.pool.holds for r in reps),
                    what="the occurrence ended for all")
        entry = (await fleet.schedules()).get("cycle")
        assert entry is not None and entry.ended_early == occ.start and not entry.canaries
        events = await redis.xrange(Keys(fleet_name).audit)
        actions = [f["action"] for _, f in events if f.get("hold") == "cycle"]
        assert actions[-4:] == ["canary_started", "canary_rolled_back", "canary_started",
                                "canary_promoted"]
        started = [f for _, f in events if f.get("action") == "canary_started"]
        assert started[-1]["canaries"] == canary
        assert started[-1]["starts_at"] == entry.to_dict()["ended_early"]

        # the next occurrence holds every replica again
        await until(lambda: all("fleet:cycle" in r.pool.holds for r in reps)
                    and now_utc() >= occ.end, timeout=60, what="the next occurrence")
    finally:
        for r in reps:
            await r.stop()


async def test_garbage_canaries_in_the_hash_hold_the_replica_they_name(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    good = Schedule("always", "*/2 * * * * *", 1.5, "UTC", "tight", "ops")
    await redis.hset(Keys(fleet_name).schedules, "always", json.dumps(
        {**good.to_dict(), "canaries": ["pod-1"], "canary_for": "not a time"}))
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=0.2).start()
    try:
        await until(lambda: rep.pool.holds.get("fleet:always") == "tight", what="the window")
        assert rep.controller._applier.recurring.invalid == 0
    finally:
        await rep.stop()


async def _cli(redis_url: str, fleet: str, *args: str) -> Any:
    t0 = time.monotonic()
    done = await asyncio.to_thread(run_cli, *args, redis_url=redis_url, fleet=fleet,
                                   timeout=180)
    print(f"fleetgate {' '.join(args)}: exit {done.returncode} in "
          f"{time.monotonic() - t0:.1f}s\n{done.stdout}{done.stderr}")
    return done


@pytest.mark.timeout(400)
async def test_the_cli_canary_resumes_a_schedules_occurrence_promotes_and_rolls_back(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path,
) -> None:
    fleet = Fleet(redis, fleet_name)
    env = base_env(redis_url, fleet_name, handler="replica.demo:flaky", max_retries=0,
                   retry_backoff=0)
    async with replica_processes(3, env, tmp_path) as procs:
        ids = {rp.id for rp in procs}

        async def records() -> dict[str, Any]:
            return {r.id: r for r in (await fleet.status()).replicas}

        async def live() -> bool:
            return set(await records()) == ids
        await until_async(live, timeout=60)
        # a window of 23 h every day at this hour and minute: in force for the test's life
        now = now_utc()
        cron = f"{now.minute} {now.hour} * * *"
        await fleet.add_schedule("freeze", cron, timedelta(hours=23), "UTC", "freeze", by="ops")

        async def all_held(name: str) -> bool:
            return all(f"fleet:{name}" in r.holds for r in (await records()).values())
        await until_async(lambda: all_held("freeze"), timeout=60)

        dry = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze", "--canary", "1",
                         "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.startswith("dry run: canary started; fleet ")
        assert "schedule freeze's entry would be written; nothing was" in dry.stdout
        assert "1 released (" in dry.stdout
        assert not (await fleet.schedules()).get("freeze").canaries  # type: ignore[union-attr]

        done = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze", "--canary", "1",
                          "--wait", "--timeout", "60s")
        assert done.returncode == 0, done.stderr
        first = done.stdout.splitlines()[0]
        assert first.startswith("canary resume of schedule freeze's occurrence (from ")
        assert "released on 1 of 3 replicas (" in first
        canary = first.split("replicas (")[1].split(")")[0]
        assert canary in ids
        held = {rid: "fleet:freeze" in r.holds for rid, r in (await records()).items()}
        assert held == {rid: rid != canary for rid in ids}
        status = json.loads((await _cli(redis_url, fleet_name, "status", "--json")).stdout)
        assert status["state"]["holds"]["freeze"]["canaries"] == [canary]

        promoted = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze", "--promote")
        assert promoted.returncode == 0, promoted.stderr
        assert promoted.stdout.startswith("canary resume of schedule freeze promoted")

        async def none_held() -> bool:
            return not any(r.holds for r in (await records()).values())
        await until_async(none_held, timeout=60)
        assert (await fleet.schedules()).get("freeze") is not None  # the schedule stays

        # no occurrence in force now: refused, saying when the next one starts
        refused = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze", "--canary",
                             "1")
        assert refused.returncode == 2
        assert "is not in an occurrence now (its next one starts at " in refused.stderr

        # the dependency goes down: the canary fails its runs and the hold goes back on it
        await fleet.add_schedule("freeze2", cron, timedelta(hours=23), "UTC", "again", by="ops")
        await until_async(lambda: all_held("freeze2"), timeout=60)
        await redis.hset(dependency_key_of(fleet_name), "down", "1")
        await enqueue(redis, fleet_name, 2000)
        bad = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze2", "--canary", "1",
                         "--soak", "30s", "--wait", "--timeout", "60s")
        assert bad.returncode == 8, (bad.stdout, bad.stderr)
        assert "rolled back" in bad.stdout
        assert "failed runs" in bad.stderr or "circuit breaker opened" in bad.stderr
        entry = (await fleet.schedules()).get("freeze2")
        assert entry is not None and not entry.canaries and entry.ended_early is None
        await until_async(lambda: all_held("freeze2"), timeout=60)
        actions = [e["action"] for e in json.loads(
            (await _cli(redis_url, fleet_name, "history", "--json")).stdout)["events"]]
        assert actions[:2] == ["canary_rolled_back", "canary_started"]


async def test_the_timeline_and_the_schedule_list_show_an_occurrences_canary_resume(
    redis: aioredis.Redis, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    now = now_utc()
    await fleet.add_schedule("freeze", f"{now.minute} {now.hour} * * *", timedelta(hours=23),
                             "UTC", "freeze", by="ops")
    _, after, occ = await occurrence_canary(fleet, "freeze", "canary", "alice", "try",
                                            ["pod-1"])
    listed = schedule_dict(after, now_utc())
    assert listed["canaries_in_force"] == ["pod-1"] and listed["canary_for"] is not None
    assert "released on canaries pod-1 (canary resume)" in occurrence_line(after, occ, now_utc())
    await occurrence_canary(fleet, "freeze", "promote", "bob", "fine")
    promoted_at = (await fleet.history(limit=1))[0].at
    line = await read_timeline(redis, fleet_name, now_utc(), hours=24, days=1)
    span = next(s for s in line.spans if s.hold == "freeze" and s.start is not None
                and s.start <= now_utc())
    assert (span.end, span.ended, span.ended_by) == (promoted_at, "promoted", "bob")
    phase = span.extras["canary"]
    assert (phase["replicas"], phase["outcome"], phase["by"]) == (["pod-1"], "promoted", "alice")
    listed = schedule_dict((await fleet.schedules()).get("freeze"), now_utc())  # type: ignore[arg-type]
    assert listed["canaries_in_force"] == [] and listed["active"] is False


async def test_a_selected_holds_past_span_keeps_its_selector(
    redis: aioredis.Redis, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("az failover", by="ops", hold="zone-a", select="zone=eu-west-1a")
    await fleet.resume(by="ops", hold="zone-a")
    events = await redis.xrange(Keys(fleet_name).audit)
    assert events[0][1]["select"] == "zone=eu-west-1a"
    line = await read_timeline(redis, fleet_name, now_utc(), hours=1, days=0)
    span = next(s for s in line.spans if s.hold == "zone-a")
    assert span.ended == "released" and span.extras.get("select") == "zone=eu-west-1a"


async def test_pause_select_json_says_how_many_live_replicas_matched(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    reps = [await Replica(redis_url, fleet_name, f"pod-{i}", poll_interval=0.2,
                          labels={"zone": zone}).start()
            for i, zone in enumerate(("eu-west-1a", "us-east-1a"))]
    try:
        async def both() -> bool:
            return len((await Fleet(redis, fleet_name).status()).replicas) == 2
        await until_async(both)
        done = await _cli(redis_url, fleet_name, "pause", "--hold", "zone-a", "--select",
                          "zone=eu-west-1a", "--reason", "az failover", "--json")
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        assert body["selected"] == {"select": "zone=eu-west-1a", "matched": 1, "live": 2}
        assert body["state"]["holds"]["zone-a"]["select"] == "zone=eu-west-1a"
    finally:
        for r in reps:
            await r.stop()


async def test_the_api_takes_an_occurrence_through_a_canary_resume(
    api: httpx.AsyncClient, redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    base = f"/api/fleets/{fleet_name}/schedules"
    now = now_utc()
    body = {"name": "freeze", "cron": f"{now.minute} {now.hour} * * *", "duration": "23h",
            "timezone": "UTC", "reason": "freeze"}
    later = {**body, "name": "later", "cron": f"{now.minute} {(now.hour + 12) % 24} * * *",
             "duration": "1h"}
    for b in (body, later):
        assert (await api.post(base, json=b, headers=auth(ADMIN))).status_code == 200
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=0.2).start()
    try:
        await until(lambda: "fleet:freeze" in rep.pool.holds, what="the occurrence")
        await until_async(lambda: _live(redis, fleet_name, 1))
        assert (await api.post(f"{base}/freeze/canary", json={"step": "canary", "canary": "1"},
                               headers=auth(VIEW))).status_code == 403
        dry = await api.post(f"{base}/freeze/canary", headers=auth(ADMIN),
                             json={"step": "canary", "canary": "1", "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert strict_json(dry)["replicas"]["release"] == ["pod-1"]
        assert strict_json(dry)["schedule"] == "freeze"
        started = await api.post(f"{base}/freeze/canary", headers=auth(ADMIN),
                                 json={"step": "canary", "canary": "100%", "reason": "try"})
        assert started.status_code == 200, started.text
        got = strict_json(started)
        assert (got["event"], got["canaries"], got["candidates"]) == (
            "canary_started", ["pod-1"], 1)
        assert got["schedule"]["canaries_in_force"] == ["pod-1"]
        await until(lambda: not rep.pool.holds, what="the canary released")
        back = await api.post(f"{base}/freeze/canary", json={"step": "rollback"},
                              headers=auth(ADMIN))
        assert back.status_code == 200 and strict_json(back)["event"] == "canary_rolled_back"
        await until(lambda: "fleet:freeze" in rep.pool.holds, what="the hold back")
        none = await api.post(f"{base}/freeze/canary", json={"step": "promote"},
                              headers=auth(ADMIN))
        assert none.status_code == 409 and strict_json(none)["kind"] == "no_canary"
        idle = await api.post(f"{base}/later/canary", json={"step": "canary", "canary": "1"},
                              headers=auth(ADMIN))
        assert idle.status_code == 409 and strict_json(idle)["kind"] == "not_active"
        assert "its next one starts at " in strict_json(idle)["detail"]
        for bad in ({"step": "canary"}, {"step": "promote", "canary": "1"},
                    {"step": "canary", "canary": "0%"}, {"step": "land"}):
            refused = await api.post(f"{base}/freeze/canary", json=bad, headers=auth(ADMIN))
            assert refused.status_code == 422, (bad, refused.text)
        missing = await api.post(f"{base}/nope/canary", json={"step": "promote"},
                                 headers=auth(ADMIN))
        assert missing.status_code == 404 and strict_json(missing)["kind"] == "unknown"
    finally:
        await rep.stop()


async def _live(redis: aioredis.Redis, fleet: str, n: int) -> bool:
    return len((await Fleet(redis, fleet).status()).replicas) == n


async def test_a_dry_run_of_an_early_end_writes_nothing_and_a_soak_outliving_its_occurrence_says_so(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    now = now_utc()
    await fleet.add_schedule("freeze", f"{now.minute} {now.hour} * * *", timedelta(hours=23),
                             "UTC", "freeze", by="ops")
    await fleet.add_schedule("later", f"{now.minute} {(now.hour + 12) % 24} * * *",
                             timedelta(hours=1), "UTC", "later", by="ops")
    audit = await redis.xlen(Keys(fleet_name).audit)
    dry = await _cli(redis_url, fleet_name, "resume", "--hold", "freeze", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"dry run: schedule ended; fleet {fleet_name} would resume "
                                 "(schedule freeze's entry would be written; nothing was)")
    assert "holds before: freeze (active)" in dry.stdout
    assert await redis.xlen(Keys(fleet_name).audit) == audit
    idle = await _cli(redis_url, fleet_name, "resume", "--hold", "later", "--promote",
                      "--dry-run")
    assert idle.returncode == 2 and "its next one starts at " in idle.stderr

    # a soak whose occurrence ended meanwhile: nothing to promote or put back, said so
    body: dict[str, Any] = {}
    lines: list[str] = []
    quiet = await settle(fleet, "later", "ops", Verdict(True), 1.0, body, lines)
    assert quiet is None and body["occurrence_over"] is True
    assert lines == ["schedule later's occurrence ended during the soak: nothing to promote; "
                     "its next occurrence holds every replica"]
    bad = await settle(fleet, "later", "ops", Verdict(False, "pod-1: 3 failed runs"), 1.0,
                       {}, [])
    assert bad is not None and bad.code == 8
