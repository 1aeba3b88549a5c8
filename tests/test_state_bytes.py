"""A state hash edited by hand with bytes that are not UTF-8: the operator's views still read
it (the bytes as replacement characters) and the fleet can still be paused and resumed, while
the replicas hold on it (tests/test_control_faults.py). On a real Redis."""

from __future__ import annotations

import pytest
import redis as syncredis

from coordinator.web.api import create_app
from replica.contract import Keys
from tests.apikit import ADMIN, auth, client_for, make_settings
from tests.clikit import run


def _garble(redis_url: str, fleet: str) -> None:
    with syncredis.Redis.from_url(redis_url) as raw:
        raw.hset(Keys(fleet).state, "reason", b"\xff\xfe edited by hand")


@pytest.mark.usefixtures("env")
def test_status_pause_and_resume_read_a_state_whose_reason_is_not_utf8(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet_name: str
) -> None:
    code, _, err = run(capsys, "pause", "--reason", "db maintenance")
    assert code == 0, err
    _garble(redis_url, fleet_name)
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "PAUSED" in out and "\ufffd\ufffd edited by hand" in out
    code, out, err = run(capsys, "status", "--json")
    assert code == 0, err
    code, out, err = run(capsys, "resume")
    assert code == 0, err
    assert "resumed" in out


async def test_the_api_answers_for_a_state_whose_reason_is_not_utf8(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name))
    async with client_for(app) as client:
        pause = await client.post("/api/fleet/pause", headers=auth(ADMIN),
                                  json={"reason": "db maintenance"})
        assert pause.status_code == 200, pause.text
        _garble(redis_url, fleet_name)
        for path in ("/api/fleet", f"/api/fleets/{fleet_name}", "/api/fleets", "/metrics"):
            got = await client.get(path, headers=auth(ADMIN))
            assert got.status_code == 200, (path, got.text)
        body = (await client.get("/api/fleet", headers=auth(ADMIN))).json()
        assert body["state"]["paused"] is True
