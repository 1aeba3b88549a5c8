"""The pool demo measures what it claims: nothing starts during the hold, nothing is lost."""

from __future__ import annotations

import subprocess
import sys

from coordinator.demo.pooldemo import run_pool_demo


async def test_the_pool_demo_reports_no_start_during_the_hold_and_nothing_lost() -> None:
    result = await run_pool_demo()
    assert result.ok, result
    assert result.in_flight_at_pause > 0
    assert result.completed == 100 and result.lost == 0 and result.duplicated == 0


def test_the_pool_demo_command_prints_its_figures_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.demo.pooldemo"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "started during the hold 0" in done.stdout
    assert "all checks held" in done.stdout
