"""``python -m bench.chaos``: a chaos run, its check, the table and the last line.

    python -m bench.chaos --seed 7 --duration 600 --replicas 3 --topology single
    python -m bench.chaos --seed commit --topology seed --duration 60   # `make test`'s run
    python -m bench.chaos --seed 7 --duration 600 --topology sentinel    # failovers too
    python -m bench.chaos --check /tmp/fleetgate-chaos-7-x/history   # check a kept history

Exit status: 0 when every rule held, 1 when one broke (or the run could not complete), 2 for
bad usage. Bad usage is one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from bench.chaos.checker import check
from bench.chaos.history import read_history
from bench.chaos.report import last_line, table
from bench.chaos.runner import ChaosRun
from bench.chaos.settings import SINGLE, TOPOLOGIES, ChaosSettings, topology_of_seed
from replica.process.shutdown import RECANCEL_EVERY_S

EXIT_OK = 0
EXIT_BROKEN = 1
EXIT_USAGE = 2
SEED_TOPOLOGY = "seed"
SLACK_S = 400.0
"""How far past ``--duration`` a run may go (setup, settling, draining, stopping) before it is
cut off."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"chaos: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def commit_seed() -> tuple[int, str]:
    """A seed that changes with the commit (``git rev-parse HEAD``), else with the time."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        return int(sha[:8], 16), f"commit {sha[:12]}"
    except (OSError, subprocess.SubprocessError, ValueError):
        return int(time.time()), "the time (not a git checkout)"


def _seed(text: str) -> int:
    if text == "commit":
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a seed: {text!r} (an integer, or 'commit')") from None
    if value < 0:
        raise argparse.ArgumentTypeError("the seed must not be negative")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=_seed, default=None,
                   help="the schedule's seed (default: from the time); 'commit' derives it "
                        "from git rev-parse HEAD")
    p.add_argument("--duration", type=_positive, default=600.0,
                   help="seconds of chaos (default 600)")
    p.add_argument("--replicas", type=int, default=3, help="replicas (default 3)")
    p.add_argument("--topology", default=SINGLE,
                   help="single (one Redis), sentinel (a Sentinel group: a primary, a replica, "
                        "three sentinels), cluster (three primaries, three replicas), or seed "
                        "(one of the three, chosen by the seed: make test's run covers each "
                        "in turn)")
    p.add_argument("--rate", type=_positive, default=40.0, help="items enqueued per second")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the history and logs go (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--strict", action="store_true",
                   help="fail on the counterexamples of known product defects too "
                        "(bench/chaos/verdict.py KNOWN; none at present)")
    p.add_argument("--check", type=Path, default=None, metavar="HISTORY",
                   help="only check a kept history (a directory of .jsonl files)")
    return p


def report(events_dir: Path, seed: int, duration: float, topology: str, strict: bool) -> bool:
    result = check(read_history(events_dir), strict=strict)
    print("\n".join(table(result)))
    print(last_line(result, seed, duration, topology), flush=True)
    return result.ok


def _check_only(where: Path, strict: bool) -> int:
    if not where.exists():
        print(f"chaos: no history at {where}", file=sys.stderr)
        return EXIT_USAGE
    events = read_history(where)
    header = next((e for e in events if e["ev"] == "run"), {})
    ok = report(where, int(header.get("seed", 0)), float(header.get("duration", 0)),
                str(header.get("topology", SINGLE)), strict)
    return EXIT_OK if ok else EXIT_BROKEN


async def _run(run: ChaosRun, budget: float) -> None:
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:

        def stop() -> None:
            # One cancellation is not enough: redis-py can swallow one that lands inside a call
            # (replica.link.redisio.uncancelled). Cancel again until the run is cleaning up.
            if not main.done() and not run.cleaning:
                main.cancel()
                loop.call_later(RECANCEL_EVERY_S, stop)

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, stop)
    async with asyncio.timeout(budget):
        await run.run()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("bench").setLevel(logging.WARNING)  # the product's warnings are expected
    if args.check is not None:
        return _check_only(args.check, args.strict)
    if args.topology not in (*TOPOLOGIES, SEED_TOPOLOGY):
        print(f"chaos: unknown topology {args.topology!r} (single, sentinel, cluster or seed)",
              file=sys.stderr)
        return EXIT_USAGE
    if not 1 <= args.replicas <= 20:
        print("chaos: --replicas must be between 1 and 20", file=sys.stderr)
        return EXIT_USAGE
    if args.seed is None:
        seed, origin = int(time.time()), "the time"
    elif args.seed == -1:
        seed, origin = commit_seed()
    else:
        seed, origin = args.seed, "--seed"
    topology = topology_of_seed(seed) if args.topology == SEED_TOPOLOGY else args.topology
    args.topology = topology
    print(f"chaos: seed={seed} (from {origin}), duration {args.duration:g}s, "
          f"{args.replicas} replicas, topology {topology}", flush=True)
    settings = ChaosSettings(seed=seed, duration=args.duration, replicas=args.replicas,
                             topology=args.topology, rate=args.rate, workdir=args.workdir,
                             keep=args.keep)
    run = ChaosRun(settings)
    completed = False
    try:
        asyncio.run(_run(run, args.duration + SLACK_S))
        completed = True
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("chaos: interrupted; every process of the run was stopped", file=sys.stderr)
    except TimeoutError:
        print(f"chaos: the run took longer than {args.duration + SLACK_S:g}s; stopped",
              file=sys.stderr)
    except Exception as exc:  # said in one line; the history tells the rest
        print(f"chaos: the run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    ok = report(run.history_dir, seed, args.duration, args.topology, args.strict)
    ok = ok and completed
    if ok and not args.keep and args.workdir is None:
        run.discard()
    else:
        print(f"chaos: history and logs in {run.workdir}", file=sys.stderr)
    return EXIT_OK if ok else EXIT_BROKEN


if __name__ == "__main__":
    raise SystemExit(main())
