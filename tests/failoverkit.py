"""What the failover scenarios of issue 12 share (``tests/test_failover_*.py``).

* Replica processes on the chaos handler (``bench.chaos.handler:handle``): each item's start is
  written to a local file with the fleet version its replica had applied and whether the
  fleet's pause held its pool, so what started when survives whatever Redis loses.
* A node's own view, read on that node alone (``Node.client()``, no Sentinel, no cluster
  routing): the state hash, the audit stream, the replica records. A failover test asks what
  *this* server holds, not whichever one a client reaches now.
* A Redis replica kept from receiving a write: ``starve_replicas`` fills the replication link to
  a frozen replica until the primary itself holds unsent bytes (``omem``) for it. Freezing alone
  does not lose a write on loopback: the primary's write lands in the frozen process's kernel
  socket buffer, and the thawed replica reads it (measured: a key written after the freeze was
  on the promoted node). Bytes still in the primary's own output buffer die with it: a write
  is lost for sure when the primary still holds more unsent (``unsent``) than it has written
  since just before that write (``repl_offset``).

Every wait polls Redis answers or files another process writes, with a bounded deadline.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from redis.exceptions import RedisError

from bench.chaos.handler import HISTORY_ENV
from bench.chaos.history import Event, read_history
from replica.contract import Keys
from tests.procs import base_env
from tests.topology import Node

ROOT: Final = Path(__file__).resolve().parent.parent
JUNK_KEY: Final = "failover-test:junk"
JUNK_CHUNK: Final = 65_536
UNSENT_AT_LEAST: Final = 2_000_000
"""Bytes the primary must hold unsent for the frozen replica before the write it must lose."""
T = TypeVar("T")


def chaos_env(url: str, fleet: str, history: Path, **settings: Any) -> dict[str, str]:
    """``base_env`` with the chaos handler writing its history under ``history``."""
    env = base_env(url, fleet, **settings)
    env["FLEETGATE_HANDLER"] = "bench.chaos.handler:handle"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env[HISTORY_ENV] = str(history)
    return env


def starts(history: Path) -> list[Event]:
    """Every ``item-start`` the replicas wrote so far."""
    return [e for e in read_history(history) if e["ev"] == "item-start"]


def ends(history: Path) -> list[Event]:
    return [e for e in read_history(history) if e["ev"] == "item-end"]


async def until(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
                every: float = 0.1) -> T:
    """``probe()`` (run in a thread: it may block on Redis) until it returns something other
    than None; AssertionError naming ``what`` past ``timeout``."""
    last: BaseException | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    found = await asyncio.to_thread(probe)
                except (RedisError, OSError) as exc:  # a failover under way
                    found, last = None, exc
                if found is not None:
                    return found
                await asyncio.sleep(every)
    except TimeoutError:
        why = f" (last error: {last!r})" if last is not None else ""
        raise AssertionError(f"not within {timeout}s: {what}{why}") from None


# ---------------------------------------------------------------------------- a node's view


def state_on(node: Node, fleet: str) -> dict[str, str]:
    with node.client() as c:
        state: dict[str, str] = c.hgetall(Keys(fleet).state)
    return state


def audit_on(node: Node, fleet: str) -> list[dict[str, str]]:
    with node.client() as c:
        entries = c.xrange(Keys(fleet).audit)
    return [fields for _, fields in entries]


def records_on(node: Node, fleet: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    keys = Keys(fleet)
    with node.client() as c:
        pipe = c.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(keys.replica(i))
        found = pipe.execute()
    return dict(zip(ids, found, strict=True))


def all_applied(node: Node, fleet: str, ids: Sequence[str], version: int) -> bool | None:
    """True once every record on ``node`` says it applied ``version`` and the fleet holds it."""
    records = records_on(node, fleet, ids)
    ok = all(r.get("applied_version") == str(version) and r.get("fleet_held") == "1"
             for r in records.values())
    return True if ok else None


# ---------------------------------------------------------------------------- a lost write


def unsent(primary: Node) -> int:
    """Bytes the primary holds unsent for its (one) replica, at least: its ``omem`` counts from
    the start of the replication buffer block the replica is in, so up to one block (a
    ``JUNK_CHUNK`` here) may have gone out already."""
    with primary.client() as c:
        omem = max(int(r.get("omem", 0)) for r in c.client_list(_type="replica"))
    return max(0, omem - JUNK_CHUNK)


def repl_offset(primary: Node) -> int:
    """Bytes of the replication stream so far (``master_repl_offset``)."""
    return int(primary.info("replication")["master_repl_offset"])


def starve_replicas(primary: Node, at_least: int = UNSENT_AT_LEAST, limit: int = 1000) -> int:
    """Append junk on ``primary`` (a key no fleet reads) until it holds ``at_least`` bytes
    unsent for its (frozen) replicas: the kernel's socket buffers are full, so every write
    from now on stays in the primary's memory. Returns the bytes unsent."""
    with primary.client() as c:
        for _ in range(limit):
            c.append(JUNK_KEY, "x" * JUNK_CHUNK)
            held = unsent(primary)
            if held >= at_least:
                return held
    raise AssertionError(f"{primary} sent {limit * JUNK_CHUNK} bytes to a frozen replica "
                         f"without holding {at_least} back")


__all__ = ["all_applied", "audit_on", "chaos_env", "ends", "records_on", "repl_offset",
           "starts", "starve_replicas", "state_on", "unsent", "until"]
