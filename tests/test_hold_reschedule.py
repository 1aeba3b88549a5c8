"""``pause --at`` of a hold that is active now (issue 19, C.7). Moving it to a later start ends
it now, so it is refused (exit 2, API 409 kind ``active``, ``ActiveHoldConflict``; nothing
changed) unless the operator asks for it with ``--reschedule`` (``"reschedule": true``). Then,
when it was the fleet's last active hold, the fleet resumes, and everything says so: the audit
(and so the webhook) records ``resume``, the first line says the fleet resumed, ``--json``'s
``change`` is ``resume`` with ``paused`` false, and ``--wait`` waits for running replicas.
On a real Redis, with real replicas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator import Fleet
from replica.contract import Keys, now_utc
from replica.contract.holds import ActiveHoldConflict
from tests.apikit import ADMIN, auth
from tests.clikit import one_line, run
from tests.fleetkit import ReplicaThread

LATER = ("--at", "1h", "--for", "30m", "--auto-resume")


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def last_audit(sync_redis: syncredis.Redis, fleet: str) -> dict[str, str]:
    entries: Any = sync_redis.xrevrange(Keys(fleet).audit, count=1)
    return dict(entries[0][1])


@pytest.mark.usefixtures("env")
def test_pause_at_of_the_only_active_hold_is_refused_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    before = sync_redis.hgetall(Keys(fleet_name).state)
    audit = sync_redis.xlen(Keys(fleet_name).audit)
    code, out, err = run(capsys, "pause", "--hold", "db", "--reason", "later", *LATER)
    assert code == 2, (out, err)
    assert out == ""
    line = one_line(err)
    assert "hold 'db'" in line and "active" in line and "--reschedule" in line
    assert sync_redis.hgetall(Keys(fleet_name).state) == before
    assert sync_redis.xlen(Keys(fleet_name).audit) == audit


@pytest.mark.usefixtures("env")
def test_pause_at_with_reschedule_says_the_fleet_resumed_everywhere(
    capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    first = ok(capsys, "pause", "--hold", "db", "--reason", "later", *LATER,
               "--reschedule").splitlines()[0]
    assert first.startswith("rescheduled hold db for ")
    assert f"fleet {fleet_name} resumed by" in first
    audit = last_audit(sync_redis, fleet_name)
    assert audit["action"] == "resume" and audit["hold"] == "db" and audit["starts_at"]
    body = json.loads(ok(capsys, "status", "--json"))
    assert body["state"]["paused"] is False
    assert body["state"]["holds"]["db"]["status"] == "scheduled"
    # paused by db again, then moved once more, as JSON
    ok(capsys, "pause", "--hold", "db", "--reason", "pg upgrade")
    change = json.loads(ok(capsys, "pause", "--hold", "db", "--reason", "later", *LATER,
                           "--reschedule", "--json"))["change"]
    assert change["event"] == "resume" and change["paused"] is False
    assert change["holds"] == ["db"] and change["scheduled"] == ["db"]


@pytest.fixture
def kit(env: None, redis_url: str, fleet_name: str) -> Iterator[ReplicaThread]:
    thread = ReplicaThread(redis_url, fleet_name, 2)
    with thread:
        yield thread


def test_pause_at_with_reschedule_and_wait_waits_for_running_replicas(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    body = json.loads(ok(capsys, "pause", "--hold", "db", "--reason", "pg", "--wait", "--json"))
    assert body["wait"]["ok"] is True and body["wait"]["action"] == "pause"
    body = json.loads(ok(capsys, "pause", "--hold", "db", "--reason", "later", *LATER,
                         "--reschedule", "--wait", "--json"))
    assert body["wait"]["ok"] is True and body["wait"]["action"] == "resume"
    assert kit.kit is not None
    for r in kit.kit.replicas:
        assert kit.call(lambda r=r: r.pool.holds) == {}


async def test_the_library_refuses_with_active_hold_conflict_and_keeps_other_holds_truthful(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    later = now_utc() + timedelta(hours=1)
    await fleet.pause("pg", by="ops", hold="db")
    await fleet.pause("incident", by="ops", hold="payments")
    with pytest.raises(ActiveHoldConflict) as refused:
        await fleet.pause("later", by="ops", hold="db", starts_at=later)
    assert refused.value.kind == "active" and refused.value.holds == ("db", "payments")
    state = await fleet.pause("later", by="ops", hold="db", starts_at=later, reschedule=True)
    assert state.effectively_paused()  # payments still holds it
    history = await fleet.history(limit=1)
    assert history[0].action == "hold_scheduled"


async def test_the_api_refuses_with_409_and_reschedules_when_asked(
    api: httpx.AsyncClient,
) -> None:
    paused = await api.post("/api/fleet/pause", json={"hold": "db", "reason": "pg"},
                            headers=auth(ADMIN))
    assert paused.status_code == 200
    later = {"hold": "db", "reason": "later", "at": "1h", "for": "30m", "auto_resume": True}
    refused = await api.post("/api/fleet/pause", json=later, headers=auth(ADMIN))
    assert refused.status_code == 409, refused.text
    assert refused.json()["kind"] == "active" and refused.json()["holds"] == ["db"]
    assert '"reschedule": true' in refused.json()["detail"]
    moved = await api.post("/api/fleet/pause", json={**later, "reschedule": True},
                           headers=auth(ADMIN))
    assert moved.status_code == 200, moved.text
    assert moved.json()["change"]["event"] == "resume"
    assert moved.json()["state"]["paused"] is False
