"""What ``fleetgate`` loads to start: each command only what it uses.

Typer reads every command's signature to build the command line, so the command modules import
typer and the option checks only, and each command loads the library, Redis, pydantic and rich
when it runs. Checked in a fresh interpreter (``sys.modules`` after the command), never by
timing: ``bench/startup.py`` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli.app import main

REPO = Path(__file__).resolve().parents[1]

COMMANDS = ("pause", "resume", "status", "history", "fleets", "enqueue", "serve", "demo")

# What a command line that runs no Redis work never needs: the library (and Redis), the
# settings (pydantic-settings), the tables (rich), the event loop, the web side. (pydantic
# itself is typer's, from 0.29: it coerces a command's parameters with it, so it loads once
# a command's options are read, never for ``fleetgate --help``.)
NOT_FOR_PARSING = (
    "redis", "pydantic_settings", "rich", "asyncio", "fastapi", "uvicorn",
    "coordinator.fleet", "coordinator.settings", "coordinator.render.status",
    "coordinator.render.change", "coordinator.cli.runner", "coordinator.cli.changing",
    "coordinator.cli.multi", "replica.control", "replica.service",
)


# What ``fleetgate status`` never needs: pydantic, which typer (0.29) coerces options with and
# the settings are read with (``coordinator.cli.coercion`` and ``coordinator.cli.lightsettings``
# answer as they would, without it), and rich when it prints to no terminal
# (``coordinator.render.ink`` makes the same text); nor, for a fleet without schedules, the
# cron and time zone readers.
NOT_FOR_STATUS = ("pydantic", "pydantic_core", "pydantic_settings", "typer._adapters",
                  "coordinator.settings", "rich", "cronsim", "zoneinfo")

# What a command that only reads never needs of the library: the changes (and their dry runs),
# the producer, the confirmation by Redis replicas, the wait and the acknowledgements'
# subscription (``Fleet`` makes them on first use); nor the other commands' modules (an app of
# the command named first runs it: ``coordinator.cli.app.build_app``).
NOT_FOR_READING = (
    "coordinator.fleet.changes", "coordinator.fleet.dryrun", "coordinator.fleet.producer",
    "coordinator.fleet.durability", "coordinator.fleet.waiting", "coordinator.fleet.listener",
    "coordinator.fleet.acks", "coordinator.fleet.waitscope", "replica.link.subscription",
    "coordinator.cli.change", "coordinator.cli.enqueue", "coordinator.cli.serve",
    "coordinator.cli.schedule", "coordinator.cli.limits", "coordinator.cli.fleets",
)


def _fleetgate(*argvs: list[str], env: dict[str, str] | None = None) -> tuple[list[int], set[str], str, str]:
    """Run ``main(argv)`` for each ``argv`` in one fresh interpreter: (exit statuses, the
    modules loaded after them, stdout, stderr)."""
    code = (
        "import json, sys\n"
        "from coordinator.cli.app import main\n"
        f"codes = [main(argv) for argv in {list(argvs)!r}]\n"
        "sys.stdout.write('\\n' + json.dumps([codes, sorted(sys.modules)]) + '\\n')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60, check=True, env=env)
    *printed, last = out.stdout.rstrip("\n").split("\n")
    codes, modules = json.loads(last)
    return codes, set(modules), "\n".join(printed), out.stderr


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_fleetgate_help_lists_every_command_and_loads_no_redis_pydantic_or_rich() -> None:
    codes, modules, out, _ = _fleetgate(["--help"])
    assert codes == [0]
    assert all(f"  {command} " in out for command in COMMANDS), out
    assert _loaded(modules, (*NOT_FOR_PARSING, "pydantic")) == []


def test_each_commands_help_loads_no_redis_pydantic_or_rich() -> None:
    codes, modules, out, _ = _fleetgate(*([command, "--help"] for command in COMMANDS))
    assert codes == [0] * len(COMMANDS)
    assert "--reason" in out and "--all-fleets" in out and "--interval" in out  # the options
    assert _loaded(modules, NOT_FOR_PARSING) == []


def test_a_usage_error_is_one_line_and_exit_2_without_loading_redis() -> None:
    codes, modules, _, err = _fleetgate(["no-such-command"], ["status", "--interval", "0"])
    assert codes == [2, 2]
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("fleetgate: ") for line in lines), err
    assert "No such command" in lines[0] and "--interval" in lines[1]
    assert _loaded(modules, NOT_FOR_PARSING) == []


def test_status_loads_neither_the_change_commands_nor_the_web_side(
    capsys: pytest.CaptureFixture[str], env: None, redis_url: str, fleet_name: str
) -> None:
    assert main(["pause", "--reason", "start-up"]) == 0  # a fleet that exists
    capsys.readouterr()
    environ = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_FLEET": fleet_name}
    codes, modules, out, err = _fleetgate(["status"], env=environ)
    assert codes == [0], err
    assert out.split()[:3] == ["PAUSED", "fleet", fleet_name], out
    assert _loaded(modules, (
        "coordinator.cli.multi", "coordinator.cli.changing", "coordinator.render.change",
        "coordinator.render.history", "coordinator.web", "coordinator.notify",
        "coordinator.demo", "fastapi", "uvicorn", "starlette", *NOT_FOR_STATUS,
        *NOT_FOR_READING,
    )) == []


def test_fleetgate_status_loads_no_change_wait_or_other_command_machinery(
    capsys: pytest.CaptureFixture[str], env: None, redis_url: str, fleet_name: str
) -> None:
    assert main(["pause", "--reason", "start-up"]) == 0
    capsys.readouterr()
    environ = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_FLEET": fleet_name}
    codes, modules, _, err = _fleetgate(["status"], ["status", "--json"], env=environ)
    assert codes == [0, 0], err
    assert _loaded(modules, NOT_FOR_READING) == []
    assert "coordinator.fleet.fleet" in modules  # it did read, through Fleet


def test_a_global_option_before_the_command_still_runs_it(
    capsys: pytest.CaptureFixture[str], env: None, redis_url: str, fleet_name: str
) -> None:
    assert main(["--fleet", fleet_name, "pause", "--reason", "global first"]) == 0
    capsys.readouterr()
    assert main(["--redis-url", redis_url, "--fleet", fleet_name, "status"]) == 0
    assert capsys.readouterr().out.split()[:3] == ["PAUSED", "fleet", fleet_name]


@pytest.mark.parametrize("command", [*COMMANDS, "schedule", "limits"])
def test_an_app_of_one_command_says_what_the_whole_app_says_of_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``build_app(command)`` (what runs ``fleetgate COMMAND ...``) against the whole app: the
    same help and the same usage error."""
    from coordinator.cli.app import build_app

    answers = []
    for only in (None, command):
        for argv in ([command, "--help"], [command, "--no-such-option"]):
            try:
                build_app(only)(args=argv, prog_name="fleetgate", standalone_mode=False)
            except Exception as exc:  # typer's usage error
                answers.append((type(exc).__name__, getattr(exc, "exit_code", None), str(exc)))
            answers.append(capsys.readouterr().out)
    whole, alone = answers[: len(answers) // 2], answers[len(answers) // 2:]
    assert whole == alone
    assert f"Usage: fleetgate {command}" in str(alone[0])


def test_the_fleets_limit_typer_reads_is_the_overviews_maximum() -> None:
    """``fleets --limit`` is bounded at start-up, before the library is loaded: by a copy of
    ``coordinator.fleet.overview.MAX_LISTED`` that must stay equal to it."""
    from coordinator.cli.fleets import MAX_LISTED
    from coordinator.fleet.overview import MAX_LISTED as LIBRARY_MAX

    assert MAX_LISTED == LIBRARY_MAX
