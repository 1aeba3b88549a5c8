"""Fleet holds and maintenance windows through the HTTP API, on a real Redis (issue 14).

POST pause takes ``hold``, ``at`` (ISO 8601 or a duration from now), ``for``/``for_seconds`` and
``auto_resume``; POST resume takes ``hold`` or ``all``. An ambiguous resume is 409, a hold the
fleet does not have 404, a hold past the limit 409, each naming the fleet's holds; nothing
changes. Both route families (``/api/fleet/...`` and ``/api/fleets/{name}/...``) take them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from replica.contract import format_time, now_utc, parse_time
from replica.contract.holds import MAX_HOLDS
from tests.apikit import ADMIN, auth, json_headers, strict_json


async def post(api: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    return await api.post(path, json=body, headers=auth(ADMIN))


async def fleet_body(api: httpx.AsyncClient) -> Any:
    response = await api.get("/api/fleet", headers=auth(ADMIN))
    assert response.status_code == 200
    return strict_json(response)


async def test_two_holds_pause_the_fleet_until_both_are_released(api: httpx.AsyncClient) -> None:
    first = await post(api, "/api/fleet/pause", {"hold": "db", "reason": "pg upgrade"})
    assert first.status_code == 200
    assert first.json()["change"] == {
        "event": "pause", "holds": ["db"], "paused": True, "paused_by": ["db"], "scheduled": [],
    }
    second = await post(api, "/api/fleet/pause", {"hold": "payments", "reason": "incident"})
    assert second.json()["change"]["event"] == "hold_added"
    assert second.json()["change"]["paused_by"] == ["db", "payments"]

    released = await post(api, "/api/fleet/resume", {"hold": "db"})
    assert released.status_code == 200
    body = released.json()
    assert body["change"]["event"] == "hold_released"
    assert body["change"]["paused_by"] == ["payments"]
    assert body["state"]["paused"] is True and list(body["state"]["holds"]) == ["payments"]

    last = await post(api, "/api/fleet/resume", {})
    assert last.json()["change"]["event"] == "resume"
    assert last.json()["state"]["paused"] is False and last.json()["state"]["holds"] == {}


async def test_an_ambiguous_resume_is_409_naming_the_holds_and_changes_nothing(
    api: httpx.AsyncClient,
) -> None:
    await post(api, "/api/fleet/pause", {"hold": "db", "reason": "pg upgrade"})
    await post(api, "/api/fleet/pause", {"hold": "payments", "reason": "incident"})
    version = (await fleet_body(api))["state"]["version"]

    response = await api.post("/api/fleet/resume", headers=json_headers(ADMIN))
    assert response.status_code == 409
    body = strict_json(response)
    assert body["kind"] == "ambiguous" and body["holds"] == ["db", "payments"]
    assert "db, payments" in body["detail"] and '"all"' in body["detail"]
    after = await fleet_body(api)
    assert after["state"]["version"] == version
    assert list(after["state"]["holds"]) == ["db", "payments"]


async def test_resuming_a_hold_the_fleet_does_not_have_is_404_naming_the_holds(
    api: httpx.AsyncClient,
) -> None:
    await post(api, "/api/fleet/pause", {"hold": "db", "reason": "pg upgrade"})
    response = await post(api, "/api/fleet/resume", {"hold": "dbb"})
    assert response.status_code == 404
    assert strict_json(response) == {
        "detail": response.json()["detail"], "kind": "unknown", "holds": ["db"],
    }
    assert "'dbb'" in response.json()["detail"]
    assert (await fleet_body(api))["state"]["paused"] is True


async def test_resume_all_releases_every_hold(api: httpx.AsyncClient) -> None:
    for hold in ("a", "b", "c"):
        await post(api, "/api/fleet/pause", {"hold": hold, "reason": f"team {hold}"})
    response = await post(api, "/api/fleet/resume", {"all": True})
    assert response.status_code == 200
    assert response.json()["change"]["holds"] == ["a", "b", "c"]
    assert response.json()["state"]["paused"] is False


async def test_a_pause_past_the_most_holds_is_409_and_changes_nothing(
    api: httpx.AsyncClient,
) -> None:
    for i in range(MAX_HOLDS):
        assert (await post(api, "/api/fleet/pause", {"hold": f"h{i:02d}", "reason": "x"})).status_code == 200
    response = await post(api, "/api/fleet/pause", {"hold": "onemore", "reason": "x"})
    assert response.status_code == 409
    body = strict_json(response)
    assert body["kind"] == "too_many" and len(body["holds"]) == MAX_HOLDS
    assert "onemore" not in (await fleet_body(api))["state"]["holds"]


async def test_a_window_at_an_iso_time_is_scheduled_with_its_start_and_end(
    api: httpx.AsyncClient,
) -> None:
    start = now_utc().replace(microsecond=0) + timedelta(hours=3)
    response = await post(api, "/api/fleet/pause", {
        "hold": "dbmaint", "reason": "pg 16 upgrade", "at": format_time(start),
        "for": "30m", "auto_resume": True,
    })
    assert response.status_code == 200
    assert response.json()["change"]["event"] == "hold_scheduled"
    hold = (await fleet_body(api))["state"]["holds"]["dbmaint"]
    assert hold["status"] == "scheduled"
    assert parse_time(hold["starts_at"]) == start
    assert parse_time(hold["auto_resume_at"]) == start + timedelta(minutes=30)
    assert parse_time(hold["expected_until"]) == start + timedelta(minutes=30)
    assert (await fleet_body(api))["state"]["paused"] is False

    cancelled = await post(api, "/api/fleet/resume", {"hold": "dbmaint"})
    assert cancelled.json()["change"]["event"] == "hold_cancelled"
    assert cancelled.json()["state"]["holds"] == {}


async def test_a_window_at_a_duration_from_now_with_for_seconds_still_works(
    api: httpx.AsyncClient,
) -> None:
    before = now_utc()
    response = await post(api, "/api/fleet/pause", {
        "hold": "soon", "reason": "later", "at": "2h", "for_seconds": 600, "auto_resume": True,
    })
    assert response.status_code == 200
    hold = response.json()["state"]["holds"]["soon"]
    starts = parse_time(hold["starts_at"])
    assert starts is not None and timedelta(hours=2) <= starts - before < timedelta(hours=2, minutes=1)
    assert parse_time(hold["auto_resume_at"]) == starts + timedelta(seconds=600)


async def test_the_named_fleet_route_takes_holds_too(
    api: httpx.AsyncClient, fleet_name: str
) -> None:
    path = f"/api/fleets/{fleet_name}"
    await post(api, f"{path}/pause", {"hold": "db", "reason": "pg"})
    await post(api, f"{path}/pause", {"hold": "ops", "reason": "ops"})
    assert (await api.post(f"{path}/resume", headers=json_headers(ADMIN))).status_code == 409
    released = await post(api, f"{path}/resume", {"hold": "ops"})
    assert released.status_code == 200 and released.json()["change"]["paused_by"] == ["db"]


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/api/fleet/pause", {"reason": "x", "at": "2020-01-01T00:00Z"}, "in the past"),
        ("/api/fleet/pause", {"reason": "x", "at": "junk"}, "ISO 8601"),
        ("/api/fleet/pause", {"reason": "x", "at": "2h", "auto_resume": True}, "auto_resume"),
        ("/api/fleet/pause", {"reason": "x", "for": "30m", "for_seconds": 60}, "not both"),
        ("/api/fleet/pause", {"reason": "x", "for": "soon"}, "duration"),
        ("/api/fleet/pause", {"reason": "x", "hold": "Not A Name"}, "hold name"),
        ("/api/fleet/pause", {"reason": "x", "at": 7200}, "string"),
        ("/api/fleet/resume", {"hold": "db", "all": True}, "one of them"),
        ("/api/fleet/resume", {"all": "yes"}, "boolean"),
    ],
)
async def test_bad_hold_fields_are_422_and_change_nothing(
    api: httpx.AsyncClient, path: str, body: dict[str, Any], says: str
) -> None:
    response = await post(api, path, body)
    assert response.status_code == 422, response.text
    assert says in response.text
    assert (await fleet_body(api))["state"]["version"] == 0


async def test_status_shows_each_hold_with_its_status(api: httpx.AsyncClient) -> None:
    await post(api, "/api/fleet/pause", {"hold": "db", "reason": "pg", "for": "1h"})
    await post(api, "/api/fleet/pause", {"hold": "later", "reason": "window", "at": "1h"})
    holds = (await fleet_body(api))["state"]["holds"]
    assert {name: h["status"] for name, h in holds.items()} == {"db": "active", "later": "scheduled"}
    assert holds["db"]["reason"] == "pg" and holds["db"]["by"] == "alice"
    assert holds["db"]["starts_at"] is None and holds["later"]["starts_at"] is not None


async def test_history_names_the_hold_of_each_entry(api: httpx.AsyncClient) -> None:
    await post(api, "/api/fleet/pause", {"hold": "db", "reason": "pg"})
    await post(api, "/api/fleet/pause", {"hold": "w", "reason": "window", "at": "1h", "for": "10m",
                                         "auto_resume": True})
    await post(api, "/api/fleet/resume", {"all": True})
    response = await api.get("/api/fleet/history", headers=auth(ADMIN))
    events = strict_json(response)["events"]
    assert [(e["action"], e["hold"]) for e in events] == [
        ("resume", "db,w"), ("hold_scheduled", "w"), ("pause", "db"),
    ]
    assert events[1]["starts_at"] is not None and events[1]["auto_resume_at"] is not None


async def test_a_resume_of_a_fleet_without_holds_says_it_changed_nothing(
    api: httpx.AsyncClient,
) -> None:
    response = await post(api, "/api/fleet/resume", {})
    assert response.status_code == 200
    assert response.json()["change"]["event"] == "noop"
    assert response.json()["state"]["version"] == 0
