"""Long reasons in any script (issue 19, A.1): text is cut on character boundaries and limits
count characters, so a valid pause of 400 CJK characters (1,200 UTF-8 bytes), or several holds
whose reasons together pass the 1,000-character limit of the combined ``reason``, reads back,
holds real replicas, and leaves the CLI and the API working. On a real Redis."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from cpkit import Replicas

from coordinator import Fleet
from replica.contract import FleetState, Keys
from replica.contract.names import MAX_TEXT_LEN
from tests.apikit import ADMIN, auth, strict_json
from tests.clikit import run

CJK_400 = "数" * 400
CJK_200 = "数" * 200


async def raw_state(redis_url: str, fleet_name: str) -> dict[bytes, bytes]:
    """The state hash as bytes, as Redis holds it (no decoding on the way)."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await client.hgetall(Keys(fleet_name).state)
    finally:
        await client.aclose()


async def test_a_400_character_cjk_reason_reads_back_whole_and_holds_real_replicas(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.2) as replicas:
        state = await fleet.pause(CJK_400, by="ops")
        assert state.reason == CJK_400
        raw = await raw_state(redis_url, fleet_name)
        assert raw[b"reason"].decode("utf-8") == CJK_400  # strict: no cut character
        assert (await fleet.state()).reason == CJK_400
        report = await fleet.wait(state.version, timeout=20)
        assert report.ok, report
        assert replicas.fleet_held() == [True, True]
        resumed = await fleet.resume(by="ops")
        assert (await fleet.wait(resumed.version, timeout=20)).ok
        assert replicas.fleet_held() == [False, False]


async def test_two_holds_of_200_cjk_characters_each_combine_into_a_reason_that_decodes(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 1, poll_interval=0.2) as replicas:
        await fleet.pause(CJK_200, by="ops", hold="db")
        state = await fleet.pause(CJK_200, by="ops", hold="payments")
        assert state.reason == f"db: {CJK_200}; payments: {CJK_200}"
        raw = await raw_state(redis_url, fleet_name)
        raw[b"reason"].decode("utf-8")
        assert (await fleet.wait(state.version, timeout=20)).ok
        assert set(replicas.pools[0].holds) == {"fleet:db", "fleet:payments"}


async def test_a_combined_reason_past_the_limit_is_cut_between_characters_to_the_limit(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    reasons = {"a": "数" * 500, "b": "😀" * 500, "c": "é" * 500}
    state: FleetState | None = None
    for hold, reason in reasons.items():
        state = await fleet.pause(reason, by="ops", hold=hold)
    assert state is not None
    whole = "; ".join(f"{h}: {r}" for h, r in reasons.items())
    assert len(state.reason) == MAX_TEXT_LEN
    assert state.reason == whole[:MAX_TEXT_LEN - 3] + "..."
    raw = await raw_state(redis_url, fleet_name)
    assert raw[b"reason"].decode("utf-8") == state.reason
    # the control message a replica applies is strict about the limit: it must read too
    assert FleetState.from_json(state.to_json(), fleet_name).reason == state.reason


@pytest.mark.usefixtures("env")
def test_the_cli_pauses_shows_and_resumes_a_fleet_with_a_400_character_cjk_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "pause", "--reason", CJK_400, "--json")
    assert code == 0, err
    assert json.loads(out)["state"]["reason"] == CJK_400
    code, out, err = run(capsys, "status", "--json")
    assert code == 0, err
    assert json.loads(out)["state"]["paused"] is True
    code, out, err = run(capsys, "resume")
    assert code == 0, err


async def test_the_api_pauses_with_two_long_cjk_holds_and_every_view_answers(
    api: httpx.AsyncClient, fleet_name: str
) -> None:
    for hold in ("db", "payments"):
        response = await api.post("/api/fleet/pause", json={"hold": hold, "reason": CJK_200},
                                  headers=auth(ADMIN))
        assert response.status_code == 200, response.text
    body: Any = strict_json(response)
    assert body["state"]["reason"] == f"db: {CJK_200}; payments: {CJK_200}"
    for path in ("/api/fleet", "/api/fleets", "/metrics"):
        answer = await api.get(path, headers=auth(ADMIN))
        assert answer.status_code == 200, (path, answer.text)
    resumed = await api.post("/api/fleet/resume", json={"all": True}, headers=auth(ADMIN))
    assert resumed.status_code == 200, resumed.text


async def test_a_state_of_twenty_holds_with_long_non_ascii_reasons_fits_a_control_message(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    state: FleetState | None = None
    for i in range(20):
        state = await fleet.pause("😀" * 500, by="数" * 100, hold=f"h{i}")
    assert state is not None and state.holds is not None and len(state.holds) == 20
    # what a replica records as applied and a restore publishes: within MAX_MESSAGE_BYTES
    message = state.to_json()
    assert FleetState.from_json(message, fleet_name) == state
    assert FleetState.from_json(message.encode("utf-8"), fleet_name) == state
