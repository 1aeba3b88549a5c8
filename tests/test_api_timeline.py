"""The timeline routes: a fleet's holds over time, rebuilt from a real audit trail written
through ``Fleet.pause``/``resume`` on a real Redis, squared with the state (holds in force now,
planned windows), bounded, garbage skipped and counted, scoped by token, 4xx on bad input."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.spans import Entry, rebuild
from coordinator.fleet.timeline import parse_entry, read_timeline
from coordinator.web.api import create_app
from replica.contract import FleetState, Keys, format_time, now_utc, parse_time
from tests.apikit import ADMIN, VIEW, auth, client_for, make_settings
from tests.test_api_fleets import ORDERS_DASH, tokens_file


async def timeline(api: httpx.AsyncClient, fleet: str, query: str = "", token: str = VIEW
                   ) -> dict[str, Any]:
    response = await api.get(f"/api/fleets/{fleet}/timeline{query}", headers=auth(token))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def at(value: str | None) -> datetime:
    parsed = parse_time(value)
    assert parsed is not None
    return parsed


async def audit_times(fleet: Fleet) -> dict[tuple[str, str], str]:
    """(action, hold) -> the entry's ``at``, from the fleet's own history."""
    return {(e.action, e.hold): format_time(e.at) for e in await fleet.history(limit=100)}


async def test_spans_are_rebuilt_from_the_audit_trail_with_who_why_and_how_long(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("db failover", by="alice", hold="db")
    await fleet.pause("payments freeze", by="bob", hold="payments")
    await fleet.resume(by="carol", hold="db")
    await fleet.resume(by="dave", hold="payments", reason="done")
    await fleet.pause("incident 4711", by="erin", hold="incident")  # still in force
    starts = now_utc() + timedelta(hours=2)
    await fleet.pause("kernel upgrade", by="frank", hold="maint", starts_at=starts,
                      auto_resume_after=timedelta(minutes=30))
    times = await audit_times(fleet)
    async with client_for(create_app(make_settings(redis_url, fleet_name), run_watcher=False)
                          ) as api:
        body = await timeline(api, fleet_name, "?hours=24&days=7")
    assert (body["fleet"], body["skipped"], body["truncated"]) == (fleet_name, 0, False)
    assert at(body["end"]) - at(body["start"]) == timedelta(hours=24, days=7)
    spans = {s["hold"]: s for s in body["spans"]}
    assert set(spans) == {"db", "payments", "incident", "maint"}
    db, payments = spans["db"], spans["payments"]
    assert (db["start"], db["end"]) == (times[("pause", "db")], times[("hold_released", "db")])
    assert (db["by"], db["reason"], db["ended"], db["ended_by"], db["kind"]) == (
        "alice", "db failover", "released", "carol", "hold")
    assert db["duration_s"] == pytest.approx(
        (at(db["end"]) - at(db["start"])).total_seconds(), abs=0.002)
    assert (payments["start"], payments["end"]) == (
        times[("hold_added", "payments")], times[("resume", "payments")])
    assert (payments["by"], payments["ended_by"], payments["open"]) == ("bob", "dave", False)
    incident = spans["incident"]
    assert (incident["start"], incident["end"], incident["open"]) == (
        times[("pause", "incident")], None, True)
    maint = spans["maint"]
    assert (maint["kind"], maint["start"], maint["end"], maint["by"], maint["reason"]) == (
        "window", format_time(starts), format_time(starts + timedelta(minutes=30)), "frank",
        "kernel upgrade")
    assert maint["open"] is False and maint["duration_s"] == 1800


async def test_a_span_open_at_the_left_edge_or_still_open_now_is_drawn_as_such(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    """The trail read from an hour before a ``now`` two hours ahead: the release of ``old`` is
    in it, its pause is not (its start is unknown: null); ``held``, in force, began before the
    left edge (its start is the state's ``since``); ``short`` ended by itself at its
    ``auto_resume_at`` with no watcher running, and ``gone`` was never seen by the trail."""
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("held for ever", by="ops", hold="held")
    await fleet.pause("brief", by="ops", hold="short", auto_resume_after=1.0)
    await fleet.pause("old one", by="ops", hold="old")
    # the pause of "old" two hours back: its entry rewritten with an older id and time
    [(_, fields)] = await redis.xrevrange(keys.audit, count=1) or []
    assert fields
    await redis.delete(keys.audit)
    early = now_utc() - timedelta(hours=2)
    rewritten: dict[Any, Any] = {**dict(fields), "at": format_time(early)}
    await redis.xadd(keys.audit, rewritten,
                     id=f"{int(early.timestamp() * 1000)}-0")
    await fleet.resume(by="ops", hold="old")
    released = format_time((await fleet.history(limit=1))[0].at)
    state = await fleet.state()
    since = {h.name: h.since or now_utc() for h in state.effective_holds()}

    now = now_utc()
    line = (await read_timeline(redis, fleet_name, now, hours=1, days=1)).to_dict()
    spans = {s["hold"]: s for s in line["spans"]}
    assert (spans["old"]["start"], spans["old"]["end"], spans["old"]["by"]) == (
        None, released, "ops")
    assert spans["old"]["duration_s"] is None  # how long is unknown: it began before

    whole = (await read_timeline(redis, fleet_name, now, hours=3, days=1)).to_dict()
    old = {s["hold"]: s for s in whole["spans"]}["old"]
    assert (old["start"], old["end"], old["reason"]) == (format_time(early), released, "old one")

    later = now + timedelta(hours=2)
    ahead = (await read_timeline(redis, fleet_name, later, hours=1, days=1)).to_dict()
    spans = {s["hold"]: s for s in ahead["spans"]}
    assert set(spans) == {"held"}  # the others ended before this left edge
    held = spans["held"]
    assert at(held["start"]) < at(ahead["start"]) and held["start"] == format_time(since["held"])
    assert (held["end"], held["open"]) == (None, True)
    assert held["duration_s"] == pytest.approx((later - since["held"]).total_seconds(), abs=0.01)

    soon = (await read_timeline(redis, fleet_name, now + timedelta(seconds=5), hours=1, days=1))
    short = {s.hold: s for s in soon.spans}["short"]
    assert (short.end, short.ended) == (short.until, "auto")


async def test_garbage_entries_are_skipped_and_counted_and_the_read_is_capped(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("first", by="ops", hold="one")
    stamp = format_time(now_utc())
    for garbage in ({"junk": "1"}, {"action": "Explode!", "at": stamp},
                    {"action": "pause", "hold": "db", "at": "yesterday"},
                    {"action": "pause", "hold": "Not A Hold!", "at": stamp},
                    {"action": "pause", "hold": b"\xff\xfe", "at": stamp},
                    {"action": "hold_scheduled", "hold": "x", "at": stamp}):
        await redis.xadd(keys.audit, garbage)  # type: ignore[arg-type]
    for known in ({"action": "restore", "by": "r-1", "at": stamp},  # no span, no garbage
                  {"action": "schedule_added", "hold": "nightly", "at": stamp, "cron": "0 2 * * *"},
                  {"action": "limit_set", "hold": "", "at": stamp},
                  {"action": "of_a_later_release", "hold": "x", "at": stamp}):
        await redis.xadd(keys.audit, known)  # type: ignore[arg-type]
    await fleet.resume(by="ops", hold="one")
    await fleet.pause("second", by="ops", hold="two")
    now = now_utc()
    line = await read_timeline(redis, fleet_name, now, hours=24, days=7)
    assert line.skipped == 6
    assert [(s.hold, s.ended) for s in line.spans] == [("one", "released"), ("two", "")]

    capped = await read_timeline(redis, fleet_name, now, hours=24, days=7, cap=2)
    assert capped.truncated
    assert capped.audit_from == (await fleet.history(limit=2))[1].at
    assert [s.hold for s in capped.spans] == ["two"]  # the one entry of "one" read is cut off


async def test_bad_query_parameters_are_a_422_and_a_fleet_never_seen_a_404(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await Fleet(redis, fleet_name).pause("x", by="ops")
    async with client_for(create_app(make_settings(redis_url, fleet_name), run_watcher=False)
                          ) as api:
        for query in ("?hours=0", "?hours=169", "?hours=abc", "?hours=1.5", "?days=-1",
                      "?days=32", "?days=", "?hours=1e9"):
            for path in (f"/api/fleets/{fleet_name}/timeline", "/api/timeline"):
                response = await api.get(path + query, headers=auth(VIEW))
                assert response.status_code == 422, (path, query, response.text)
                assert isinstance(response.json()["detail"], list)
        missing = await api.get(f"/api/fleets/{fleet_name}-nope/timeline", headers=auth(VIEW))
        bad_name = await api.get("/api/fleets/Bad%20Name/timeline", headers=auth(VIEW))
        no_token = await api.get(f"/api/fleets/{fleet_name}/timeline")
        head = await api.head(f"/api/fleets/{fleet_name}/timeline", headers=auth(ADMIN))
    assert missing.status_code == 404 and "no fleet" in missing.json()["detail"]
    assert bad_name.status_code == 422
    assert no_token.status_code == 401
    assert head.status_code == 200


async def test_a_token_sees_the_timelines_of_its_fleets_only_and_an_unreadable_one_says_so(
    private_redis: LocalRedis, tmp_path: Path
) -> None:
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        for name in ("orders", "email", "broken"):
            await Fleet(client, name).pause(f"drill {name}", by="ops")
        await client.delete(Keys("broken").state)
        await client.set(Keys("broken").state, "garbage")  # every read of it fails
        settings = make_settings(private_redis.url, "orders",
                                 tokens_file=tokens_file(tmp_path, "orders", "broken"))
        async with client_for(create_app(settings, run_watcher=False)) as api:
            theirs = await api.get("/api/fleets/email/timeline", headers=auth(ORDERS_DASH))
            mine = await timeline(api, "orders", token=ORDERS_DASH)
            broken = await timeline(api, "broken", token=ORDERS_DASH)
            every = (await api.get("/api/timeline", headers=auth(ORDERS_DASH))).json()
            admin = (await api.get("/api/timeline?hours=2&days=0", headers=auth(ADMIN))).json()
    finally:
        await client.aclose()
    assert theirs.status_code == 403
    assert [s["reason"] for s in mine["spans"]] == ["drill orders"]
    assert "WRONGTYPE" in broken["error"] and "spans" not in broken
    assert [f["fleet"] for f in every["fleets"]] == ["broken", "orders"]  # unreadable first
    assert "error" in every["fleets"][0] and every["errors"] == 1
    assert every["fleets"][1]["spans"][0]["reason"] == "drill orders"
    assert [f["fleet"] for f in admin["fleets"]] == ["broken", "email", "orders"]
    assert at(admin["fleets"][1]["end"]) == at(admin["now"])


def test_a_canary_resume_is_a_phase_of_its_hold_and_a_promotion_ends_it() -> None:
    """The entries ``set_state.lua`` writes for a canary resume (``canaries`` comma-joined):
    rolled back on one hold, promoted on the other (the fleet then runs: no hold in the state)."""
    t0 = now_utc() - timedelta(hours=3)

    def entry(minutes: int, action: str, hold: str, **extra: str) -> Entry:
        at = format_time(t0 + timedelta(minutes=minutes))
        fields = {"action": action, "hold": hold, "by": "ops", "reason": "r", "at": at, **extra}
        parsed = parse_entry((f"{minutes}-0", fields))
        assert parsed is not None
        return parsed

    rebuilt = rebuild([
        entry(0, "pause", "a"), entry(1, "hold_added", "b"),
        entry(10, "canary_started", "a", canaries="r-1,r-2"),
        entry(20, "canary_rolled_back", "a"),
        entry(30, "canary_started", "b", canaries="r-3"),
        entry(40, "canary_promoted", "b"),
        entry(50, "resume", "a"),
    ], FleetState.from_hash("f", {}), now_utc())
    assert rebuilt.skipped == 0
    spans = {s.hold: s.to_dict(now_utc()) for s in rebuilt.spans}
    at = {m: format_time(t0 + timedelta(minutes=m)) for m in (10, 20, 30, 40, 50)}
    assert spans["a"]["canary"] == {"start": at[10], "end": at[20], "outcome": "rolled_back",
                                    "replicas": ["r-1", "r-2"], "by": "ops"}
    assert (spans["a"]["end"], spans["a"]["ended"]) == (at[50], "released")
    assert spans["b"]["canary"]["outcome"] == "promoted"
    assert (spans["b"]["end"], spans["b"]["ended"], spans["b"]["ended_by"]) == (
        at[40], "promoted", "ops")


async def test_a_selected_hold_and_a_promoted_canary_resume_from_real_fleet_calls(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("zone failover", by="alice", hold="zone-a", select="zone=eu-west-1a")
    await fleet.pause("bad build", by="bob", hold="v142", select="version=1.4.2")
    await fleet.resume(by="carol", hold="v142", canary="canary", canaries=["r-1", "r-2"])
    await fleet.resume(by="carol", hold="v142", canary="promote")
    times = await audit_times(fleet)
    async with client_for(create_app(make_settings(redis_url, fleet_name), run_watcher=False)
                          ) as api:
        body = await timeline(api, fleet_name)
    assert body["skipped"] == 0
    spans = {s["hold"]: s for s in body["spans"]}
    zone, v142 = spans["zone-a"], spans["v142"]
    assert (zone["select"], zone["open"]) == ("zone=eu-west-1a", True)
    assert v142["canary"] == {"start": times[("canary_started", "v142")],
                              "end": times[("canary_promoted", "v142")], "outcome": "promoted",
                              "replicas": ["r-1", "r-2"], "by": "carol"}
    assert (v142["end"], v142["ended"], v142["ended_by"]) == (
        times[("canary_promoted", "v142")], "promoted", "carol")
