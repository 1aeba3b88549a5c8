"""Both sides stamp their log lines alike: ISO 8601 UTC with milliseconds, as the contract
stamps time (`2026-12-01T19:47:33.808Z`), so a replica's and the coordinator's logs interleave
by sorting. Real `fleetgate-replica` and `fleetgate serve` processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.demo.localredis import free_port
from tests.procs import Processes

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")
BIN = Path(sys.executable).parent


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the process's first log line is the event waited on
    return line


@pytest.mark.parametrize("command", ["replica", "serve"])
def test_the_first_log_line_of_each_side_is_stamped_in_iso_8601_utc_with_milliseconds(
    command: str, redis_url: str, fleet_name: str, processes: Processes
) -> None:
    env = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_FLEET": fleet_name,
           "FLEETGATE_ADMIN_TOKEN": "t" * 24}
    if command == "replica":
        args = [str(BIN / "fleetgate-replica"), "--replica-id", "log-1", "--handler",
                "replica.demo:sleep", "--port", "0"]
    else:
        args = [str(BIN / "fleetgate"), "serve", "--port", str(free_port())]
    proc = processes.start(args, env=env)
    line = _first_line(proc)
    assert STAMP.match(line), line
