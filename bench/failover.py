"""Failover benchmarks (issue 12 section 4), on real replicated topologies (``bench.topology``).

* Following a failover: SIZE controllers (10, 100) of one fleet, spread over worker processes
  (many ``FleetController``s per process, as in ``bench.fanout``), each on a client of its own
  from ``replica.link.connect`` (the replica service's options), at the defaults
  (``poll_interval`` 1 s). The primary that holds the fleet is killed (SIGKILL); the figure is
  the time from the kill to the last controller *following* the new primary: the first record
  it writes there (its ``heartbeat_at``, this host's clock) that says ``control: connected``
  with the fleet's version applied. Read from the new primary every 20 ms. The baseline is
  Redis's own failover in the same round: from the kill to the new primary answering
  ``role:master`` and named by every sentinel (Sentinel) or serving the fleet's slot with
  ``cluster_state:ok`` on every node (Cluster). One kill per topology and size, on a topology
  of its own (a failover takes 2 to 3 s here: ``down-after-milliseconds``/``cluster-node-timeout``
  1000).
* Acknowledged fan-out on a cluster: ``Fleet.pause()`` to every controller acknowledging it
  applied and is quiet, the controllers on sharded pub/sub (``SSUBSCRIBE``); the baseline, in
  alternating rounds, is one ``SPUBLISH`` reaching as many plain redis-py shard subscribers on
  the node that serves the fleet's slot. ``WAIT`` is off here (``bench.durability`` measures it).

Run with ``python -m bench bench.failover`` (or ``make bench``). Worker processes are this
module run as ``python -m bench.failover ctl ...`` and ``bench.workers``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

from bench import QUICK
from bench.fanout import PROCESSES, _pause_rounds, _split, _stop_fleet
from bench.redisnode import Node
from bench.topology import Cluster, SentinelGroup, binaries_found
from bench.workers import ROOT, RawSubscribers, run_controllers
from bench.workers import expect as _expect
from coordinator import Fleet
from replica.contract import Keys, parse_time
from replica.link.connect import connect

SIZES: Final = (10,) if QUICK else (10, 100)
FANOUT_ROUNDS: Final = 2 if QUICK else 15
WARMUP: Final = 1 if QUICK else 2
SETTLE_S: Final = 0.05
READ_EVERY_S: Final = 0.02
FOLLOW_TIMEOUT_S: Final = 120.0
Topology = SentinelGroup | Cluster


# ---------------------------------------------------------------------------- workers


async def _ctl_worker(url: str, fleet: str, prefix: str, n: int) -> None:
    """n idle pools, each with a controller and a client of its own, until STOP on stdin."""
    clients = [connect(url, decode_responses=True, socket_connect_timeout=5.0,
                       socket_timeout=10.0, health_check_interval=30) for _ in range(n)]
    await run_controllers(clients, fleet, prefix, start_batch=25, start_timeout=60.0)


# ---------------------------------------------------------------------------- parent side


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.failover", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )


async def _start_fleet(url: str, fleet: str, size: int) -> tuple[list[asyncio.subprocess.Process], list[str]]:
    split = _split(size)
    procs = [await _spawn("ctl", url, fleet, f"p{i}", str(n)) for i, n in enumerate(split)]
    await asyncio.gather(*(_expect(p, "READY") for p in procs))
    return procs, [f"p{i}-{k}" for i, n in enumerate(split) for k in range(n)]


def _holder(topo: Topology, fleet: str) -> Node:
    """The node that holds the fleet's keys now."""
    if isinstance(topo, Cluster):
        return topo.primary_for(Keys(fleet).state)
    return topo.master()


def _fail_over(topo: Topology, old: Node, fleet: str) -> Node:
    if isinstance(topo, Cluster):
        return topo.wait_for_failover(old, Keys(fleet).state, timeout=60)
    return topo.wait_for_failover(old, timeout=60)


def _following(node: Node, fleet: str, ids: Sequence[str], version: int, after: float,
               firsts: dict[str, float]) -> bool:
    """Note in ``firsts`` each replica's first record on ``node`` written after ``after`` that
    says it is connected at ``version``; True once every one has one."""
    keys = Keys(fleet)
    with node.client() as c:
        pipe = c.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(keys.replica(i), "heartbeat_at", "control", "applied_version")
        rows = pipe.execute()
    for i, (beat, control, applied) in zip(ids, rows, strict=True):
        at = parse_time(beat)
        if i in firsts or at is None or control != "connected" or applied != str(version):
            continue
        if at.timestamp() > after:
            firsts[i] = at.timestamp()
    return len(firsts) == len(ids)


async def _until_following(node: Node, fleet: str, ids: Sequence[str], version: int,
                           after: float) -> dict[str, float]:
    firsts: dict[str, float] = {}
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S
    while not await asyncio.to_thread(_following, node, fleet, ids, version, after, firsts):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ids) - len(firsts)} of {len(ids)} controllers did not "
                               f"follow v{version} on {node} within {FOLLOW_TIMEOUT_S:g}s")
        await asyncio.sleep(READ_EVERY_S)
    return firsts


async def _failover_round(topo: Topology, kind: str, size: int) -> dict[str, Any]:
    """One kill of the fleet's primary under ``size`` controllers: the row."""
    name = f"bench-fo-{size}-{uuid.uuid4().hex[:6]}"
    admin = connect(topo.url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2)
    fleet = Fleet(admin, name, min_replicas_ack=0)
    procs: list[asyncio.subprocess.Process] = []
    try:
        await fleet.pause("bench", by="bench")
        version = (await fleet.resume(by="bench")).version
        procs, ids = await _start_fleet(topo.url, name, size)
        old = await asyncio.to_thread(_holder, topo, name)
        await _until_following(old, name, ids, version, 0.0)
        await asyncio.to_thread(topo.wait_in_sync)
        killed = time.time()
        old.kill()
        new = await asyncio.to_thread(_fail_over, topo, old, name)
        promoted = time.time()
        firsts = await _until_following(new, name, ids, version, killed)
    finally:
        await _stop_fleet(procs)
        await admin.aclose()
    follow = (max(firsts.values()) - killed) * 1000
    failover = (promoted - killed) * 1000
    median = (statistics.median(firsts.values()) - killed) * 1000
    print(f"  {kind} {size}: failover {failover:.0f} ms, every controller following "
          f"{follow:.0f} ms (median {median:.0f} ms)", file=sys.stderr, flush=True)
    return {
        "bench": "failover",
        "case": f"primary killed -> every controller following the new one, {kind}, {size} replicas",
        "value": follow, "unit": "ms", "baseline": failover,
        "ratio": follow / failover if failover else None,
        "goal": "baseline: Redis's own failover (kill -> new primary serving)",
    }


async def _cluster_fanout(cluster: Cluster, size: int) -> dict[str, Any]:
    name = f"bench-sfan-{size}-{uuid.uuid4().hex[:6]}"
    admin = connect(cluster.url, decode_responses=True, socket_timeout=10)
    fleet = await Fleet(admin, name, wait_poll_interval=0.5, min_replicas_ack=0).listen()
    procs: list[asyncio.subprocess.Process] = []
    raw_times: list[float] = []
    times: list[float] = []
    try:
        procs, _ = await _start_fleet(cluster.url, name, size)
        node = await asyncio.to_thread(cluster.primary_for, Keys(name).state)
        async with RawSubscribers(f"redis://{node.host}:{node.port}/0",
                                  f"fleetgate-bench-raw-{{{name}}}", size, PROCESSES,
                                  sharded=True) as raw:
            for r in range(WARMUP + FANOUT_ROUNDS):
                await asyncio.sleep(SETTLE_S)  # neither starts in the other's tail
                raw_time = await raw.round()
                await asyncio.sleep(SETTLE_S)
                (ack_time,) = await _pause_rounds(fleet, size, 1)
                if r >= WARMUP:
                    raw_times.append(raw_time)
                    times.append(ack_time)
    finally:
        await _stop_fleet(procs)
        await fleet.aclose()
        await admin.aclose()
    ack, base = statistics.median(times), statistics.median(raw_times)
    print(f"  cluster fan-out {size}: SPUBLISH {base:.1f} ms, ack {ack:.1f} ms",
          file=sys.stderr, flush=True)
    return {
        "bench": "failover", "case": f"pause ack+quiet on a cluster (sharded), {size} replicas",
        "value": ack, "unit": "ms", "baseline": base, "ratio": ack / base if base else None,
        "goal": "<= 2x one SPUBLISH to plain shard subscribers (3x at least)",
    }


async def _on(topo: Topology, kind: str, size: int) -> list[dict[str, Any]]:
    rows = [await _cluster_fanout(topo, size)] if isinstance(topo, Cluster) else []
    rows.append(await _failover_round(topo, kind, size))
    return rows


def run() -> list[dict[str, Any]]:
    if not binaries_found():
        print("skipping bench.failover: redis-server and redis-cli are needed", file=sys.stderr)
        return []
    rows: list[dict[str, Any]] = []
    for kind in ("sentinel", "cluster"):
        for size in SIZES:
            topo: Topology = SentinelGroup() if kind == "sentinel" else Cluster()
            try:
                topo.start()
                rows.extend(asyncio.run(_on(topo, kind, size)))
            finally:
                topo.stop()
    return rows


def _worker_main(argv: list[str]) -> None:
    # a worker's controllers log every disconnect at WARNING: the bench's table is the output
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    kind = argv[0]
    if kind == "ctl":
        asyncio.run(_ctl_worker(argv[1], argv[2], argv[3], int(argv[4])))
    else:
        raise SystemExit(f"unknown worker {kind!r}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        _worker_main(sys.argv[1:])
    else:
        for row in run():
            print(json.dumps(row))
