"""A canary resume's choice: how many (N or P% of the live replicas the hold holds) and which
(a stable order by fleet, hold and id, among the replicas the hold's selector matches)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_render import replica

from coordinator.fleet.canary import (
    CanarySpec,
    canary_order,
    choose,
    parse_canary,
    trouble,
)
from replica.contract import Hold
from replica.errors import ContractError

NOW = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize(("text", "spec"), [("3", CanarySpec(3, False)),
                                            ("10%", CanarySpec(10, True)),
                                            (" 1 ", CanarySpec(1, False)),
                                            ("100%", CanarySpec(100, True))])
def test_a_canary_is_a_number_or_a_percentage(text: str, spec: CanarySpec) -> None:
    assert parse_canary(text) == spec


@pytest.mark.parametrize("text", ["0", "0%", "101%", "-1", "x", "", "3.5", "1e3", "1000000"])
def test_anything_else_is_refused_with_one_line(text: str) -> None:
    with pytest.raises(ContractError, match="--canary must be"):
        parse_canary(text)


def test_a_percentage_is_rounded_up_and_at_least_one_and_never_more_than_there_are() -> None:
    assert CanarySpec(10, True).size(25) == 3
    assert CanarySpec(1, True).size(3) == 1
    assert CanarySpec(100, True).size(7) == 7
    assert CanarySpec(5, False).size(3) == 3


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), unique=True,
                min_size=1, max_size=30))
def test_the_order_is_stable_whatever_order_the_replicas_come_in(ids: list[str]) -> None:
    order = canary_order("orders", "db", ids)
    assert sorted(order) == sorted(ids)
    assert canary_order("orders", "db", list(reversed(ids))) == order


def test_another_hold_picks_other_canaries() -> None:
    ids = [f"orders-{i}" for i in range(20)]
    assert canary_order("orders", "db", ids)[:3] != canary_order("orders", "payments", ids)[:3]


def test_canaries_are_chosen_among_the_live_replicas_the_hold_selects() -> None:
    hold = Hold("zone-a", "x", "alice", NOW, select="zone=eu", canaries=("eu-1",))
    replicas = [replica(f"eu-{i}", labels={"zone": "eu"}) for i in range(4)] + \
        [replica("us-1", labels={"zone": "us"}), replica("eu-9", labels={"zone": "eu"},
                                                         stale=True)]
    canaries, live = choose("orders", hold, replicas, CanarySpec(50, True))
    assert live == 4 and len(canaries) == 2
    assert set(canaries) <= {"eu-0", "eu-1", "eu-2", "eu-3"}
    assert canaries == sorted(canary_order("orders", "zone-a",
                                           ["eu-0", "eu-1", "eu-2", "eu-3"])[:2])
    with pytest.raises(ContractError, match="holds no live replica"):
        choose("orders", replace(hold, select="zone=ap"), replicas, CanarySpec(1, False))


def test_trouble_is_failed_runs_dead_letters_an_open_breaker_or_silence() -> None:
    calm = replica("c1", failed=2, extra={"dead_lettered": "1", "timed_out": "0"})
    assert trouble(calm, calm) is None
    assert trouble(calm, replace(calm, failed=5)) == "c1: 3 failed runs"
    assert trouble(calm, replace(calm, extra={"dead_lettered": "2"})) == "c1: 1 dead letters"
    assert trouble(calm, replace(calm, holds={"breaker": "open"})) == \
        "c1's circuit breaker opened"
    assert "unreachable" in (trouble(calm, replace(calm, stale=True)) or "")
    assert "left" in (trouble(calm, None) or "")
