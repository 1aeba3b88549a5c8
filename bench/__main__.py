"""`make bench`: run every benchmark, print a table, write JSON to bench/results/ (or to
``FLEETGATE_BENCH_RESULTS``). A benchmark that fails (a machine too loaded for 5,000 replicas)
is a ``FAILED`` row with its error; the others still run, and the exit status is 1."""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MODULES = ["bench.pool", "bench.fanout", "bench.durability", "bench.failover", "bench.bigfleet",
           "bench.changecost",
           "bench.startup", "bench.backlog"]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def main(argv: list[str]) -> int:
    wanted = argv or MODULES
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for name in wanted:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(module.run())
        except Exception as exc:  # one benchmark's failure is a row, not the end
            # the others still run and the results are still written; the exit status says it
            said = " ".join(str(exc).split()) or type(exc).__name__
            print(f"FAILED {name}: {type(exc).__name__}: {said}", file=sys.stderr, flush=True)
            traceback.print_exc()
            failed.append(name)
            rows.append({"bench": name.removeprefix("bench."), "case": f"FAILED: {said}",
                         "value": None, "unit": None, "baseline": None, "ratio": None,
                         "goal": None})
    # FLEETGATE_BENCH_RESULTS: where the JSON goes (the suite's quick run writes to a directory
    # of its own, never over a real run's bench/results/latest.json)
    out = Path(os.environ.get("FLEETGATE_BENCH_RESULTS") or Path(__file__).parent / "results")
    out.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    payload = {"when": stamp, "python": platform.python_version(), "machine": platform.machine(), "rows": rows}
    (out / f"bench-{stamp}.json").write_text(json.dumps(payload, indent=2))
    (out / "latest.json").write_text(json.dumps(payload, indent=2))
    header = ["bench", "case", "value", "unit", "baseline", "ratio", "goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(_fmt(row.get(h)) for h in header) + " |")
    print(f"\nwritten: {out / ('bench-' + stamp + '.json')}")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
