"""Fleet holds and maintenance windows through the fleetgate CLI, on a real Redis (issue 14).

Every row of the issue's table: ``pause --hold NAME`` adds or updates that hold (``default``
without one), ``resume --hold NAME`` releases that hold only, ``resume`` releases the only hold
there is and with several is refused (exit 2, naming them, nothing changed), ``resume --all``
releases every hold. ``--at`` schedules a hold (an ISO 8601 time or a duration from now).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis as syncredis

from replica.contract import Keys, format_time, now_utc, parse_time
from tests.clikit import one_line, run
from tests.fleetkit import ReplicaThread


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of a command refused with exit 2 that printed nothing."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert out == ""
    return one_line(err)


def status(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(ok(capsys, "status", "--json"))
    return body


def version(sync_redis: syncredis.Redis, fleet: str) -> str | None:
    value: str | None = sync_redis.hget(Keys(fleet).state, "version")
    return value


# ---------------------------------------------------------------------------- the table


def test_pause_without_a_hold_adds_the_hold_named_default(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    out = ok(capsys, "pause", "--reason", "db failover", "--by", "alice")
    assert out.startswith("added hold default; ")
    assert f"fleet {fleet_name} paused by alice: 'db failover'" in out
    holds = status(capsys)["state"]["holds"]
    assert list(holds) == ["default"] and holds["default"]["status"] == "active"


def test_pausing_the_same_hold_again_updates_it(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    since = status(capsys)["state"]["holds"]["db"]["since"]
    out = ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade, take two")
    assert out.startswith(f"updated hold db; fleet {fleet_name} still paused by db (version 2)")
    hold = status(capsys)["state"]["holds"]["db"]
    assert hold["reason"] == "pg upgrade, take two" and hold["since"] == since


def test_resume_of_a_named_hold_releases_only_that_one(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade", "--by", "dba")
    out = ok(capsys, "pause", "--hold", "payments", "--reason", "incident", "--by", "sre")
    assert out.startswith(f"added hold payments; fleet {fleet_name} still paused by db, payments")

    out = ok(capsys, "resume", "--hold", "db", "--by", "dba")
    assert out.startswith(f"released hold db; fleet {fleet_name} still paused by payments")
    state = status(capsys)["state"]
    assert state["paused"] is True and list(state["holds"]) == ["payments"]

    out = ok(capsys, "resume", "--by", "sre")  # the only hold left
    assert out.startswith(f"released hold payments; fleet {fleet_name} resumed by sre")
    state = status(capsys)["state"]
    assert state["paused"] is False and state["holds"] == {}


def test_resume_with_several_holds_is_refused_naming_them_and_changes_nothing(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    ok(capsys, "pause", "--hold", "payments", "--reason", "incident")
    before = version(sync_redis, fleet_name)
    line = refused(capsys, "resume")
    assert "2 holds (db, payments)" in line and "--hold NAME" in line and "--all" in line
    assert version(sync_redis, fleet_name) == before
    assert list(status(capsys)["state"]["holds"]) == ["db", "payments"]


def test_resume_all_releases_every_hold(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    for hold in ("a", "b"):
        ok(capsys, "pause", "--hold", hold, "--reason", f"team {hold}")
    ok(capsys, "pause", "--hold", "later", "--reason", "window", "--at", "3h")
    out = ok(capsys, "resume", "--all", "--json")
    body = json.loads(out)
    assert body["change"]["event"] == "resume"
    assert body["change"]["holds"] == ["a", "b", "later"]
    assert body["state"]["paused"] is False and body["state"]["holds"] == {}


def test_an_unknown_hold_is_refused_naming_the_holds_there_are(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    before = version(sync_redis, fleet_name)
    line = refused(capsys, "resume", "--hold", "dbb")
    assert "no hold 'dbb'" in line and "(holds: db)" in line
    assert version(sync_redis, fleet_name) == before


def test_resume_of_a_fleet_without_holds_changes_nothing(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    out = ok(capsys, "resume")
    assert "nothing to resume" in out
    assert json.loads(ok(capsys, "resume", "--json"))["change"]["event"] == "noop"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["resume", "--hold", "db", "--all"], "give one of them"),
        (["pause", "--reason", "x", "--hold", "Not-A-Name"], "--hold: invalid hold name"),
        (["pause", "--reason", "x", "--hold", ""], "--hold: invalid hold name"),
        (["pause", "--reason", "x", "--at", "2020-01-01T00:00Z"], "is in the past"),
        (["pause", "--reason", "x", "--at", "yesterday"], "ISO 8601 time"),
        (["pause", "--reason", "x", "--at", "2026-13-45T99:00Z"], "ISO 8601 time"),
        (["pause", "--reason", "x", "--at", "2h30"], "--at must be"),
        (["pause", "--reason", "x", "--at", "0s"], "--at must be between"),
        (["pause", "--reason", "x", "--at", "2h", "--auto-resume"], "--auto-resume needs --for"),
    ],
)
def test_bad_hold_options_exit_2_with_one_line_and_change_nothing(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str, sync_redis: syncredis.Redis,
    argv: list[str], says: str,
) -> None:
    line = refused(capsys, *argv)
    assert says in line, line
    assert version(sync_redis, fleet_name) is None


# ---------------------------------------------------------------------------- windows


def test_a_maintenance_window_at_an_iso_time_is_scheduled_shown_and_cancelled(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    start = (now_utc() + timedelta(hours=5)).replace(second=0, microsecond=0)
    at = start.strftime("%Y-%m-%dT%H:%MZ")
    out = ok(capsys, "pause", "--hold", "dbmaint", "--reason", "pg 16 upgrade", "--at", at,
             "--for", "30m", "--auto-resume")
    end = start + timedelta(minutes=30)
    assert out.startswith(f"scheduled hold dbmaint for {format_time(start)} until "
                          f"{format_time(end)}; fleet {fleet_name} still running")
    state = status(capsys)["state"]
    hold = state["holds"]["dbmaint"]
    assert state["paused"] is False
    assert hold["status"] == "scheduled" and hold["reason"] == "pg 16 upgrade"
    assert parse_time(hold["starts_at"]) == start
    assert parse_time(hold["auto_resume_at"]) == end == parse_time(hold["expected_until"])

    text = ok(capsys, "status")
    assert "hold dbmaint (scheduled): 'pg 16 upgrade'" in text
    assert f"scheduled for {format_time(start)}" in text and f"ends at {format_time(end)}" in text

    out = ok(capsys, "resume", "--hold", "dbmaint")
    assert out.startswith(f"cancelled scheduled hold dbmaint; fleet {fleet_name} still running")
    assert status(capsys)["state"]["holds"] == {}


def test_at_takes_a_duration_from_now(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    before = now_utc()
    body = json.loads(ok(capsys, "pause", "--hold", "soon", "--reason", "r", "--at", "2h",
                         "--for", "10m", "--json"))
    assert body["change"]["event"] == "hold_scheduled" and body["change"]["scheduled"] == ["soon"]
    starts = parse_time(body["state"]["holds"]["soon"]["starts_at"])
    assert starts is not None
    assert timedelta(hours=2) <= starts - before < timedelta(hours=2, minutes=1)
    assert parse_time(body["state"]["holds"]["soon"]["expected_until"]) == starts + timedelta(minutes=10)
    assert body["state"]["holds"]["soon"]["auto_resume_at"] is None


def test_status_lists_active_and_scheduled_holds(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade", "--by", "dba", "--for", "1h")
    ok(capsys, "pause", "--hold", "later", "--reason", "window", "--at", "4h")
    text = ok(capsys, "status")
    assert "hold db (active): 'pg upgrade' by dba, since " in text
    assert "expected until " in text
    assert "hold later (scheduled): 'window'" in text
    holds = status(capsys)["state"]["holds"]
    assert {n: h["status"] for n, h in holds.items()} == {"db": "active", "later": "scheduled"}


def test_history_shows_the_hold_of_each_entry(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    ok(capsys, "pause", "--hold", "w", "--reason", "window", "--at", "1h", "--for", "10m",
       "--auto-resume")
    ok(capsys, "resume", "--hold", "db")  # the fleet runs: w has not started
    events = json.loads(ok(capsys, "history", "--json"))["events"]
    assert [(e["action"], e["hold"]) for e in events] == [
        ("resume", "db"), ("hold_scheduled", "w"), ("pause", "db"),
    ]
    text = ok(capsys, "history")
    assert "hold" in text.splitlines()[0]
    assert "hold_scheduled" in text and "w (from " in text


@pytest.fixture
def kit(env: None, redis_url: str, fleet_name: str) -> Iterator[ReplicaThread]:
    thread = ReplicaThread(redis_url, fleet_name, 2)
    with thread:
        yield thread


def test_wait_with_a_future_window_waits_for_every_replica_to_have_it_and_keeps_them_running(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    body = json.loads(ok(capsys, "pause", "--hold", "w", "--reason", "window", "--at", "1h",
                         "--wait", "--json"))
    report = body["wait"]
    assert report["ok"] is True and report["action"] == "resume"
    assert sorted(r["id"] for r in report["replicas"] if r["reached"]) == ["r1", "r2"]
    assert kit.kit is not None
    for r in kit.kit.replicas:
        assert kit.call(lambda r=r: r.pool.holds.get("fleet")) is None
        assert kit.call(lambda r=r: r.controller.applied_version) == body["state"]["version"]


def test_hold_options_pass_through_a_change_of_several_fleets(
    env: None, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    other = f"{fleet_name}-b"
    fleets = ["--fleet", fleet_name, "--fleet", other]
    ok(capsys, "pause", *fleets, "--hold", "db", "--reason", "pg upgrade")
    ok(capsys, "pause", *fleets, "--hold", "ops", "--reason", "ops")
    rows = json.loads(ok(capsys, "resume", *fleets, "--hold", "db", "--json"))
    assert [r["fleet"] for r in rows] == [fleet_name, other]
    for row in rows:
        assert row["ok"] is True and list(row["state"]["holds"]) == ["ops"]
    ok(capsys, "pause", *fleets, "--hold", "db", "--reason", "pg upgrade, again")
    code, out, err = run(capsys, "resume", *fleets)  # two holds in each: refused in each
    assert code == 2, out
    line = one_line(err)
    assert line.count("2 holds (db, ops)") == 2
    for fleet in (fleet_name, other):
        assert sorted(json.loads(ok(capsys, "--fleet", fleet, "status", "--json"))["state"]["holds"]) == ["db", "ops"]
