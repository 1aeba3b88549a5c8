"""coordinator.fleet.acks: reading acknowledgements (the canonical fast path and JSON) and times."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from coordinator.fleet.acks import _CANONICAL_ACK, _fast_ack, _json_ack, _Times, _View
from replica.contract import ACK_EVENTS, Ack, format_time

T0 = datetime(2026, 11, 30, 8, 0, 0, 123000, tzinfo=UTC)

replica_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,40}", fullmatch=True)
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 1, 1),
                     timezones=st.just(UTC))
acks = st.builds(
    Ack,
    replica=replica_ids,
    version=st.integers(0, 2**53),
    event=st.sampled_from(sorted(ACK_EVENTS)),
    fleet_held=st.booleans(),
    quiet=st.booleans(),
    in_flight=st.integers(0, 10**6),
    at=times,
    resume_at=st.none() | times,
)


@given(acks)
def test_an_ack_as_replicas_write_it_takes_the_fast_path_and_reads_as_json_would(
    ack: Ack,
) -> None:
    wire = ack.to_json().encode()
    assert _CANONICAL_ACK.fullmatch(wire) is not None
    fields = _fast_ack(wire)
    assert fields == _json_ack(wire)
    assert fields == (ack.replica, ack.version, ack.fleet_held, ack.quiet, ack.in_flight,
                      format_time(ack.at), format_time(ack.resume_at) or None)


@given(acks)
def test_an_ack_in_another_json_form_still_reads(ack: Ack) -> None:
    wire = json.dumps(json.loads(ack.to_json()), indent=1).encode()
    assert _CANONICAL_ACK.fullmatch(wire) is None
    assert _fast_ack(wire) == _fast_ack(ack.to_json().encode())


def test_what_is_not_an_ack_is_none() -> None:
    good = json.loads(Ack("pod-1", 3, "applied", True, True, 0, T0).to_json())
    for bad in (
        b"not json", b"[1, 2]", b"", None, 42,
        json.dumps({**good, "replica": "has space"}).encode(),
        json.dumps({**good, "replica": '"quote'}).encode(),
        json.dumps({**good, "version": -1}).encode(),
        json.dumps({**good, "version": "3"}).encode(),
        json.dumps({**good, "in_flight": 1.5}).encode(),
        b"x" * 100_000,
    ):
        assert _fast_ack(bad) is None, bad


def test_a_view_follows_acks_and_never_goes_back_a_version() -> None:
    view = _View("pod-1")
    at = format_time(T0)
    view.from_ack(("pod-1", 4, True, False, 2, at, None))
    assert view.alive and view.applied_version == 4 and not view.reached(4, pause=True)
    view.from_ack(("pod-1", 4, True, True, 0, format_time(T0 + timedelta(seconds=1)), None))
    assert view.reached(4, pause=True) and view.applied_at == at  # first applied time kept
    view.from_ack(("pod-1", 3, False, False, 0, at, None))  # an old one, late
    assert view.applied_version == 4 and view.fleet_held


def test_report_times_are_parsed_once_and_measured_from_the_change() -> None:
    times_ = _Times(T0)
    text = format_time(T0 + timedelta(milliseconds=250))
    first = times_(text)
    assert first == T0 + timedelta(milliseconds=250)
    assert times_(text) is first  # remembered
    assert times_.after(first) == 0.25
    assert times_.after(T0 - timedelta(seconds=1)) == 0.0  # a clock behind: not negative
    assert times_("not a time") is None and times_(None) is None
    assert _Times(None).after(first) is None


def test_a_record_read_after_an_ack_has_the_final_word() -> None:
    view = _View("pod-1")
    at = format_time(T0)
    view.from_ack(("pod-1", 4, True, True, 0, at, None))
    assert view.reached(4, pause=True) and not view.needs_check  # never read: acks suffice
    view.from_record(["3", "1", "0", "1", at, None, "connected", format_time(T0), "10", None],
                     T0.timestamp())
    view.from_ack(("pod-1", 4, True, True, 0, at, None))
    assert view.reached(4, pause=True) and view.needs_check  # read, then changed by an ack
    beat = format_time(T0 + timedelta(seconds=1))
    # applied_version, fleet_held, quiet, in_flight, applied_at, quiet_at, control,
    # heartbeat_at, heartbeat_interval, resume_at: the replica is at 3, busy
    view.from_record(["3", "0", "0", "1", at, None, "connected", beat, "10", None],
                     (T0 + timedelta(seconds=2)).timestamp())
    assert view.confirmed and view.alive and not view.needs_check
    assert view.applied_version == 3 and not view.reached(4, pause=True)
    assert view.in_flight == 1 and view.quiet_at is None
    view.from_record(None, T0.timestamp())  # no record (expired, or not a hash): not live
    assert view.confirmed and not view.alive
