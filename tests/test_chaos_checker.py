"""The chaos checker on hand-made histories: a clean one holds every rule, and each rule is
broken by a history made to break it (so the checker is proven to catch what it claims)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.chaos.checker import KNOWN, CheckResult, check
from bench.chaos.history import HistoryWriter, read_history
from bench.chaos.report import last_line, table

T = 1_000_000.0
SETTINGS = {"poll_interval": 0.5, "heartbeat_interval": 1.0, "claim_idle": 5.0,
            "item_timeout": 2.0, "max_retries": 1, "renew_interval": 5.0 / 3}


def ev(name: str, when: float, **fields: Any) -> dict[str, Any]:
    """An event ``when`` seconds into the run."""
    return {"ev": name, "t": T + when, **fields}


def start(item: str, replica: str, pid: int, at: float, version: int,
          held: bool = False) -> dict[str, Any]:
    return ev("item-start", at, replica=replica, pid=pid, item=item, kind="ok",
              version=version, held=held)


def end(item: str, replica: str, pid: int, at: float, outcome: str = "ok") -> dict[str, Any]:
    return ev("item-end", at, replica=replica, pid=pid, item=item, outcome=outcome)


def enqueued(item: str, at: float) -> dict[str, Any]:
    return ev("enqueue", at, t0=T + at - 0.01, item=item, kind="ok", entry=f"{item}-0")


def ran(item: str, enqueued_at: float, replica: str, pid: int, at: float, version: int, *,
        held: bool = False, took: float = 0.05, outcome: str = "ok") -> list[dict[str, Any]]:
    """An item enqueued, then run once on ``replica``."""
    return [enqueued(item, enqueued_at), start(item, replica, pid, at, version, held),
            end(item, replica, pid, at + took, outcome)]


def record(replica: str, at: float, version: int, applied_at: float,
           held: bool) -> dict[str, Any]:
    return ev("record", at, replica=replica, applied_version=version, applied_at=T + applied_at,
              heartbeat_at=T + at, fleet_held=held, quiet=held, in_flight=0,
              control="connected")


def ack(replica: str, at: float, version: int, held: bool) -> dict[str, Any]:
    return ev("ack", at, replica=replica, version=version, event="applied", at=T + at,
              fleet_held=held, quiet=held, in_flight=0)


def fault(fid: int, kind: str, target: str, at: float, until: float,
          pid: int | None = None, **params: Any) -> list[dict[str, Any]]:
    extra = {} if pid is None else {"pid": pid}
    return [ev("fault-start", at, id=fid, kind=kind, target=target, params=params, **extra),
            ev("fault-end", until, id=fid, kind=kind, target=target)]


def clean() -> list[dict[str, Any]]:
    """Two replicas, three items, a pause waited for, a resume, a settled fleet, clean exits."""
    return [
        ev("run", 0.0, seed=7, duration=5, topology="single", fleet="chaos",
           replicas=["r1", "r2"], settings=SETTINGS),
        ev("spawn", 0.1, replica="r1", pid=11), ev("spawn", 0.1, replica="r2", pid=12),
        ev("healthy", 0.5, replica="r1", pid=11), ev("healthy", 0.5, replica="r2", pid=12),
        record("r1", 0.6, 0, 0.55, False), record("r2", 0.6, 0, 0.55, False),
        enqueued("i1", 1.0), enqueued("i2", 1.1),
        start("i1", "r1", 11, 1.2, 0), end("i1", "r1", 11, 1.25),
        start("i2", "r2", 12, 1.3, 0), end("i2", "r2", 12, 1.35),
        ev("change", 2.005, via="control", version=1, paused=True, changed_at=T + 2.0,
           auto_resume_at=None, stagger=0.0),
        ack("r1", 2.01, 1, True), ack("r2", 2.02, 1, True),
        record("r1", 2.01, 1, 2.01, True), record("r2", 2.02, 1, 2.02, True),
        ev("op", 2.06, via="fleet", action="pause", args={"reason": "x", "wait": True},
           t0=T + 2.0, t_change=T + 2.01, result="ok", version=1, paused=True,
           changed_at=T + 2.0, auto_resume_at=None,
           wait={"ok": True, "version": 1, "action": "pause", "elapsed_s": 0.04,
                 "t_lo": T + 2.05, "t_hi": T + 2.06,
                 "replicas": [{"id": "r1", "reached": True, "why": None},
                              {"id": "r2", "reached": True, "why": None}]}),
        ev("change", 3.004, via="control", version=2, paused=False, changed_at=T + 3.0,
           auto_resume_at=None, stagger=0.0),
        ev("op", 3.02, via="cli", action="resume", args={"wait": False}, t0=T + 2.5,
           result="ok", exit=0, stderr="", version=2, paused=False, changed_at=T + 3.0,
           auto_resume_at=None),
        ack("r1", 3.01, 2, False), ack("r2", 3.011, 2, False),
        record("r1", 3.01, 2, 3.01, False), record("r2", 3.011, 2, 3.011, False),
        enqueued("i3", 3.1),
        start("i3", "r1", 11, 3.2, 2), end("i3", "r1", 11, 3.25),
        ev("settled", 4.0, phase="healed",
           state={"version": 2, "paused": False, "changed_at": T + 3.0,
                  "auto_resume_at": None, "stagger": 0.0, "effectively_paused": False},
           replicas=[{"id": "r1", "applied_version": 2, "fleet_held": False, "stale": False},
                     {"id": "r2", "applied_version": 2, "fleet_held": False, "stale": False}]),
        ev("exit", 5.0, replica="r1", pid=11, status=0, killed=False, stopping=True),
        ev("exit", 5.0, replica="r2", pid=12, status=0, killed=False, stopping=True),
        ev("run-end", 5.1, phase="done"),
    ]


def broken_rules(result: CheckResult) -> list[int]:
    return [n for n, r in sorted(result.rules.items()) if not r.held]


def find(events: list[dict[str, Any]], name: str, **match: Any) -> dict[str, Any]:
    return next(e for e in events
                if e["ev"] == name and all(e.get(k) == v for k, v in match.items()))


# ---------------------------------------------------------------------------- a clean run


def test_a_clean_history_holds_every_rule_and_its_last_line_says_ok() -> None:
    result = check(clean())
    assert broken_rules(result) == [] and result.ok
    assert result.items == 3 and result.done == 3 and result.lost == 0
    assert all(r.checked > 0 for r in result.rules.values())
    assert last_line(result, 7, 5, "single") == (
        "chaos: seed=7 duration=5s topology=single faults=0 items=3 lost=0 "
        "starts-after-apply=0 duplicates=0 (explained 0) wait-lies=0: ok")
    assert any("rule 6: wait never lies" in line and "held" in line for line in table(result))


def test_the_worst_propagation_is_measured_from_the_change_becoming_readable() -> None:
    result = check(clean())
    assert result.worst_propagation is not None
    delay, where = result.worst_propagation
    assert delay == pytest.approx(0.015, abs=0.001) and where == "r2 v1"


# ---------------------------------------------------------------------------- rule 1


def test_an_item_that_starts_while_its_replica_holds_a_pause_breaks_rule_1() -> None:
    events = [*clean(), *ran("i9", 2.1, "r2", 12, 2.5, 1, held=True)]
    result = check(events)
    assert broken_rules(result) == [1] and not result.ok
    assert result.starts_after_apply == 1
    assert result.rules[1].first is not None and "item i9 started on r2" in result.rules[1].first
    assert last_line(result, 7, 5, "single").endswith("starts-after-apply=1 duplicates=0 "
                                                      "(explained 0) wait-lies=0: failed")


# ---------------------------------------------------------------------------- rule 2


def late_r2() -> list[dict[str, Any]]:
    """r2 applies the pause 0.9 s after it became readable (the limit is 0.6 s)."""
    events = [e for e in clean() if not (e["ev"] in ("ack", "record") and e["replica"] == "r2"
                                         and e.get("version", e.get("applied_version")) == 1)]
    events.remove(find(events, "op", action="pause"))
    events.append(record("r2", 2.905, 1, 2.9, True))
    return events


def test_a_replica_that_applies_a_change_after_poll_interval_plus_100ms_breaks_rule_2() -> None:
    result = check(late_r2())
    assert broken_rules(result) == [2]
    assert result.rules[2].first is not None
    assert result.rules[2].first.startswith("r2 (pid 12) applied v1 at t+2.900s")


def test_a_replica_that_shows_an_older_version_after_the_deadline_breaks_rule_2() -> None:
    events = [*late_r2(), *ran("i8", 1.5, "r2", 12, 2.7, 0)]
    result = check(events)
    assert 2 in broken_rules(result)
    assert result.rules[2].first is not None and "still had v0" in result.rules[2].first


def test_a_late_apply_inside_the_replicas_own_freeze_is_excused() -> None:
    events = late_r2() + fault(1, "freeze", "r2", 1.8, 2.8, pid=12, long=False)
    assert broken_rules(check(events)) == []


def test_a_late_apply_while_the_replicas_link_is_cut_is_excused_whichever_life_it_hit() -> None:
    events = late_r2() + fault(1, "link", "r2", 1.8, 2.8, pid=99, mode="blackhole")
    assert broken_rules(check(events)) == []


def test_a_late_apply_after_a_pubsub_kill_is_not_excused() -> None:
    events = late_r2() + fault(1, "pubsub-kill", "fleet", 1.9, 1.95, times=1)
    assert broken_rules(check(events)) == [2]


def test_a_replica_that_was_not_up_yet_at_the_change_is_not_judged() -> None:
    events = late_r2()
    find(events, "healthy", replica="r2")["t"] = T + 2.5
    assert 2 not in broken_rules(check(events))


# ---------------------------------------------------------------------------- rule 3


def test_an_item_never_done_nor_dead_lettered_is_lost_and_breaks_rule_3() -> None:
    events = [*clean(), enqueued("i4", 3.5)]
    result = check(events)
    assert broken_rules(result) == [3] and result.lost == 1
    assert result.rules[3].first is not None and "item i4" in result.rules[3].first


def test_an_item_in_the_dead_letter_stream_with_its_error_is_accounted_for() -> None:
    events = [*clean(), *ran("i4", 3.5, "r1", 11, 3.6, 2, outcome="error"),
              ev("dead", 3.7, item="i4", error="ToldToFail: chaos: item i4 was told to fail",
                 runs="2", replica="r1", entry="i4-0")]
    result = check(events)
    assert broken_rules(result) == [] and result.dead == 1


def test_a_dead_letter_without_its_error_does_not_account_for_an_item() -> None:
    events = [*clean(), enqueued("i4", 3.5),
              ev("dead", 3.7, item="i4", error="", runs="2", replica="r1", entry="i4-0")]
    assert broken_rules(check(events)) == [3]


def wiped(items: list[str] | None, last: str | None) -> list[dict[str, Any]]:
    """i4 (entry i4-0) enqueued at 3.5, then Redis restarted empty at 3.6, its work stream read
    just before: ``items`` it held then (None: it did not answer), ``last`` its last entry."""
    events = [*clean(), enqueued("i4", 3.5),
              *fault(1, "redis-restart", "redis", 3.6, 3.9, mode="empty"),
              ev("wiped", 3.61, id=1, items=items, last=last, read_at=T + 3.605)]
    find(events, "enqueue", item="i4")["entry"] = "1000-0"
    return events


def test_an_item_the_work_stream_held_when_redis_restarted_empty_is_forgotten_not_lost() -> None:
    result = check(wiped(["i4"], "1000-0"))
    assert 3 not in broken_rules(result) and result.forgotten == 1 and result.lost == 0


def test_an_item_enqueued_after_the_stream_was_read_for_the_wipe_is_forgotten_too() -> None:
    assert check(wiped([], "999-0")).forgotten == 1
    assert check(wiped(None, None)).forgotten == 1  # the stream could not be read


def test_an_item_missing_from_the_stream_before_an_empty_restart_is_still_lost() -> None:
    result = check(wiped(["i1"], "1001-0"))
    assert broken_rules(result) == [3] and result.lost == 1


def duplicated(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """i1, completed by r1 at 1.25, runs again on r2 at 4.5."""
    return [*clean(), start("i1", "r2", 12, 4.5, 2), end("i1", "r2", 12, 4.55), *extra]


def test_an_unexplained_second_completion_breaks_rule_3() -> None:
    result = check(duplicated())
    assert broken_rules(result) == [3] and result.unexplained == 1
    assert result.rules[3].first is not None and "completed twice" in result.rules[3].first
    assert last_line(result, 7, 5, "single").endswith(
        "duplicates=1 (explained 0) wait-lies=0: failed")


def test_a_duplicate_after_the_completing_replica_was_killed_is_explained_by_the_kill() -> None:
    events = duplicated(ev("exit", 1.3, replica="r1", pid=11, status=-9, killed=True),
                        ev("spawn", 2.0, replica="r1", pid=21),
                        ev("healthy", 2.4, replica="r1", pid=21))
    # what r1 did after it died is its new life's
    for e in events:
        if e.get("pid") == 11 and e["ev"] in ("item-start", "item-end") and e["t"] > T + 2:
            e["pid"] = 21
    events.remove(find(events, "exit", pid=11, status=0))
    result = check(events)
    assert 3 not in broken_rules(result) and result.duplicates["kill"] == 1


def test_a_duplicate_during_a_freeze_past_the_claim_idle_time_is_explained_by_it() -> None:
    events = duplicated(*fault(1, "freeze", "r1", 1.22, 7.0, pid=11, long=True))
    result = check(events)
    assert 3 not in broken_rules(result) and result.duplicates["freeze"] == 1


def test_a_freeze_shorter_than_the_claim_idle_time_does_not_explain_a_duplicate() -> None:
    events = duplicated(*fault(1, "freeze", "r1", 1.22, 3.0, pid=11, long=False))
    result = check(events)
    assert 3 in broken_rules(result) and result.unexplained == 1


def test_a_duplicate_after_the_link_was_black_holed_is_a_lost_acknowledgement() -> None:
    events = duplicated(*fault(1, "link", "r1", 1.26, 4.0, pid=11, mode="blackhole"))
    result = check(events)
    assert 3 not in broken_rules(result) and result.duplicates["lost-ack"] == 1


# ---------------------------------------------------------------------------- rule 4


def test_a_replica_whose_applied_version_goes_back_breaks_rule_4() -> None:
    events = [*clean(), *ran("i5", 3.3, "r1", 11, 3.5, 1)]
    result = check(events)
    assert 4 in broken_rules(result)
    assert result.rules[4].first is not None and "had v2" in result.rules[4].first


def restored_pause(restore: bool) -> list[dict[str, Any]]:
    """Redis restarts empty after the resume (v2); r2, stale, puts the pause (v1) back; r1
    applies that older pause over its newer running state (the defect the restore's raised
    version fixed)."""
    events = [*clean(), *fault(1, "redis-restart", "redis", 3.3, 3.5, mode="empty"),
              ack("r1", 3.7, 1, True), ack("r1", 3.9, 2, False)]
    if restore:
        events.append(ev("audit", 3.65, action="restore", version=1, at=T + 3.6, by="r2",
                         reason="state hash was missing or older"))
    return events


def test_an_older_restored_pause_winning_over_a_newer_running_state_breaks_rule_4() -> None:
    assert 4 not in KNOWN
    for restore in (True, False):
        result = check(restored_pause(restore=restore))
        assert 4 in broken_rules(result) and result.rules[4].known == 0
        assert result.rules[4].first is not None and "had v2" in result.rules[4].first


def test_a_new_life_that_starts_at_an_older_version_does_not_break_rule_4() -> None:
    events = [*clean(), ev("exit", 3.3, replica="r2", pid=12, status=-9, killed=True),
              ev("spawn", 3.4, replica="r2", pid=22), ev("healthy", 3.8, replica="r2", pid=22),
              record("r2", 3.9, 0, 3.85, False), record("r2", 3.95, 2, 3.93, False)]
    events.remove(find(events, "exit", pid=12, status=0))
    assert 4 not in broken_rules(check(events))


# ---------------------------------------------------------------------------- rule 5


def test_a_replica_that_settles_on_another_state_than_the_last_action_breaks_rule_5() -> None:
    events = clean()
    snap = find(events, "settled")
    snap["replicas"][1].update(applied_version=1, fleet_held=True)
    result = check(events)
    assert broken_rules(result) == [5]
    assert result.rules[5].first is not None and "r2 has v1 (held)" in result.rules[5].first


def test_after_a_restore_the_replicas_settle_on_the_restored_state() -> None:
    events = clean()
    snap = find(events, "settled")
    snap["state"].update(version=1, paused=True, effectively_paused=True)
    for rep in snap["replicas"]:
        rep.update(applied_version=1, fleet_held=True)
    assert 5 in broken_rules(check(copy.deepcopy(events)))
    events.append(ev("audit", 3.5, action="restore", version=1, at=T + 3.5, by="r1",
                     reason="restored"))
    assert 5 not in broken_rules(check(events))


def test_a_pause_whose_auto_resume_passed_settles_running() -> None:
    events = clean()
    pause = find(events, "op", action="pause")
    pause.update(auto_resume_at=T + 2.5)
    find(events, "change", version=1)["auto_resume_at"] = T + 2.5
    events.remove(find(events, "op", action="resume"))
    events.remove(find(events, "change", version=2))
    snap = find(events, "settled")
    snap["state"].update(version=1, paused=True, effectively_paused=False)
    for rep in snap["replicas"]:
        rep.update(applied_version=1, fleet_held=False)
    assert 5 not in broken_rules(check(events))
    for rep in snap["replicas"]:
        rep["fleet_held"] = True
    assert 5 in broken_rules(check(events))


# ---------------------------------------------------------------------------- rule 6


def test_a_wait_that_said_ok_while_a_replica_had_an_item_in_flight_breaks_rule_6() -> None:
    events = [*clean(), *ran("i6", 1.5, "r2", 12, 1.9, 0, took=0.6)]
    result = check(events)
    assert broken_rules(result) == [6] and result.wait_lies == 1 and not result.ok
    assert result.rules[6].first is not None and "had item i6 in flight" in result.rules[6].first
    assert last_line(result, 7, 5, "single").endswith("wait-lies=1: failed")
    assert any("rule 6" in line and "had item i6" in line for line in table(result))


def test_a_wait_that_said_ok_while_a_replica_was_frozen_through_it_breaks_rule_6() -> None:
    events = [e for e in clean() if not (e["ev"] in ("ack", "record") and e["replica"] == "r2"
                                         and 2.0 < e["t"] - T < 3.0)]
    events += fault(1, "freeze", "r2", 1.5, 2.8, pid=12, long=False)
    result = check(events)
    assert 6 in broken_rules(result)
    assert result.rules[6].first is not None and "was frozen" in result.rules[6].first


def test_a_wait_that_said_ok_before_a_replica_applied_the_version_breaks_rule_6() -> None:
    events = [e for e in clean() if not (e["ev"] in ("ack", "record") and e["replica"] == "r2"
                                         and 2.0 < e["t"] - T < 3.0)]
    events.append(record("r2", 2.205, 1, 2.2, True))
    result = check(events)
    assert broken_rules(result) == [6]
    assert result.rules[6].first is not None and "applied v1 at" in result.rules[6].first


def forgotten_by_redis(restart: bool) -> list[dict[str, Any]]:
    """r2 (healthy since 0.5) does not reach the pause of v1 and starts an item at v0 after
    the wait said ok listing only r1; with ``restart``, Redis restarted empty just before the
    change (losing r2's record) and r2, its link slow, had not registered again."""
    events = [e for e in clean() if not (e["ev"] in ("ack", "record") and e["replica"] == "r2"
                                         and 2.0 < e["t"] - T < 3.0)]
    wait = find(events, "op", action="pause")["wait"]
    wait["replicas"] = [rep for rep in wait["replicas"] if rep["id"] == "r1"]
    events += ran("i6", 2.1, "r2", 12, 2.2, 0)
    if restart:
        events += fault(1, "redis-restart", "redis", 1.6, 1.8, mode="empty")
    return events


def test_a_wait_that_said_ok_after_an_empty_restart_without_a_replica_redis_forgot_breaks_rule_6(
) -> None:
    assert KNOWN == {}
    for restart in (True, False):
        result = check(forgotten_by_redis(restart=restart))
        assert broken_rules(result) == [6] and not result.ok
        assert result.rules[6].known == 0 and result.wait_lies == 1
        assert result.rules[6].first is not None and "still had v0" in result.rules[6].first


def test_a_wait_that_said_not_ok_after_an_empty_restart_keeps_rule_6() -> None:
    events = forgotten_by_redis(restart=True)
    find(events, "op", action="pause")["wait"]["ok"] = False  # redis_lost_at: not ok
    result = check(events)
    assert 6 not in broken_rules(result) and result.rules[6].known == 0


# ---------------------------------------------------------------------------- rule 7


def test_a_replica_that_exits_non_zero_unless_killed_by_the_schedule_breaks_rule_7() -> None:
    events = clean()
    find(events, "exit", replica="r2")["status"] = 1
    result = check(events)
    assert broken_rules(result) == [7]
    assert result.rules[7].first is not None and "r2 (pid 12) exited with status 1" in \
        result.rules[7].first
    find(events, "exit", replica="r2").update(status=-9, killed=True)
    assert broken_rules(check(events)) == []


def test_a_cli_call_with_an_undocumented_status_or_a_traceback_breaks_rule_7() -> None:
    events = clean()
    resume = find(events, "op", action="resume")
    resume.update(exit=2)
    assert broken_rules(check(events)) == [7]
    resume.update(exit=1, stderr="Traceback (most recent call last):\n  ...")
    assert broken_rules(check(events)) == [7]
    resume.update(exit=3, stderr="timed out after 2s: 1 of 2 replicas not quiet")
    assert broken_rules(check(events)) == []


# ---------------------------------------------------------------------------- the history


def test_a_history_is_merged_in_time_order_and_a_line_cut_by_a_kill_is_skipped(
    tmp_path: Path,
) -> None:
    with HistoryWriter(tmp_path / "a.jsonl") as a, HistoryWriter(tmp_path / "b.jsonl") as b:
        a.write("x", t=3.0)
        b.write("y", t=1.0, n=1)
        a.write("z", t=2.0)
    with open(tmp_path / "b.jsonl", "a", encoding="utf-8") as f:
        f.write('{"ev": "cut", "t": 4.')
    events = read_history(tmp_path)
    assert [e["ev"] for e in events] == ["y", "z", "x"]
    assert events[0] == {"ev": "y", "t": 1.0, "n": 1}
    assert json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0]) == {"ev": "x", "t": 3.0}


def test_a_run_that_did_not_complete_fails_whatever_the_rules_say() -> None:
    events = clean()
    find(events, "run-end")["phase"] = "chaos"
    result = check(events)
    assert broken_rules(result) == [] and not result.ok
    assert any("did not complete" in line for line in table(result))


# ---------------------------------------------------------------------------- holds and windows


def _with_window(start: float, end: float, held: bool) -> list[dict[str, Any]]:
    """clean(), its last change a resume that left a maintenance window scheduled (db, from
    ``start`` to ``end`` seconds into the run), the settled replicas ``held`` or not."""
    events = clean()
    holds = [["db", T + start, T + end]]
    find(events, "change", version=2)["holds"] = holds
    find(events, "op", action="resume")["holds"] = holds
    for rep in find(events, "settled")["replicas"]:
        rep["fleet_held"] = held
    return events


def test_a_settled_fleet_inside_a_maintenance_window_must_be_held_by_it() -> None:
    assert broken_rules(check(_with_window(3.2, 9.0, held=True))) == []
    result = check(_with_window(3.2, 9.0, held=False))
    assert broken_rules(result) == [5]
    assert result.rules[5].first is not None and "(running), not the last action, v2 (paused)" \
        in result.rules[5].first


def test_a_maintenance_window_that_ended_by_itself_leaves_the_fleet_running() -> None:
    assert broken_rules(check(_with_window(3.2, 3.3, held=False))) == []
    assert broken_rules(check(_with_window(3.2, 3.3, held=True))) == [5]


def test_a_window_edge_at_the_settled_snapshot_is_not_judged_either_way() -> None:
    for held in (True, False):
        assert broken_rules(check(_with_window(3.95, 9.0, held=held))) == []


def test_a_resume_refused_for_its_holds_may_exit_2_and_a_usage_error_may_not() -> None:
    events = clean()
    resume = find(events, "op", action="resume")
    resume.update(exit=2, stderr="fleet chaos has 2 holds (db, payments): name the one to "
                                 "release with --hold NAME, or release them all with --all\n")
    assert broken_rules(check(events)) == []
    resume["args"] = {"wait": False, "hold": "db"}  # naming a hold: that refusal is another
    assert broken_rules(check(events)) == [7]
    resume["stderr"] = "fleetgate: fleet chaos has no hold 'db' (holds: none)\n"
    assert broken_rules(check(events)) == []
    resume["stderr"] = "fleetgate: --hold and --all cannot be combined\n"  # a usage error
    assert broken_rules(check(events)) == [7]



def test_a_window_over_a_hold_active_now_may_be_refused_with_exit_2_and_nothing_else() -> None:
    """Issue 19 C.7: ``pause --hold NAME --at`` on the hold in force is refused (exit 2, one
    line) unless ``--reschedule``; the ten-minute runs' operator meets it."""
    events = clean()
    op = find(events, "op", action="pause")
    op["args"] = {**(op.get("args") or {}), "hold": "ops", "at": 3, "for": 3}
    op.update(via="cli", exit=2, stderr="fleetgate: hold ops of fleet chaos is active now: scheduling it "
                             "for later would end it now (and with it the pause, if no other "
                             "hold is active): release it first, or pass --reschedule to end "
                             "it now and start it at the new time\n")
    assert broken_rules(check(events)) == []
    op["args"] = {k: v for k, v in op["args"].items() if k != "at"}  # not a window: unexpected
    assert broken_rules(check(events)) == [7]
    op["args"]["at"] = 3
    op["stderr"] = "fleetgate: --at takes a time or a duration\n"  # a usage error
    assert broken_rules(check(events)) == [7]

# ---------------------------------------------------------------------------- failovers (issue 20)


def unconfirmed(item: str, at: float) -> dict[str, Any]:
    """An item the primary took that no Redis replica confirmed (``BatchNotConfirmed``)."""
    return ev("enqueue-unconfirmed", at, t0=T + at - 0.01, item=item, kind="ok",
              entry=f"{item}-0", acked=0)


def test_an_item_no_replica_confirmed_that_a_failover_lost_is_counted_apart_not_lost() -> None:
    events = [*clean(), unconfirmed("i4", 3.5),
              *fault(1, "lossy-failover", "redis", 3.3, 3.9)]
    result = check(events)
    assert broken_rules(result) == [] and result.lost == 0
    assert (result.unconfirmed_enqueues, result.unconfirmed_lost) == (1, 1)
    assert "| enqueues no replica confirmed (a failover may lose them) | 1 |" in \
        "\n".join(table(result))


def test_an_item_confirmed_by_a_replica_that_a_failover_lost_breaks_rule_3() -> None:
    events = [*clean(), enqueued("i4", 3.5), *fault(1, "lossy-failover", "redis", 3.3, 3.9)]
    result = check(events)
    assert broken_rules(result) == [3] and result.lost == 1


def test_an_unconfirmed_item_done_twice_without_a_cause_still_breaks_rule_3() -> None:
    events = [*clean(), unconfirmed("i4", 3.5), start("i4", "r1", 11, 3.6, 2),
              end("i4", "r1", 11, 3.65), start("i4", "r2", 12, 3.8, 2),
              end("i4", "r2", 12, 3.85)]
    assert broken_rules(check(events)) == [3]


@pytest.mark.parametrize("kind", ["primary-kill", "failover", "lossy-failover", "shard-kill",
                                  "unplanned-failover"])
def test_a_duplicate_across_a_failover_is_a_lost_acknowledgement(kind: str) -> None:
    result = check(duplicated(*fault(1, kind, "redis", 1.3, 3.0)))
    assert 3 not in broken_rules(result) and result.duplicates["lost-ack"] == 1


def test_a_sentinel_killed_explains_no_duplicate() -> None:
    result = check(duplicated(*fault(1, "sentinel-kill", "sentinel", 1.3, 3.0)))
    assert broken_rules(result) == [3]


def test_a_late_apply_during_a_failover_is_excused_and_after_a_sentinel_kill_is_not() -> None:
    def late(*extra: dict[str, Any]) -> list[dict[str, Any]]:
        events = [*clean(), *extra]
        find(events, "record", replica="r2", applied_version=2).update(applied_at=T + 3.9)
        return events

    assert 2 not in broken_rules(check(late(*fault(1, "failover", "redis", 2.9, 3.2))))
    assert 2 in broken_rules(check(late(*fault(1, "sentinel-kill", "sentinel", 2.9, 3.2))))
    # a failover the topology made by itself (bench.chaos.switches records it) is one too
    assert 2 not in broken_rules(check(late(*fault(100_001, "unplanned-failover", "redis",
                                                   2.9, 3.2))))


def test_a_cli_change_no_replica_confirmed_may_exit_4() -> None:
    events = clean()
    find(events, "op", action="resume").update(
        exit=4, result="unconfirmed",
        stderr="fleetgate: the change ... not confirmed by a replica within 1s (0 of 1)")
    assert broken_rules(check(events)) == []


def test_an_unconfirmed_last_action_a_failover_lost_settles_on_the_state_redis_kept() -> None:
    events = clean()
    find(events, "op", action="resume").update(result="unconfirmed", exit=4)
    snap = find(events, "settled")
    snap["state"].update(version=1, paused=True, effectively_paused=True)
    for rep in snap["replicas"]:
        rep.update(applied_version=1, fleet_held=True)
    assert 5 not in broken_rules(check(copy.deepcopy(events)))
    find(events, "op", action="resume").update(result="ok", exit=0)
    assert 5 in broken_rules(check(events))  # a confirmed one must be what it settles on
