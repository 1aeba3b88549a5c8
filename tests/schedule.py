"""The order in which a parallel run's workers get the suite's files: the longest first.

``make test`` runs ``pytest -n 4 --dist loadfile``: each file runs whole on one worker (its
module fixtures, a Sentinel group or a Cluster, start once), and a worker is handed the next
file when it has two tests left. pytest-xdist orders the files by how many tests each holds,
so a file of two 60-second tests (the README's quick benchmark, a failover drill) came last
and ran alone for minutes while the other workers stood idle: the last 5% of the tests took
a third of the run.

``LongestFirst`` hands the files out by their measured seconds, longest first (Graham's
longest-processing-time rule: with files handed to whichever worker frees first, the run ends
within 4/3 of the best order). The seconds are ``tests/durations.json``, written by a run with
``--store-durations`` (every phase of every test of a file, summed, on the worker that ran
it); a file it does not name (a new one) goes first (``UNKNOWN_S``). The figures only order
the work: a stale one makes the run slower, never wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

import pytest
from xdist.scheduler import LoadFileScheduling

DURATIONS_ENV: Final = "FLEETGATE_TEST_DURATIONS"
"""Another table than ``tests/durations.json``, to read and to write (tests/test_schedule.py)."""


def durations_path() -> Path:
    named = os.environ.get(DURATIONS_ENV)
    return Path(named) if named else Path(__file__).resolve().with_name("durations.json")


UNKNOWN_S: Final = float("inf")
"""The seconds of a file ``durations.json`` does not name (a new one): it goes first, since a
short file handed out early costs nothing and a long one handed out last ends the run alone
(a new 90-second test counted as one second did: a minute and a half of tail)."""


def load(path: Path | None = None) -> dict[str, float]:
    """The seconds of each file (``tests/test_x.py``); none when the file is missing or is not
    a JSON object, and no entry that is not a finite number (JSON's ``NaN`` would leave the
    order undefined): ordering is a hint, and a broken table never fails a run."""
    try:
        data: Any = json.loads((path or durations_path()).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(name): float(seconds) for name, seconds in data.items()
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
            and math.isfinite(seconds)}


def order(files: list[str], seconds: dict[str, float]) -> list[str]:
    """``files`` longest first; files of equal seconds keep their order."""
    return sorted(files, key=lambda name: -seconds.get(name, UNKNOWN_S))


class LongestFirst(LoadFileScheduling):
    """``--dist loadfile`` with the files handed out longest first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.seconds = load()
        self._ordered = False

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the queue is complete by the first assignment (schedule())
            units = dict(self.workqueue)
            self.workqueue.clear()
            for name in order(list(units), self.seconds):
                self.workqueue[name] = units[name]
            self._ordered = True
        super()._assign_work_unit(node)


class Recorder:
    """Sums each file's seconds from the test reports (every phase) and, at the end of the
    session, writes them into ``path``, keeping the figures of files this run did not run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.seconds:
            return
        merged = load(self.path)
        merged.update({name: round(s, 1) for name, s in self.seconds.items()})
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
