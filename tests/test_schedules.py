"""Recurring maintenance windows (issue 22 A.1 and A.3): the cron evaluation both sides share
(``replica.contract.recurrence``, ``replica.contract.schedules``), daylight saving in
Europe/Berlin (a window in the hour skipped in spring, one in the hour repeated in autumn),
windows that would overlap their next occurrence refused, and ``fleetgate schedule
add|list|remove`` and ``resume --hold NAME`` on a real Redis: bad input is one line and exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

import pytest
import redis as syncredis

from replica.contract import Keys, now_utc
from replica.contract.recurrence import check_no_overlap, validate_cron, zone
from replica.contract.schedules import (
    MAX_SCHEDULES,
    Schedule,
    next_occurrences,
    occurrences,
    schedules_from_hash,
    with_schedules,
)
from replica.contract.state import FleetState
from replica.errors import ContractError
from tests.clikit import one_line, run

BERLIN = "Europe/Berlin"
SPRING = date(2027, 3, 28)
"""The last Sunday of March 2027: at 02:00 CET clocks go to 03:00 CEST."""
AUTUMN = date(2027, 10, 31)
"""The last Sunday of October 2027: at 03:00 CEST clocks go back to 02:00 CET."""


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# ---------------------------------------------------------------------------- daylight saving


def test_a_window_inside_the_hour_skipped_in_spring_starts_when_that_hour_ends() -> None:
    s = Schedule("nightly", "30 2 * * *", 3600, BERLIN)
    days = occurrences(s, utc(2027, 3, 27), utc(2027, 3, 30))
    by_day = {o.local_start.date(): o for o in days}
    # 02:30 does not exist on that night: 03:00 CEST (01:00 UTC), still one full hour
    spring = by_day[SPRING]
    assert spring.start == utc(2027, 3, 28, 1, 0) and spring.end == utc(2027, 3, 28, 2, 0)
    assert spring.local_start.strftime("%H:%M %Z") == "03:00 CEST"
    # the nights around it: 02:30 local, CET then CEST
    assert by_day[date(2027, 3, 27)].start == utc(2027, 3, 27, 1, 30)
    assert by_day[date(2027, 3, 29)].start == utc(2027, 3, 29, 0, 30)
    assert len(days) == 3  # one per night: none lost, none doubled


def test_a_window_inside_the_hour_repeated_in_autumn_happens_once_at_the_first() -> None:
    s = Schedule("nightly", "30 2 * * *", 7200, BERLIN)
    days = occurrences(s, utc(2027, 10, 30), utc(2027, 11, 2))
    autumn = [o for o in days if o.local_start.date() == AUTUMN]
    assert len(autumn) == 1  # 02:30 comes twice that night; the window once
    (occ,) = autumn
    assert occ.start == utc(2027, 10, 31, 0, 30)  # 02:30 CEST, the first of the two
    assert occ.end == utc(2027, 10, 31, 2, 30)  # two real hours: 03:30 CET on the wall
    assert occ.end.astimezone(zone(BERLIN)).strftime("%H:%M %Z") == "03:30 CET"


def test_a_window_of_every_quarter_hour_counts_real_time_through_both_changes() -> None:
    s = Schedule("q", "*/15 * * * *", 600, BERLIN)
    spring = occurrences(s, utc(2027, 3, 28, 0), utc(2027, 3, 28, 2))
    autumn = occurrences(s, utc(2027, 10, 31, 0), utc(2027, 10, 31, 2))
    for got in (spring, autumn):
        assert len(got) == 8  # 2 real hours, every 15 minutes, whatever the wall clock did
        assert all(b.start - a.start == timedelta(minutes=15) for a, b in pairwise(got))


def test_a_window_that_overlaps_the_next_occurrence_is_refused_also_when_only_dst_does() -> None:
    now = utc(2026, 12, 2)
    with pytest.raises(ContractError, match="overlaps the next occurrence"):
        check_no_overlap("0 * * * *", zone("UTC"), 3600, now)  # touches the next: refused
    check_no_overlap("0 * * * *", zone("UTC"), 3599, now)
    # 01:00 and 03:00: two hours apart, but one hour on the spring night
    check_no_overlap("0 1,3 * * *", zone("UTC"), 5400, now)
    with pytest.raises(ContractError, match="2027-03-28"):
        check_no_overlap("0 1,3 * * *", zone(BERLIN), 5400, now)
    check_no_overlap("0 1,3 * * *", zone(BERLIN), 3000, now)


def test_bad_cron_zone_and_duration_are_refused_by_the_contract() -> None:
    for cron in ("", "0 2 * *", "61 * * * *", "0 2 * * FUNDAY", "x" * 200):
        with pytest.raises(ContractError):
            validate_cron(cron)
    for tz in ("Mars/Olympus", "", "../../etc/passwd", "Europe/Berlin "):
        with pytest.raises(ContractError):
            zone(tz)
    with pytest.raises(ContractError):
        Schedule("x", "0 2 * * *", 0, "UTC")
    with pytest.raises(ContractError):
        Schedule("x", "0 2 * * *", 8 * 86400, "UTC")


def test_skip_starting_and_until_and_an_occurrence_ended_early() -> None:
    s = Schedule("n", "0 2 * * *", 3600, "UTC", starting=utc(2027, 1, 2),
                 until=utc(2027, 1, 6), skip=(date(2027, 1, 4),))
    got = occurrences(s, utc(2027, 1, 1), utc(2027, 2, 1))
    assert [o.start.day for o in got] == [2, 3, 5]
    ended = Schedule("n", "0 2 * * *", 3600, "UTC", ended_early=utc(2027, 1, 3, 2))
    at = utc(2027, 1, 3, 2, 30)
    assert [o.start for o in next_occurrences(ended, at, 2)] == [utc(2027, 1, 4, 2),
                                                                  utc(2027, 1, 5, 2)]
    assert ended.current_or_next(at) == next_occurrences(ended, at, 1)[0]


def test_the_merged_state_is_paused_exactly_during_an_occurrence() -> None:
    s = Schedule("backup", "0 2 * * *", 3600, "UTC", "backup", "ops")
    running = FleetState.initial("orders")
    during, until = with_schedules(running, [s], utc(2027, 1, 3, 2, 30))
    assert during.effectively_paused(utc(2027, 1, 3, 2, 30))
    assert [h.name for h in during.active_holds(utc(2027, 1, 3, 2, 30))] == ["backup"]
    assert until == utc(2027, 1, 3, 3)
    after, _ = with_schedules(running, [s], utc(2027, 1, 3, 3))
    assert not after.effectively_paused(utc(2027, 1, 3, 3))
    assert after.next_transition(utc(2027, 1, 3, 3)) == utc(2027, 1, 4, 2)
    assert with_schedules(running, [], utc(2027, 1, 3))[0] is running


def test_garbage_entries_are_skipped_and_named_and_the_others_read() -> None:
    good = Schedule("good", "0 2 * * *", 60, "UTC")
    found = schedules_from_hash({
        b"good": good.to_json().encode(), b"\xff\xfe": b"{}", b"Bad Name": good.to_json(),
        b"nojson": b"{", b"zone": json.dumps({**good.to_dict(), "timezone": "Nowhere/X"}),
        b"dur": json.dumps({**good.to_dict(), "duration_s": "1h"}),
    })
    assert found.schedules == (good,)
    assert {n for n, _ in found.unreadable} >= {"Bad Name", "nojson", "zone", "dur"}
    assert len(found.unreadable) == 5


# ---------------------------------------------------------------------------- the CLI


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, fleet_name: str) -> Iterator[str]:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("FLEETGATE_FLEET", fleet_name)
    monkeypatch.setenv("USER", "alice")
    yield fleet_name


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    return one_line(err)


ADD = ("schedule", "add", "backup", "--cron", "0 2 * * SUN", "--duration", "2h",
       "--timezone", BERLIN, "--reason", "weekly backup")


def test_schedule_add_list_remove_on_a_real_redis(
    capsys: pytest.CaptureFixture[str], cli_env: str, sync_redis: syncredis.Redis,
) -> None:
    code, out, err = run(capsys, *ADD, "--skip", "2027-01-03")
    assert code == 0, err
    assert "added schedule backup: '0 2 * * SUN' for 2h in Europe/Berlin" in out
    code, out, _ = run(capsys, "schedule", "list", "--json")
    body = json.loads(out)
    (sch,) = body["schedules"]
    assert sch["name"] == "backup" and sch["by"] == "alice" and sch["skip"] == ["2027-01-03"]
    assert len(sch["next"]) == 3
    for occ in sch["next"]:
        start = datetime.fromisoformat(occ["start"])
        local = datetime.fromisoformat(occ["local_start"])
        assert start == local and local.strftime("%a %H:%M") == "Sun 02:00"
        assert local.date() != date(2027, 1, 3)
    code, out, _ = run(capsys, "schedule", "list")
    assert out.count("next ") == 3 and "CET" in out
    audit = sync_redis.xrange(Keys(cli_env).audit)
    assert [e[1]["action"] for e in audit] == ["schedule_added"]
    code, out, _ = run(capsys, "schedule", "remove", "backup")
    assert code == 0 and "removed schedule backup" in out
    assert json.loads(run(capsys, "schedule", "list", "--json")[1])["schedules"] == []
    assert "has no schedule backup" in refused(capsys, "schedule", "remove", "backup")


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--cron", "0 25 * * *", "invalid cron expression"),
    ("--cron", "every sunday", "invalid cron expression"),
    ("--timezone", "Europe/Atlantis", "unknown time zone"),
    ("--duration", "forever", "--duration"),
    ("--duration", "30d", "--duration"),
    ("--skip", "next sunday", "not a date"),
    ("--starting", "tomorrow", "--starting"),
])
def test_a_bad_value_is_one_line_and_exit_2_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str, sync_redis: syncredis.Redis,
    option: str, value: str, says: str,
) -> None:
    argv = list(ADD)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    assert says in refused(capsys, *argv)
    assert not sync_redis.exists(Keys(cli_env).schedules, Keys(cli_env).audit)


def test_an_overlapping_window_a_name_clash_and_the_cap_are_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str, sync_redis: syncredis.Redis,
) -> None:
    line = refused(capsys, "schedule", "add", "hourly", "--cron", "0 * * * *", "--duration",
                   "90m", "--timezone", "UTC", "--reason", "x")
    assert "overlaps the next occurrence" in line
    assert run(capsys, "pause", "--hold", "db", "--reason", "migration")[0] == 0
    line = refused(capsys, "schedule", "add", "db", "--cron", "0 2 * * *", "--duration", "1h",
                   "--timezone", "UTC", "--reason", "x")
    assert "has a hold named db" in line
    for i in range(MAX_SCHEDULES):
        assert run(capsys, "schedule", "add", f"s{i}", "--cron", f"{i} 3 * * *", "--duration",
                   "30s", "--timezone", "UTC", "--reason", "x")[0] == 0
    assert "remove one first" in refused(
        capsys, "schedule", "add", "one-more", "--cron", "0 4 * * *", "--duration", "1m",
        "--timezone", "UTC", "--reason", "x")
    assert sync_redis.hlen(Keys(cli_env).schedules) == MAX_SCHEDULES


def test_resume_hold_of_a_schedule_ends_its_occurrence_and_keeps_the_schedule(
    capsys: pytest.CaptureFixture[str], cli_env: str, sync_redis: syncredis.Redis,
) -> None:
    now = now_utc()
    assert run(capsys, "schedule", "add", "freeze", "--cron", f"{now.minute} {now.hour} * * *",
               "--duration", "23h", "--timezone", "UTC", "--reason", "freeze")[0] == 0
    code, out, err = run(capsys, "resume", "--hold", "freeze", "--reason", "done early")
    assert code == 0, err
    assert "ended the occurrence of schedule freeze" in out and "the schedule stays" in out
    (sch,) = json.loads(run(capsys, "schedule", "list", "--json")[1])["schedules"]
    assert sch["ended_early"] is not None and sch["active"] is False
    assert "is not in an occurrence now" in refused(capsys, "resume", "--hold", "freeze")
    actions = [e[1]["action"] for e in sync_redis.xrange(Keys(cli_env).audit)]
    assert actions == ["schedule_added", "schedule_ended"]
    # a hold that is no schedule resumes as before
    assert "no hold 'other'" in refused(capsys, "resume", "--hold", "other")


def test_the_schedules_of_the_state_are_read_at_every_poll_by_both_sides_alike() -> None:
    # the coordinator's list and a replica's merge come from the same function
    s = Schedule("b", "0 2 * * SUN", 7200, BERLIN)
    at = utc(2027, 3, 28, 1, 30)
    (first,) = next_occurrences(s, at, 1)
    merged, _ = with_schedules(FleetState.initial("f"), [s], at)
    (hold,) = merged.holds or ()
    assert (hold.starts_at, hold.auto_resume_at) == (first.start, first.end)


def test_status_shows_each_schedules_next_occurrence_and_one_in_force(
    capsys: pytest.CaptureFixture[str], cli_env: str,
) -> None:
    assert run(capsys, *ADD)[0] == 0
    now = now_utc()
    assert run(capsys, "schedule", "add", "freeze", "--cron", f"{now.minute} {now.hour} * * *",
               "--duration", "23h", "--timezone", "UTC", "--reason", "freeze")[0] == 0
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "schedule backup (2h '0 2 * * SUN' Europe/Berlin): next " in out
    assert "schedule freeze (23h " in out and "UTC): now " in out
    body = json.loads(run(capsys, "status", "--json")[1])
    by_name = {s["name"]: s for s in body["schedules"]}
    assert by_name["freeze"]["active"] is True and by_name["backup"]["active"] is False
    assert len(by_name["backup"]["next"]) == 3


def test_a_pause_with_a_schedules_name_is_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str, sync_redis: syncredis.Redis,
) -> None:
    assert run(capsys, *ADD)[0] == 0
    line = refused(capsys, "pause", "--hold", "backup", "--reason", "x")
    assert "has a schedule named backup" in line
    # nothing of a change was written: the state hash holds the schedules' marker alone
    assert sync_redis.hkeys(Keys(cli_env).state) == ["schedules_version"]


def test_status_shows_the_fleet_paused_by_an_occurrence_in_force(
    capsys: pytest.CaptureFixture[str], cli_env: str,
) -> None:
    now = now_utc()
    assert run(capsys, "schedule", "add", "freeze", "--cron", f"{now.minute} {now.hour} * * *",
               "--duration", "23h", "--timezone", "UTC", "--reason", "release freeze")[0] == 0
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert " PAUSED " in out and "hold freeze (active): 'release freeze' by alice" in out
    body = json.loads(run(capsys, "status", "--json")[1])
    assert body["state"]["holds"]["freeze"]["status"] == "active"
