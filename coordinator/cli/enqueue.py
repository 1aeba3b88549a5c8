"""``fleetgate enqueue``: work items onto the fleet's work stream, from the arguments, a count of
synthetic items, or a file of JSON lines.

Only JSON goes in: ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) are not
JSON, and a text nested too deep to parse is refused like any other bad line: exit 2, one line
naming the line.

On a primary with replicas, each batch of ``ENQUEUE_BATCH`` items is confirmed by
``FLEETGATE_MIN_REPLICAS_ACK`` replicas (``WAIT``, as a pause is): a batch none confirmed in
time ends the command with exit 4 and one line saying how many items are confirmed, written but
unconfirmed (a failover could lose them) and not sent, for the producer to enqueue again.

The fleet's backlog limit (``fleetgate limits``) is checked in the script that adds each batch:
a batch that does not fit is not written at all (``BacklogFull``), and the command ends with
exit 7 and one line giving the backlog and the limit, and how many items the batches before it
enqueued; with the limit's ``when_full`` wait, once ``--timeout`` (default 60s, for the whole
command) passed without room. A limit that cannot be read refuses every batch (exit 7 too).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TextIO

import typer

from coordinator.cli.exits import EXIT_BACKLOG_FULL, EXIT_NOT_CONFIRMED, CliError, usage
from coordinator.cli.options import (
    FleetOption,
    Globals,
    JsonOption,
    UrlOption,
    duration_option,
)
from coordinator.cli.output import emit_json, plain

if TYPE_CHECKING:  # loaded by the command (fleetgate --help loads no Redis)
    from coordinator.fleet.durability import BatchNotConfirmed
    from coordinator.fleet.fleet import Fleet
    from replica.errors import BacklogFull

MAX_COUNT: Final = 1_000_000
ENQUEUE_BATCH: Final = 1000


class NotJson(ValueError):
    """A text that is not JSON by the standard (RFC 8259), though Python's parser may take it."""


def _constant(name: str) -> Any:
    raise NotJson(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJson(f"{text} is too large for a number")
    return value


def parse_json(text: str) -> Any:
    """``text`` as strict JSON. Raises ``ValueError`` (``NotJson`` for NaN, Infinity and
    numbers out of range; ``json.JSONDecodeError``) or ``RecursionError`` (nested too deep)."""
    return json.loads(text, parse_constant=_constant, parse_float=_finite)


def item_argument(text: str) -> Any:
    """An item given as an argument: JSON when it parses as JSON, else the string itself."""
    try:
        return parse_json(text)
    except ValueError:
        return text
    except RecursionError:
        raise usage(f"item {text[:20]!r}...: JSON nested too deep") from None


def read_lines(stream: TextIO, name: str) -> Iterator[Any]:
    """One JSON item per non-blank line; a bad line is a usage error naming it."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield parse_json(line)
        except ValueError as exc:
            raise usage(f"{name} line {number}: not JSON: {plain(str(exc))}") from None
        except RecursionError:
            raise usage(f"{name} line {number}: not JSON: nested too deep") from None


def enqueue(
    ctx: typer.Context,
    items: Annotated[
        list[str] | None, typer.Argument(help="Items: JSON if they parse as JSON, else strings.")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", min=1, max=MAX_COUNT, help='N synthetic items {"id", "n"}.')
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="One JSON item per line ('-' for stdin).")
    ] = None,
    timeout: Annotated[str, typer.Option(
        "--timeout", help="How long to wait for room when the backlog limit says wait.",
    )] = "60s",
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Add work items to the fleet's work stream."""
    g: Globals = ctx.obj
    import time

    from coordinator.cli.runner import run_with_fleet
    from coordinator.fleet.durability import BatchNotConfirmed
    from replica.errors import BacklogFull

    wait_s = duration_option(timeout, "--timeout") or 60.0

    sources = sum(1 for s in (items, count, file) if s)
    if sources != 1:
        raise usage("give items as arguments, or --count N, or --file PATH (exactly one of them)")
    payload: list[Any]
    if items:
        payload = [item_argument(i) for i in items]
    elif count:
        payload = [{"id": f"item-{n:06d}", "n": n} for n in range(1, count + 1)]
    else:
        assert file is not None
        if file == "-":
            payload = list(read_lines(sys.stdin, "stdin"))
        else:
            try:
                with Path(file).open(encoding="utf-8") as stream:
                    payload = list(read_lines(stream, file))
            except (OSError, UnicodeDecodeError) as exc:
                raise usage(f"cannot read {file}: {plain(str(exc))}") from None
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    unconfirmed: list[BatchNotConfirmed] = []
    full: list[BacklogFull] = []

    async def put(fleet: Fleet) -> list[str]:
        ids: list[str] = []
        deadline = time.monotonic() + wait_s
        for start in range(0, len(payload), ENQUEUE_BATCH):
            left = max(0.0, deadline - time.monotonic())
            try:
                ids.extend(await fleet.enqueue(payload[start : start + ENQUEUE_BATCH],
                                               timeout=left))
            except BatchNotConfirmed as exc:  # written, not confirmed: no more batches
                unconfirmed.append(exc)
                break
            except BacklogFull as exc:  # nothing of this batch written: no more batches
                full.append(exc)
                break
        return ids

    try:
        ids = run_with_fleet(settings, put) if payload else []
    except (TypeError, ValueError, RecursionError) as exc:  # an item JSON cannot encode
        raise usage(f"cannot enqueue: {plain(str(exc)) or type(exc).__name__}") from None
    if unconfirmed:
        raise _not_confirmed(settings.fleet, ids, unconfirmed[0], len(payload), json_out)
    if full:
        raise _full(settings.fleet, ids, full[0], len(payload), json_out)
    if json_out:
        emit_json({"fleet": settings.fleet, "count": len(ids), "ids": ids})
    else:
        first_last = f" ({ids[0]} .. {ids[-1]})" if ids else ""
        print(f"enqueued {len(ids)} items on fleet {settings.fleet}{first_last}")


def _not_confirmed(
    fleet: str, confirmed: list[str], exc: BatchNotConfirmed, total: int, json_out: bool
) -> CliError:
    """Exit 4: the batches before ``exc``'s are confirmed, ``exc``'s is written to the primary
    only, the rest were not sent (the producer may enqueue all but the confirmed again)."""
    unsent = total - len(confirmed) - len(exc.ids)
    if json_out:
        emit_json({"fleet": fleet, "count": len(confirmed), "ids": confirmed,
                   "unconfirmed": exc.ids, "unsent": unsent})
    counted = exc.counted
    span = f" ({exc.ids[0]} .. {exc.ids[-1]})" if exc.ids else ""
    return CliError(
        f"fleet {fleet}: {len(confirmed)} items enqueued and confirmed; {len(exc.ids)} more"
        f"{span} written to the Redis primary but not confirmed by a replica within "
        f"{exc.timeout_s:g}s ({counted}), so a failover could lose them; {unsent} not sent: "
        "enqueue the unconfirmed and the unsent again",
        EXIT_NOT_CONFIRMED,
    )


def _full(fleet: str, done: list[str], exc: BacklogFull, total: int, json_out: bool) -> CliError:
    """Exit 7: the backlog limit refused a batch (nothing of it written); the batches before
    it are enqueued, the rest were not sent."""
    unsent = total - len(done) - exc.count
    if json_out:
        emit_json({"fleet": fleet, "count": len(done), "ids": done, "refused": exc.count,
                   "unsent": unsent, "backlog": exc.backlog, "limit": exc.limit,
                   "waited_s": exc.waited_s})
    tail = f"; {len(done)} enqueued before it" + (f", {unsent} not sent" if unsent else "")
    return CliError(f"{plain(str(exc))}{tail}", EXIT_BACKLOG_FULL)


__all__ = ["ENQUEUE_BATCH", "MAX_COUNT", "enqueue", "parse_json"]
