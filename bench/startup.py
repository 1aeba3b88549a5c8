"""Start-up cost of the CLI: `fleetgate --help` and `fleetgate status` against importing redis.

Each command runs as a fresh process, as an operator runs it; the baseline is a process that
only imports ``redis.asyncio`` (what any Redis client in Python pays). Rounds alternate between
the baseline and the commands, so a load on the machine weighs on both alike; the medians and
their ratio are reported.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import QUICK
from coordinator.demo.localredis import LocalRedis

ROUNDS = 5 if QUICK else 15
FLEETGATE = str(Path(sys.executable).with_name("fleetgate"))


def _once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=60)
    return time.perf_counter() - t0


def run() -> list[dict[str, Any]]:
    with LocalRedis() as server:
        env = {**os.environ, "FLEETGATE_REDIS_URL": server.url, "FLEETGATE_FLEET": "startup"}
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
            "case": f"{name}: process start to exit (median of {ROUNDS})",
            "value": round(value * 1000, 1),
            "unit": "ms",
            "baseline": round(base * 1000, 1),
            "ratio": round(value / base, 2),
            "goal": "baseline: python -c 'import redis.asyncio'",
        })
    return rows
