"""What the coordinator shows: the figures (state per replica, age, overdue, lag), the stable
JSON shapes and the human tables."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from coordinator import render
from coordinator.fleet.models import AuditEvent, Excused, ReplicaInfo, ReplicaResult, WaitReport
from coordinator.render.holds import holds_dict
from replica.contract import FleetState

NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)


def state(**changes: Any) -> FleetState:
    base = FleetState(
        fleet="orders", paused=True, reason="db migration", by="alice",
        since=NOW - timedelta(minutes=4, seconds=12), version=7,
        changed_at=NOW - timedelta(minutes=4, seconds=12),
    )
    return replace(base, **changes)


def replica(rid: str = "r1", **changes: Any) -> ReplicaInfo:
    base = ReplicaInfo(
        id=rid, paused=True, holds={"fleet": "db migration"}, applied_version=7, in_flight=0,
        queued=12, quiet=True, control="connected", heartbeat_at=NOW - timedelta(seconds=3),
        host="node-1", started_at=NOW - timedelta(hours=1), processed=100, failed=0,
        applied_at=NOW - timedelta(minutes=4, seconds=11, milliseconds=880), quiet_at=None,
        stale=False, fleet_held=True,
    )
    return replace(base, **changes)


def text_of(renderable: Any) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


# ---------------------------------------------------------------------------- figures


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, "quiet"),
        ({"quiet": False, "in_flight": 2}, "paused"),
        ({"paused": False, "quiet": False, "holds": {}}, "running"),
        ({"stale": True}, "stale"),
    ],
)
def test_each_replica_is_in_exactly_one_state(changes: dict[str, Any], expected: str) -> None:
    assert render.replica_state(replica(**changes)) == expected


def test_the_pause_age_counts_from_since_and_is_none_while_running() -> None:
    assert render.pause_age_s(state(), NOW) == 252.0
    assert render.pause_age_s(state(paused=False), NOW) is None


def test_a_pause_past_its_auto_resume_time_is_no_longer_paused_nor_overdue() -> None:
    s = state(expected_until=NOW - timedelta(seconds=1), auto_resume_at=NOW - timedelta(seconds=1))
    assert render.pause_age_s(s, NOW) is None
    assert not render.is_overdue(s, NOW)


def test_a_pause_is_overdue_past_expected_until() -> None:
    assert not render.is_overdue(state(expected_until=NOW + timedelta(seconds=1)), NOW)
    assert render.is_overdue(state(expected_until=NOW - timedelta(seconds=1)), NOW)


def test_a_window_longer_than_max_pause_is_not_overdue_before_it_ends() -> None:
    long = state(since=NOW - timedelta(hours=3), expected_until=NOW + timedelta(hours=1))
    assert not render.is_overdue(long, NOW, max_pause=1800)


def test_a_pause_without_a_window_is_overdue_past_max_pause() -> None:
    s = state(since=NOW - timedelta(minutes=31))
    assert render.is_overdue(s, NOW, max_pause=1800)
    assert not render.is_overdue(s, NOW, max_pause=3600)
    assert not render.is_overdue(state(paused=False, since=NOW - timedelta(days=9)), NOW)


def test_unacknowledged_counts_live_replicas_behind_the_version() -> None:
    reps = [
        replica("r1"),
        replica("r2", applied_version=6),
        replica("r3", applied_version=6, stale=True),
    ]
    assert [r.id for r in render.unacknowledged(state(), reps)] == ["r2"]


def test_the_ack_lag_is_apply_time_minus_change_time_or_the_wait_so_far() -> None:
    assert render.ack_lag_s(replica(), state(), NOW) == (pytest.approx(0.12), True)
    lag, acked = render.ack_lag_s(replica(applied_version=6), state(), NOW)
    assert not acked and lag == 252.0


def test_the_summary_counts_states_and_sums_only_live_replicas() -> None:
    reps = [
        replica("r1"),
        replica("r2", quiet=False, in_flight=2, queued=5),
        replica("r3", stale=True, in_flight=9, queued=9),
        replica("r4", paused=False, quiet=False, applied_version=6),
    ]
    s = render.summary(state(), reps, NOW)
    assert {k: s[k] for k in ("replicas", "running", "paused", "quiet", "stale", "live")} == {
        "replicas": 4, "running": 1, "paused": 1, "quiet": 1, "stale": 1, "live": 3,
    }
    assert s["unacknowledged"] == 1
    assert s["in_flight"] == 2 and s["queued"] == 12 + 5 + 12
    assert s["effectively_paused"] is True and s["overdue"] is False
    assert s["pause_age_s"] == 252.0 and s["now"] == "2026-11-30T08:00:00.000Z"


# ---------------------------------------------------------------------------- JSON shapes


def test_the_status_shape_is_fleet_state_replicas_summary_and_is_json() -> None:
    body = render.status_dict(state(), [replica()], NOW)
    assert list(body) == ["fleet", "state", "replicas", "summary"]
    # a state of an older release (no holds) shows its pause as the one hold "default"
    holds = holds_dict(state(), NOW)
    holds["default"]["holding"] = 1 if "fleet" in replica().holds else 0  # live ones it holds
    assert body["state"] == {**state().to_dict(), "holds": holds}
    assert list(body["state"]["holds"]) == ["default"]
    assert body["state"]["holds"]["default"]["status"] == "active"
    assert body["replicas"] == [replica().to_dict()]
    assert json.loads(json.dumps(body)) == body


def test_the_history_and_action_shapes() -> None:
    event = AuditEvent(id="1-0", action="pause", reason="x", by="alice", version=1, at=NOW)
    assert render.history_dict("orders", [event]) == {"fleet": "orders", "events": [event.to_dict()]}
    action = render.action_dict(state(), None)
    holds = action["state"].pop("holds")
    expected = {k: v for k, v in state().to_dict().items() if k != "holds"}
    assert action == {"fleet": "orders", "state": expected, "wait": None}
    assert list(holds) == ["default"] and holds["default"]["reason"] == "db migration"


# ---------------------------------------------------------------------------- human


def test_the_status_table_shows_the_banner_and_one_row_per_replica() -> None:
    s = state(expected_until=NOW + timedelta(minutes=25))
    out = text_of(render.status_renderable(s, [replica("r1"), replica("r2", stale=True)], NOW))
    assert "PAUSED" in out and "'db migration'" in out and "by alice" in out
    assert "since 2026-11-30T07:55:48.000Z (4m12s)" in out
    assert "expected until 2026-11-30T08:25:00.000Z" in out
    assert "OVERDUE" not in out
    for header in ("replica", "state", "version", "in flight", "queued", "last heartbeat", "ack lag"):
        assert header in out
    assert "r1" in out and "quiet" in out and "stale" in out
    assert "3s ago" in out and "120ms" in out


def test_an_overdue_pause_says_so() -> None:
    out = text_of(render.status_renderable(state(since=NOW - timedelta(hours=2)), [], NOW))
    assert "OVERDUE" in out and "(2h00m)" in out and "no replica has reported" in out


def test_a_running_fleet_says_running() -> None:
    out = text_of(render.status_renderable(state(paused=False, reason="", by="bob"), [replica(paused=False, quiet=False)], NOW))
    assert "RUNNING" in out and "last change by bob" in out


def _result(rid: str, reached: bool, why: str | None = None) -> ReplicaResult:
    return ReplicaResult(
        id=rid, reached=reached, applied_version=7 if reached else 6,
        acked_at=NOW if reached else None, quiet_at=NOW if reached else None,
        applied_after_s=0.05 if reached else None, quiet_after_s=1.5 if reached else None,
        in_flight=0 if reached else 1, why=why,
    )


def test_the_wait_table_shows_each_acknowledgement_and_the_stragglers_line_names_them() -> None:
    unreachable = replace(_result("r3", False, "unreachable"), last_heard=NOW - timedelta(seconds=4))
    report = WaitReport(
        version=7, ok=False, action="pause", elapsed_s=60.02,
        replicas=[_result("r1", True), _result("r2", False, "still in flight"), unreachable],
    )
    out = text_of(render.wait_table(report))
    assert "2026-11-30T08:00:00.000Z (+50ms)" in out and "(+1.5s)" in out
    assert "still in flight" in out
    assert "unreachable, last heard 2026-11-30T07:59:56.000Z, 1 in flight" in out
    line = render.stragglers_line(report)
    assert line == (
        "timed out after 60.0s: 2 of 3 replicas not quiet: r2 (still in flight), "
        "r3 (unreachable, last heard 2026-11-30T07:59:56.000Z, 1 in flight)"
    )


def test_an_unreachable_replica_never_read_says_its_items_in_flight_are_unknown() -> None:
    never = replace(_result("r3", False, "unreachable"), in_flight=None,
                    last_heard=NOW - timedelta(seconds=9))
    report = WaitReport(version=7, ok=False, action="resume", elapsed_s=3.0, replicas=[never])
    assert render.stragglers_line(report) == (
        "timed out after 3.0s: 1 of 1 replicas not running: "
        "r3 (unreachable, last heard 2026-11-30T07:59:51.000Z, in flight unknown)"
    )


def test_the_wait_table_and_the_stragglers_line_list_the_replicas_excused_as_gone() -> None:
    report = WaitReport(
        version=7, ok=False, action="pause", elapsed_s=3.0,
        replicas=[_result("r1", True), _result("r2", False, "still in flight")],
        excused=[Excused("r3", "gone")],
    )
    out = text_of(render.wait_table(report))
    assert "excused" in out and "gone (stopped cleanly)" in out
    assert render.stragglers_line(report).endswith(
        "r2 (still in flight); excused: r3 (gone)")
    shape = render.action_dict(state(), report)["wait"]
    assert shape["excused"] == [{"id": "r3", "reason": "gone"}]
    assert shape["stragglers"] == ["r2"]  # ids, as the stable shape always had them
    (r2,) = [r for r in shape["replicas"] if r["id"] == "r2"]
    assert (r2["why"], r2["last_heard"], r2["in_flight"]) == ("still in flight", None, 1)


def test_the_action_line_says_what_happened() -> None:
    assert render.action_line(state(expected_until=NOW)) == (
        "fleet orders paused by alice: 'db migration' (version 7, expected until 2026-11-30T08:00:00.000Z)"
    )
    assert render.action_line(state(paused=False, by="bob", resume_stagger_s=30.0)) == (
        "fleet orders resumed by bob (version 7, staggered over 30s)"
    )


# ---------------------------------------------------------------------------- stored text


LINK = "[link=https://evil.example/login]see runbook[/link]"


def terminal_output(renderable: Any) -> str:
    """What a colour terminal that knows OSC 8 links would receive."""
    stream = io.StringIO()
    console = Console(width=200, force_terminal=True, color_system="truecolor", file=stream)
    console.print(renderable)
    return stream.getvalue()


def test_a_reason_with_link_markup_is_printed_as_those_characters_not_as_a_link() -> None:
    events = [AuditEvent(id="1-0", action="pause", reason=LINK, by="[b]mallory[/b]", version=3, at=NOW)]
    out = terminal_output(render.history_table(events))
    assert "\x1b]8;" not in out
    assert LINK in out and "[b]mallory[/b]" in out
    assert "\x1b]8;" not in terminal_output(render.banner(state(reason=LINK, by=LINK), [], NOW, 1800))


def test_a_reason_with_a_stray_closing_tag_renders() -> None:
    events = [AuditEvent(id="1-0", action="pause", reason="db [/oops] migration", by="a", version=1, at=NOW)]
    assert "db [/oops] migration" in text_of(render.history_table(events))


def test_control_and_escape_characters_in_stored_text_show_as_escapes() -> None:
    host = "evil\x1b[2J\x1b]8;;https://x\x1b\\host\u202e\x9b"
    table = render.replica_table(state(), [replica(host=host, id="r1")], NOW)
    out = text_of(table)
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out
    assert "evil\\x1b[2J\\x1b]8;;https://x\\x1b\\host\\u202e\\x9b" in out
    events = [AuditEvent(id="1-0", action="pause\x07", reason="a\nb", by="e\x1bvil", version=1, at=NOW)]
    out = text_of(render.history_table(events))
    assert "\x1b" not in out and "\x07" not in out and "a\\nb" in out and "e\\x1bvil" in out
    assert "\x1b" not in render.action_line(state(by="e\x1bvil"))
    assert "\x1b" not in text_of(render.banner(state(by="e\x1bvil", paused=False), [], NOW, 1800))


def test_the_wait_table_and_the_stragglers_line_print_ids_and_reasons_as_text() -> None:
    report = WaitReport(
        action="pause", version=2, ok=False, elapsed_s=1.0,
        replicas=[replace(_result("r[red]1", False, "in \x1b[31mflight"))],
    )
    out = terminal_output(render.wait_table(report))
    assert "r[red]1" in out and "\x1b[31mflight" not in out
    assert "\x1b" not in render.stragglers_line(report) and "r[red]1" in render.stragglers_line(report)


def test_printable_text_is_kept_as_it_is() -> None:
    for value in ("db migration", "café [note] 100%", "日本語", ""):
        assert render.printable(value) == value
