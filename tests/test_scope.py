"""Holds for part of a fleet, on the replica: a hold's ``select`` holds only the replicas whose
labels match, a canary resume releases the replicas it names, a ``select`` that cannot be read
holds (fail closed), and holds without either behave as before."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from replica import PausablePool
from replica.contract import FleetState, Hold, Keys, now_utc
from replica.contract.holds import UNREADABLE_SELECT, hold_applies, holds_from_json
from replica.control.applier import StateApplier
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.errors import ConfigError
from replica.link.redisio import Link


class _Shown:
    fleet_held = False
    resume_at = None
    subscribed = False


def _applier(labels: dict[str, str], replica_id: str = "pod-1") -> tuple[PausablePool,
                                                                        StateApplier]:
    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    record = ReplicaRecord(pool, _Shown(), Keys("orders"), replica_id, heartbeat_interval=10.0,
                           poll_interval=1.0, host="h", labels=labels)
    outbox = Outbox(Link(aioredis.Redis()), record, "orders")
    return pool, StateApplier(pool, record, outbox, "orders", replica_id, pause_timeout=30.0,
                              labels=labels)


def _state(version: int, *holds: Hold) -> FleetState:
    now = now_utc()
    return FleetState("orders", bool(holds), "r", "ops", now, version, changed_at=now,
                      holds=tuple(sorted(holds, key=lambda h: h.name)))


def _hold(name: str, select: str | None = None, canaries: tuple[str, ...] = (),
          **kw: Any) -> Hold:
    return Hold(name, f"{name} reason", "ops", now_utc(), select=select, canaries=canaries, **kw)


EU = {"zone": "eu-west-1a", "version": "1.4.2"}
US = {"zone": "us-east-1a", "version": "1.4.2"}


def test_a_selected_hold_holds_only_the_replicas_its_selector_matches() -> None:
    eu_pool, eu = _applier(EU)
    us_pool, us = _applier(US)
    state = _state(1, _hold("zone-a", "zone=eu-west-1a"))
    for applier in (eu, us):
        applier.consider(state, "push")
    assert eu_pool.holds == {"fleet:zone-a": "zone-a reason"} and eu.fleet_held
    assert us_pool.holds == {} and not us.fleet_held
    # a hold without a selector holds both, as before; the selected one adds to it on eu
    both = _state(2, _hold("zone-a", "zone=eu-west-1a"), _hold("db"))
    for applier in (eu, us):
        applier.consider(both, "push")
    assert set(eu_pool.holds) == {"fleet:zone-a", "fleet:db"}
    assert set(us_pool.holds) == {"fleet:db"}
    # released: both run
    for applier in (eu, us):
        applier.consider(_state(3), "push")
    assert eu_pool.holds == {} and us_pool.holds == {}


def test_a_replica_with_no_labels_is_held_only_by_selectors_that_match_nothing_set() -> None:
    pool, applier = _applier({})
    applier.consider(_state(1, _hold("a", "zone=eu-west-1a")), "push")
    assert pool.holds == {}
    applier.consider(_state(2, _hold("a", "!zone")), "push")
    assert pool.holds == {"fleet:a": "a reason"}


def test_a_canary_resume_releases_the_hold_on_the_canaries_only() -> None:
    canary_pool, canary = _applier(EU, "pod-1")
    other_pool, other = _applier(EU, "pod-2")
    state = _state(1, _hold("db", canaries=("pod-1",)))
    for applier in (canary, other):
        applier.consider(state, "push")
    assert canary_pool.holds == {} and other_pool.holds == {"fleet:db": "db reason"}
    rolled_back = _state(2, _hold("db"))
    for applier in (canary, other):
        applier.consider(rolled_back, "push")
    assert canary_pool.holds == {"fleet:db": "db reason"}


def test_a_select_that_cannot_be_read_holds_every_replica_and_is_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool, applier = _applier(US)
    caplog.set_level(logging.WARNING)
    applier.consider(_state(1, _hold("zone-a", "zone=(bad")), "push")
    applier.consider(_state(2, _hold("zone-a", "zone=(bad"), _hold("b")), "push")
    assert pool.holds["fleet:zone-a"] == "zone-a reason"
    assert applier.scope.unreadable == 2
    lines = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(lines) == 1 and "fail closed" in lines[0]


def test_garbage_select_and_canaries_in_the_state_read_as_holding_every_replica() -> None:
    holds = holds_from_json('{"a": {"reason": "x", "by": "y", "select": 42, '
                            '"canaries": "pod-1"}, "b": {"select": "", "canaries": {}}}')
    a, b = holds
    assert a.select == UNREADABLE_SELECT and a.canaries == ()
    assert hold_applies(a, US, "pod-1")
    assert b.select is None and b.canaries == ()  # Lua's cjson writes an empty list as {}


def test_a_scheduled_selected_hold_starts_on_the_matching_replicas_only() -> None:
    eu_pool, eu = _applier(EU)
    us_pool, us = _applier(US)
    start = now_utc() - timedelta(seconds=1)  # its start has passed: the clock starts it
    hold = _hold("w", "zone in (eu-west-1a)", starts_at=start + timedelta(hours=1))
    for applier in (eu, us):
        applier.consider(_state(1, hold), "push")
    assert eu_pool.holds == {} and eu.transition_at is not None
    started = _state(2, replace(hold, starts_at=start))
    for applier in (eu, us):
        applier.consider(started, "push")
    assert eu_pool.holds == {"fleet:w": "w reason"} and us_pool.holds == {}


def test_a_state_without_selectors_is_followed_as_it_is() -> None:
    state = _state(1, _hold("db"))
    assert state.for_replica(EU, "pod-1") is state
    legacy = FleetState("orders", True, "old", "ops", now_utc(), 1)
    assert legacy.for_replica(EU, "pod-1") is legacy


def test_the_record_carries_the_labels_and_bad_labels_are_refused() -> None:
    async def handler(item: Any) -> None:
        pass

    record = ReplicaRecord(PausablePool(handler), _Shown(), Keys("orders"), "pod-1",
                           heartbeat_interval=10.0, poll_interval=1.0, host="h", labels=EU)
    assert record.fields()["labels"] == '{"version":"1.4.2","zone":"eu-west-1a"}'
    assert "labels" not in record.fields(full=False)
    from replica.control.options import ControllerSettings

    with pytest.raises(ConfigError, match="labels: label zone"):
        ControllerSettings(labels=(("zone", "eu west"),))


@pytest.mark.parametrize(("env", "line"), [
    ({"FLEETGATE_LABELS": "zone=eu west"},
     "FLEETGATE_LABELS: label zone: value 'eu west' must be empty or up to 63"),
    ({"FLEETGATE_LABELS": "zone"}, "FLEETGATE_LABELS: label 'zone' is not key=value"),
    ({"FLEETGATE_LABELS_FILE": "/nonexistent/labels"},
     "FLEETGATE_LABELS_FILE: cannot read /nonexistent/labels"),
])
def test_a_replica_with_bad_labels_refuses_to_start_with_one_line(
    env: dict[str, str], line: str
) -> None:
    import os
    import subprocess

    from procs import REPLICA

    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    done = subprocess.run([REPLICA, "--handler", "replica.demo:sleep", "--port", "0"],
                          env={**clean, "FLEETGATE_INSECURE_NO_AUTH": "1", **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and line in lines[0], done.stderr
