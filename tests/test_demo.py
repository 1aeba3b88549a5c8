"""`fleetgate demo`: a real fleet on one machine, with the checks it prints.

The demo on a Redis of its own is `make demo`, run by tests/test_readme.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coordinator.localredis import free_port

pytestmark = pytest.mark.slow


def _run_demo(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "demo"],
        env={**os.environ, **env, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_demo_pauses_a_real_fleet_mid_run_and_loses_nothing(redis_url: str) -> None:
    done = _run_demo({"FLEETGATE_REDIS_URL": redis_url})
    out = done.stdout
    assert done.returncode == 0, out[-2000:] + done.stderr[-2000:]
    assert "items started during the hold   0" in out
    assert "completed                       600/600" in out
    assert "lost                            0" in out
    assert "all checks held" in out
    for i in (1, 2, 3):
        assert f"replica-{i}" in out
    assert "admin token (shown once)" in out


def test_the_demo_exits_one_with_one_line_when_redis_cannot_be_reached() -> None:
    done = _run_demo({"FLEETGATE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, timeout=90)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fleetgate demo:"), done.stderr
    assert "Traceback" not in done.stderr
