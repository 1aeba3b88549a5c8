"""Start-up cost of the CLI: `fleetgate --help` and `fleetgate status` against importing redis.

Each command runs as a fresh process, as an operator runs it; the baseline is a process that
only imports ``redis.asyncio`` (what any Redis client in Python pays). Rounds alternate between
the baseline and the commands, so a load on the machine weighs on both alike; the medians and
their ratio are reported.

Every process runs with a bytecode cache of its own (``PYTHONPYCACHEPREFIX``, a temporary
directory filled by the warm-up run; ``PYTHONDONTWRITEBYTECODE`` dropped), as an installed
package runs with the ``.pyc`` files pip wrote: without one (a checkout run with
``PYTHONDONTWRITEBYTECODE=1``) every start compiles fleetgate's own modules (some 55 for
``status``) from source, a cost no operator pays, while the baseline's ``redis`` has its
``.pyc`` in site-packages.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import QUICK
from coordinator.demo.localredis import LocalRedis

ROUNDS = 2 if QUICK else 15
FLEETGATE = str(Path(sys.executable).with_name("fleetgate"))


def _once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=60)
    return time.perf_counter() - t0


def run() -> list[dict[str, Any]]:
    with LocalRedis() as server, tempfile.TemporaryDirectory(prefix="fleetgate-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(FLEETGATE_REDIS_URL=server.url, FLEETGATE_FLEET="startup",
                   PYTHONPYCACHEPREFIX=pyc)
        # a fleet that exists (status of a fleet never seen exits 6): paused once, resumed
        _once([FLEETGATE, "pause", "--reason", "bench start-up"], env)
        _once([FLEETGATE, "resume"], env)
        cases = {
            "baseline": [sys.executable, "-c", "import redis.asyncio"],
            "fleetgate --help": [FLEETGATE, "--help"],
            "fleetgate status": [FLEETGATE, "status"],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for argv in cases.values():  # warm the page cache and the bytecode
            _once(argv, env)
        for _ in range(ROUNDS):
            for name, argv in cases.items():
                times[name].append(_once(argv, env))
    base = statistics.median(times["baseline"])
    rows: list[dict[str, Any]] = []
    for name in ("fleetgate --help", "fleetgate status"):
        value = statistics.median(times[name])
        rows.append({
            "bench": "startup",
            "case": f"{name}: process start to exit, bytecode cached (median of {ROUNDS})",
            "value": round(value * 1000, 1),
            "unit": "ms",
            "baseline": round(base * 1000, 1),
            "ratio": round(value / base, 2),
            "goal": "at most 1.5x the baseline: python -c 'import redis.asyncio'",
        })
    return rows
