"""The handler the chaos replicas run: ``bench.chaos.handler:handle``.

It behaves as the demo handler (``replica.demo:sleep``: one item takes a moment, its id is
``replica.demo.item_id``) and writes the item's history instead of the demo's Redis log: an
``item-start`` line with the fleet version its replica had applied and whether the fleet's
pause held its pool (``HandlerContext.fleet_state``), and an ``item-end`` line with the
outcome. The lines go to ``$CHAOS_HISTORY_DIR/replica-<id>-<pid>.jsonl`` (one file per process
life), written before the handler returns, so a line is never missing for an item the replica
acknowledged. Writing to a local file keeps the record out of the faults: a Redis that is down
cannot fail an item here, only the control plane and the work stream can.

The item says what to do (``{"id": ..., "kind": ..., "ms": ...}``):

* ``ok`` (the default): sleep ``ms`` milliseconds (else FLEETGATE_DEMO_ITEM_SECONDS);
* ``fail``: raise ``ToldToFail`` (retried, then dead-lettered with that error);
* ``hang``: sleep far past FLEETGATE_ITEM_TIMEOUT (cut off there, retried, dead-lettered).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Final

from bench.chaos.history import HistoryWriter
from replica.demo import item_id
from replica.service.handlers import HandlerContext, context

HISTORY_ENV: Final = "CHAOS_HISTORY_DIR"
OK: Final = "ok"
FAIL: Final = "fail"
HANG: Final = "hang"
KINDS: Final = (OK, FAIL, HANG)
HANG_FACTOR: Final = 5.0
"""A hanging item sleeps this many item timeouts (an hour when there is none)."""


class ToldToFail(Exception):
    """The item asked to fail."""


_writers: dict[Path, HistoryWriter] = {}


def writer_for(ctx: HandlerContext) -> HistoryWriter:
    """This process's history file (one per process, opened at its first item)."""
    root = Path(os.environ.get(HISTORY_ENV) or ".")
    path = root / f"replica-{ctx.replica_id}-{os.getpid()}.jsonl"
    found = _writers.get(path)
    if found is None:
        found = _writers[path] = HistoryWriter(path)
    return found


def _plan(item: Any, ctx: HandlerContext) -> tuple[str, float]:
    """What the item asks: its kind and how long it runs, in seconds."""
    kind = item.get("kind", OK) if isinstance(item, dict) else OK
    if kind not in KINDS:
        kind = OK
    if kind == HANG:
        timeout = getattr(ctx.settings, "item_timeout", None)
        return kind, 3600.0 if timeout is None else float(timeout) * HANG_FACTOR
    ms = item.get("ms") if isinstance(item, dict) else None
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms >= 0:
        return kind, float(ms) / 1000
    return kind, float(getattr(ctx.settings, "demo_item_seconds", 0.05) or 0.0)


async def handle(item: Any) -> None:
    """Run one chaos item and write its start and end (see the module docstring)."""
    ctx = context()
    ident = item_id(item)
    kind, seconds = _plan(item, ctx)
    version, held = ctx.fleet_state() if ctx.fleet_state is not None else (-1, False)
    history = writer_for(ctx)
    pid = os.getpid()
    history.write("item-start", replica=ctx.replica_id, pid=pid, item=ident, kind=kind,
                  version=version, held=held)
    outcome = "error"
    try:
        if kind == FAIL:
            raise ToldToFail(f"chaos: item {ident} was told to fail")
        await asyncio.sleep(seconds)
        outcome = OK
    except asyncio.CancelledError:
        outcome = "cancelled"  # cut off: item_timeout, or the drain of a stop
        raise
    finally:
        history.write("item-end", replica=ctx.replica_id, pid=pid, item=ident, outcome=outcome)


__all__ = ["FAIL", "HANG", "HISTORY_ENV", "KINDS", "OK", "ToldToFail", "handle"]
