"""A mistyped fleet name stays visible as one (issue 19, C.10): a resume that changes nothing
writes nothing (no registry entry, no audit, no state), and ``status``/``history`` of a fleet
never seen exit 6, as the API answers 404. On a real Redis."""

from __future__ import annotations

import json

import pytest
import redis as syncredis

from coordinator.cli.exits import EXIT_UNKNOWN_FLEET
from coordinator.web.api import create_app
from replica.contract.keys import FLEETS_KEY
from tests.apikit import ADMIN, auth, client_for, make_settings
from tests.clikit import one_line, run


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    for key in ("FLEETGATE_ADMIN_TOKEN", "FLEETGATE_VIEW_TOKEN", "FLEETGATE_TOKENS_FILE",
                "FLEETGATE_FLEET"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FLEETGATE_REDIS_URL", redis_url)


def keys_of(sync_redis: syncredis.Redis, fleet: str) -> list[str]:
    found: list[str] = sorted(sync_redis.scan_iter(match=f"fleetgate:{{{fleet}}}:*"))
    return found


@pytest.mark.usefixtures("env")
def test_a_resume_of_a_mistyped_fleet_writes_nothing_and_registers_no_ghost(
    capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    typo = f"{fleet_name}-odrers"
    code, out, err = run(capsys, "--fleet", typo, "resume")
    assert code == 0, err
    assert "nothing to resume" in out
    assert sync_redis.zscore(FLEETS_KEY, typo) is None
    assert keys_of(sync_redis, typo) == []
    code, out, err = run(capsys, "--fleet", typo, "resume", "--all")
    assert code == 0, err
    assert sync_redis.zscore(FLEETS_KEY, typo) is None
    assert keys_of(sync_redis, typo) == []


@pytest.mark.usefixtures("env")
def test_status_and_history_of_a_fleet_never_seen_exit_6_naming_it(
    capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    for argv in (("status",), ("status", "--json"), ("history",)):
        code, out, err = run(capsys, "--fleet", fleet_name, *argv)
        assert code == EXIT_UNKNOWN_FLEET == 6, (argv, out, err)
        assert out == ""
        assert f"no fleet {fleet_name} on this Redis" in one_line(err)


@pytest.mark.usefixtures("env")
def test_a_fleet_once_paused_or_only_registered_reads_as_known(
    capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    code, _out, err = run(capsys, "--fleet", fleet_name, "pause", "--reason", "x")
    assert code == 0, err
    code, _out, err = run(capsys, "--fleet", fleet_name, "resume")
    assert code == 0, err
    code, out, err = run(capsys, "--fleet", fleet_name, "status", "--json")
    assert code == 0, err
    assert json.loads(out)["state"]["paused"] is False
    # a fleet a replica announced and nothing else (its first replica not yet recorded)
    other = f"{fleet_name}-new"
    sync_redis.zadd(FLEETS_KEY, {other: 1})
    try:
        code, out, err = run(capsys, "--fleet", other, "status")
        assert code == 0, err
        assert "RUNNING" in out
    finally:
        sync_redis.zrem(FLEETS_KEY, other)


async def test_the_api_answers_404_for_a_mistyped_fleet_before_and_after_a_resume_of_it(
    redis_url: str, fleet_name: str
) -> None:
    app = create_app(make_settings(redis_url, fleet_name), run_watcher=False)
    typo = f"{fleet_name}-odrers"
    async with client_for(app) as api:
        resumed = await api.post(f"/api/fleets/{typo}/resume", json={}, headers=auth(ADMIN))
        assert resumed.status_code == 404, resumed.text  # as the CLI's status: exit 6
        for path in (f"/api/fleets/{typo}", f"/api/fleets/{typo}/history"):
            answer = await api.get(path, headers=auth(ADMIN))
            assert answer.status_code == 404, (path, answer.text)
