"""``make test``'s seeded chaos run (docs/chaos.md): ``make chaos-ci``, 60 s of faults on the
topology its seed chooses (the seed comes from the commit), run as one of the suite's tests so
that it runs beside the others instead of before them. Its first and last lines (the seed, the
topology and the verdict) are printed at the end of the run, passed or failed; a failure shows
the whole table, and ``python -m bench.chaos --seed N --topology T`` replays it."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_chaos_runner import LAST_LINE

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 420
"""A hang guard, not a measurement: 60 s of faults, the topology's start and the checker took
80 s alone here; beside the suite's other workers on 2 cores, more."""
FIRST_LINE = re.compile(r"chaos: seed=\d+ \(from .+\), duration 60s, .*topology \w+")


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_seeded_chaos_run_of_make_test_holds_every_rule(
    record_property: Callable[[str, object], None],
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "chaos-ci"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = done.stdout.splitlines()
    said = [line for line in lines if FIRST_LINE.fullmatch(line) or LAST_LINE.fullmatch(line)]
    for line in said:  # printed by conftest.py's terminal summary
        record_property("summary", line)
    assert done.returncode == 0 and said and LAST_LINE.fullmatch(lines[-1]), (
        done.stdout[-6000:] + done.stderr[-3000:])
    assert lines[-1].endswith(": ok"), done.stdout[-6000:]
