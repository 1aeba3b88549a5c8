"""What the coordinator shows of holds for part of a fleet: each replica's labels, how many
replicas each hold holds, its selector and canaries; and a replica a selected hold does not
match is not taken for one that should be quiet."""

from __future__ import annotations

from dataclasses import replace

from test_render import NOW, replica, state, text_of

from coordinator import render
from coordinator.fleet.models import FleetStatus, ReplicaInfo
from coordinator.fleet.summary import WHY_NOT_QUIET, summarize
from replica.contract import Hold


def _fleet() -> tuple[object, list[ReplicaInfo]]:
    hold = Hold("zone-a", "az failover", "alice", NOW, select="zone=eu-west-1a")
    st = state(holds=(hold,))
    eu = replica("orders-1", holds={"fleet:zone-a": "az failover"},
                 labels={"zone": "eu-west-1a", "version": "1.4.2"})
    us = replica("orders-2", holds={}, paused=False, quiet=False, fleet_held=False,
                 in_flight=3, labels={"zone": "us-east-1a", "version": "1.4.2"})
    return st, [eu, us]


def test_status_shows_labels_and_how_many_replicas_each_hold_holds() -> None:
    st, replicas = _fleet()
    out = text_of(render.status_renderable(st, replicas, NOW))  # type: ignore[arg-type]
    assert "hold zone-a (active): 'az failover' by alice" in out
    assert "select 'zone=eu-west-1a', holds 1 of 2 replicas" in out
    assert "version=1.4.2,zone=eu-west-1a" in out and "version=1.4.2,zone=us-east-1a" in out
    body = render.status_dict(st, replicas, NOW)  # type: ignore[arg-type]
    assert body["state"]["holds"]["zone-a"]["holding"] == 1
    assert body["state"]["holds"]["zone-a"]["select"] == "zone=eu-west-1a"
    assert body["replicas"][0]["labels"] == {"version": "1.4.2", "zone": "eu-west-1a"}


def test_a_replica_a_selected_hold_does_not_match_is_not_asked_to_be_quiet() -> None:
    st, replicas = _fleet()
    fs = summarize(FleetStatus(state=st, replicas=replicas), NOW)  # type: ignore[arg-type]
    assert fs.figures.reasons[WHY_NOT_QUIET] == 0
    assert fs.figures.held == {"zone-a": 1}
    assert fs.figures.held_ids == [("zone-a", "orders-1")]
    # the one it matches, still busy, is
    busy = [replace(replicas[0], quiet=False, in_flight=2), replicas[1]]
    fs = summarize(FleetStatus(state=st, replicas=busy), NOW)  # type: ignore[arg-type]
    assert fs.figures.reasons[WHY_NOT_QUIET] == 1


def test_a_canary_hold_names_its_canaries_and_a_table_without_labels_has_no_column() -> None:
    hold = Hold("db", "pg", "alice", NOW, canaries=("r2",))
    out = text_of(render.status_renderable(state(holds=(hold,)),
                                           [replica("r1"), replica("r2", holds={})], NOW))
    assert "released on canaries r2" in out
    assert "labels" not in out
