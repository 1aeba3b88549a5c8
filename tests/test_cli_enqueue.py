"""``fleetgate enqueue``: only JSON goes in (issue 11 B.6).

A line that is not JSON by the standard is a usage error naming its line (exit 2, one line,
nothing enqueued): ``NaN``, ``Infinity``, ``-Infinity``, a number too large for a float, and a
text nested too deep to parse (exit 1 is for Redis unreachable).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis as syncredis

from replica.contract import Keys
from tests.clikit import one_line, run
from tests.fleetkit import run_cli


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, redis_url: str, fleet_name: str) -> None:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("FLEETGATE_FLEET", fleet_name)


def test_a_line_nested_975_deep_is_a_usage_error_naming_the_line(
    env: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, sync_redis: syncredis.Redis,
    fleet_name: str,
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"ok": 1}\n' + "[" * 975 + "]" * 975 + "\n")
    code, _, err = run(capsys, "enqueue", "--file", str(path))
    assert code == 2
    line = one_line(err)
    assert "line 2" in line and "nested too deep" in line
    assert sync_redis.xlen(Keys(fleet_name).work) == 0


@pytest.mark.parametrize(
    "bad", ["NaN", "Infinity", "-Infinity", '{"score": NaN}', "[1, Infinity]", "1e999", '{"x": -1e400}']
)
def test_a_line_with_a_number_json_does_not_have_is_a_usage_error_naming_the_line(
    env: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, sync_redis: syncredis.Redis,
    fleet_name: str, bad: str,
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(f'{{"ok": 1}}\n\n{bad}\n{{"ok": 2}}\n')
    code, _, err = run(capsys, "enqueue", "--file", str(path))
    assert code == 2
    assert "line 3: not JSON" in one_line(err)
    assert sync_redis.xlen(Keys(fleet_name).work) == 0


def test_the_console_script_refuses_nan_on_stdin_with_exit_2(redis_url: str, fleet_name: str) -> None:
    done = run_cli("enqueue", "--file", "-", stdin="1\nNaN\n", redis_url=redis_url, fleet=fleet_name)
    assert done.returncode == 2
    assert "stdin line 2: not JSON" in one_line(done.stderr)


def test_arguments_that_are_not_strict_json_go_in_as_strings(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    code, _, err = run(capsys, "enqueue", "NaN", "[1, Infinity]", "1.5")
    assert code == 0, err
    entries = sync_redis.xrange(Keys(fleet_name).work)
    assert [f["item"] for _, f in entries] == ['"NaN"', '"[1, Infinity]"', "1.5"]
    assert [json.loads(f["item"]) for _, f in entries] == ["NaN", "[1, Infinity]", 1.5]


def test_an_argument_nested_too_deep_is_a_usage_error(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "enqueue", "[" * 5000 + "]" * 5000)
    assert code == 2
    assert "nested too deep" in one_line(err)
