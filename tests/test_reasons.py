"""replica.contract.reasons: one rule for what an operator writes (a reason, a name), and the
library, the CLI and the API holding to it alike.

One table of inputs; for each, the contract's verdict, and the same verdict from
``Fleet.pause``/``resume`` (ContractError before anything is sent), from ``fleetgate pause``/
``resume`` (exit 2 with one line on stderr) and from ``POST /api/fleet/pause``/``resume`` (422).
"""

from __future__ import annotations

import json

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.cli.app import main
from replica.contract import (
    MAX_BY,
    MAX_REASON,
    FleetState,
    check_by,
    check_optional_reason,
    check_reason,
)
from replica.errors import ContractError
from tests.apikit import ADMIN, auth

# (id, text, accepted): what an operator may type as a reason.
REASONS: list[tuple[str, str, bool]] = [
    ("words", "db maintenance", True),
    ("padded", "  db maintenance \t", True),
    ("one character", "x", True),
    ("500 characters", "x" * MAX_REASON, True),
    ("500 characters padded", "  " + "x" * MAX_REASON + "  ", True),
    ("emoji", "deploy \N{CONSTRUCTION SIGN} in progress", True),
    ("accents and scripts", "mise à jour, обновление, 更新", True),
    ("markup-like", "[bold]see[/bold] runbook", True),
    ("empty", "", False),
    ("blanks", "   ", False),
    ("tab and newline only", "\t\n", False),
    ("501 characters", "x" * (MAX_REASON + 1), False),
    ("tab inside", "db\tmaintenance", False),
    ("newline inside", "db\nmaintenance", False),
    ("carriage return", "db\rmaintenance", False),
    ("NUL", "db\x00maintenance", False),
    ("escape sequence", "db \x1b[31mmaintenance", False),
    ("DEL", "db\x7fmaintenance", False),
    ("C1 control", "db\x9bmaintenance", False),
    ("lone surrogate", "db\ud800maintenance", False),
    ("line separator", "db\u2028maintenance", False),
    ("zero-width space", "db\u200bmaintenance", False),
    ("no-break space inside", "db\u00a0maintenance", False),
]
CASES = [pytest.param(value, ok, id=name) for name, value, ok in REASONS]


# ---------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(("value", "ok"), CASES)
def test_the_contract_accepts_a_reason_of_1_to_500_printable_characters_stripped(
    value: str, ok: bool
) -> None:
    if ok:
        assert check_reason(value) == value.strip()
        assert check_optional_reason(value) == value.strip()
    else:
        with pytest.raises(ContractError) as caught:
            check_reason(value)
        assert isinstance(caught.value, ValueError)
        message = str(caught.value)
        assert message.startswith("reason must be 1 to 500 printable characters")
        assert message.isprintable() and len(message) < 200  # never the input itself


def test_a_reason_that_is_not_text_is_refused_and_an_absent_one_is_none() -> None:
    for value in (None, 5, b"bytes", ["x"]):
        with pytest.raises(ContractError):
            check_reason(value)
    assert check_optional_reason(None) is None


@pytest.mark.parametrize(
    ("value", "ok"),
    [("alice", True), ("  alice  ", True), ("x" * MAX_BY, True), ("Zoë O'Brien", True),
     ("", False), ("  ", False), ("x" * (MAX_BY + 1), False), ("al\nice", False),
     ("al\x00ice", False), ("al\ud800ice", False), ("al\x1b[2Jice", False)],
)
def test_the_contract_accepts_a_name_of_1_to_100_printable_characters(
    value: str, ok: bool
) -> None:
    if ok:
        assert check_by(value) == value.strip()
    else:
        with pytest.raises(ContractError, match=r"^by must be 1 to 100 printable characters"):
            check_by(value)


# ---------------------------------------------------------------------------- the library


@pytest.mark.parametrize(("value", "ok"), CASES)
async def test_the_library_holds_to_the_rule_for_a_pause_and_a_resume(
    redis: aioredis.Redis, fleet_name: str, value: str, ok: bool
) -> None:
    fleet = Fleet(redis, fleet_name)
    if not ok:
        with pytest.raises(ContractError, match=r"^reason must be"):
            await fleet.pause(value, by="t")
        await fleet.pause("so that a resume changes something", by="t")
        with pytest.raises(ContractError, match=r"^reason must be"):
            await fleet.resume(by="t", reason=value)
        assert (await fleet.state()).paused  # neither reached Redis
        return
    state = await fleet.pause(value, by="t")
    assert state.reason == value.strip()
    await fleet.resume(by="t", reason=value)
    (resumed, paused) = await fleet.history(limit=2)
    assert resumed.reason == paused.reason == value.strip()


async def test_the_library_takes_a_resume_without_a_reason_and_checks_by(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("x", by="  alice  ")
    (event,) = await fleet.history(limit=1)
    assert event.by == "alice"
    for bad in ("", "x" * (MAX_BY + 1), "al\x1bice"):
        with pytest.raises(ContractError, match=r"^by must be"):
            await fleet.pause("x", by=bad)
        with pytest.raises(ContractError, match=r"^by must be"):
            await fleet.resume(by=bad)
    await fleet.resume(by="bob")
    (event,) = await fleet.history(limit=1)
    assert (event.action, event.reason, event.by) == ("resume", "", "bob")


# ---------------------------------------------------------------------------- the CLI


def _cli(capsys: pytest.CaptureFixture[str], redis_url: str, fleet: str, *argv: str) -> tuple[int, str]:
    code = main(["--redis-url", redis_url, "--fleet", fleet, *argv])
    _out, err = capsys.readouterr()
    return code, err


def _paused(capsys: pytest.CaptureFixture[str], redis_url: str, fleet: str) -> bool:
    code = main(["--redis-url", redis_url, "--fleet", fleet, "status", "--json"])
    out = capsys.readouterr().out
    if code == 6:  # a fleet never seen: a refused first pause wrote nothing at all
        return False
    assert code == 0
    paused: bool = json.loads(out)["state"]["paused"]
    return paused


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert lines[0].startswith("fleetgate: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("value", "ok"), CASES)
def test_the_cli_holds_to_the_rule_for_a_pause_and_a_resume(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet_name: str, value: str, ok: bool
) -> None:
    code, err = _cli(capsys, redis_url, fleet_name, "pause", "--reason", value, "--by", "t")
    if ok:
        assert code == 0, err
    else:
        assert code == 2
        assert "reason must be 1 to 500 printable characters" in _one_line(err)
        assert not _paused(capsys, redis_url, fleet_name)
        code, err = _cli(capsys, redis_url, fleet_name, "pause", "--reason", "first", "--by", "t")
        assert code == 0, err
    code, err = _cli(capsys, redis_url, fleet_name, "resume", "--reason", value, "--by", "t")
    if ok:
        assert code == 0, err
    else:
        assert code == 2
        assert "reason must be 1 to 500 printable characters" in _one_line(err)
    assert _paused(capsys, redis_url, fleet_name) is not ok


def test_the_cli_checks_by_with_the_same_rule(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet_name: str
) -> None:
    for bad in ("", "x" * (MAX_BY + 1), "al\x1bice"):
        code, err = _cli(capsys, redis_url, fleet_name, "pause", "--reason", "x", "--by", bad)
        assert code == 2
        assert "--by must be 1 to 100 printable characters" in _one_line(err)


# ---------------------------------------------------------------------------- the API


@pytest.mark.parametrize(("value", "ok"), CASES)
async def test_the_api_holds_to_the_rule_for_a_pause_and_a_resume(
    api: httpx.AsyncClient, redis: aioredis.Redis, fleet_name: str, value: str, ok: bool
) -> None:
    fleet = Fleet(redis, fleet_name)
    body = json.dumps({"reason": value})  # ASCII-escaped: a lone surrogate travels as \\ud800
    headers = {**auth(ADMIN), "Content-Type": "application/json"}
    response = await api.post("/api/fleet/pause", headers=headers, content=body)
    if ok:
        assert response.status_code == 200, response.text
        assert (await fleet.state()).reason == value.strip()
    else:
        assert response.status_code == 422, response.text
        assert await fleet.state() == FleetState.initial(fleet_name)
        await fleet.pause("first", by="t")
    response = await api.post("/api/fleet/resume", headers=headers, content=body)
    assert response.status_code == (200 if ok else 422), response.text
    assert (await fleet.state()).paused is not ok
    response = await api.post("/api/fleet/resume", headers=auth(ADMIN), json={})
    assert response.status_code == 200  # and without a reason
