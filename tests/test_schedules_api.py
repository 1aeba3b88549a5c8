"""The schedule routes of the API (issue 22 A.1): add, list, remove and end an occurrence
early with the existing auth scopes; bad input is a 4xx with a JSON detail, never a 500."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest

from replica.contract import now_utc
from tests.apikit import ADMIN, VIEW, auth, strict_json

BODY: dict[str, Any] = {"name": "backup", "cron": "0 2 * * SUN", "duration": "2h",
                        "timezone": "Europe/Berlin", "reason": "weekly backup"}


async def test_add_list_remove_with_the_admin_and_view_scopes(
    api: httpx.AsyncClient, fleet_name: str
) -> None:
    path = f"/api/fleets/{fleet_name}/schedules"
    assert (await api.post(path, json=BODY)).status_code == 401
    assert (await api.post(path, json=BODY, headers=auth(VIEW))).status_code == 403
    added = await api.post(path, json={**BODY, "skip": ["2027-01-03"]}, headers=auth(ADMIN))
    assert added.status_code == 200, added.text
    sch = strict_json(added)["schedule"]
    assert (sch["name"], sch["by"], sch["duration_s"], len(sch["next"])) == (
        "backup", "alice", 7200, 3)
    listed = strict_json(await api.get(path, headers=auth(VIEW)))
    (row,) = listed["schedules"]
    assert row["cron"] == "0 2 * * SUN" and row["timezone"] == "Europe/Berlin"
    for occ in row["next"]:
        assert datetime.fromisoformat(occ["local_start"]).strftime("%a %H:%M") == "Sun 02:00"
    assert (await api.request("DELETE", f"{path}/backup", json={}, headers=auth(VIEW))
            ).status_code == 403
    gone = await api.request("DELETE", f"{path}/backup", json={}, headers=auth(ADMIN))
    assert gone.status_code == 200 and strict_json(gone)["removed"] == "backup"
    again = await api.request("DELETE", f"{path}/backup", json={}, headers=auth(ADMIN))
    assert again.status_code == 404 and strict_json(again)["kind"] == "unknown"


@pytest.mark.parametrize("change", [
    {"cron": "0 25 * * *"}, {"cron": "nonsense"}, {"timezone": "Europe/Atlantis"},
    {"duration": "forever"}, {"duration": None}, {"duration_seconds": 60},
    {"skip": ["someday"]}, {"starting": "tomorrow"}, {"name": "Bad Name"},
    {"cron": "0 * * * *", "duration": "90m"}, {"unknown": 1}, {"duration": "30d"},
])
async def test_bad_input_is_a_4xx_with_a_json_detail(
    api: httpx.AsyncClient, fleet_name: str, change: dict[str, Any]
) -> None:
    body = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    response = await api.post(f"/api/fleets/{fleet_name}/schedules", json=body,
                              headers=auth(ADMIN))
    assert 400 <= response.status_code < 500, response.text
    assert strict_json(response)["detail"]
    listed = strict_json(await api.get(f"/api/fleets/{fleet_name}/schedules",
                                       headers=auth(ADMIN)))
    assert listed["schedules"] == []


async def test_a_clash_with_a_hold_is_409_and_an_early_end_outside_an_occurrence_too(
    api: httpx.AsyncClient, fleet_name: str
) -> None:
    base = f"/api/fleets/{fleet_name}"
    paused = await api.post(f"{base}/pause", json={"reason": "db", "hold": "db"},
                            headers=auth(ADMIN))
    assert paused.status_code == 200, paused.text
    clash = await api.post(f"{base}/schedules", json={**BODY, "name": "db"}, headers=auth(ADMIN))
    assert clash.status_code == 409 and strict_json(clash)["kind"] == "clash"
    assert (await api.post(f"{base}/schedules", json=BODY, headers=auth(ADMIN))).status_code == 200
    now = now_utc()
    in_force = {**BODY, "name": "freeze", "cron": f"{now.minute} {now.hour} * * *",
                "duration": "23h", "timezone": "UTC"}
    assert (await api.post(f"{base}/schedules", json=in_force, headers=auth(ADMIN))
            ).status_code == 200
    ended = await api.post(f"{base}/schedules/freeze/end", json={"reason": "done"},
                           headers=auth(ADMIN))
    assert ended.status_code == 200 and strict_json(ended)["schedule"]["active"] is False
    not_active = await api.post(f"{base}/schedules/backup/end", json={}, headers=auth(ADMIN))
    assert not_active.status_code == 409 and strict_json(not_active)["kind"] == "not_active"
