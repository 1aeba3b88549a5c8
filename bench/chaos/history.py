"""The history of a chaos run: JSON lines, one file per process, merged for the checker.

Every line is one JSON object with at least ``ev`` (what happened) and ``t`` (when, in seconds
since the epoch, ``time.time()``: every process of a run is on this host, so the clocks agree).
A writer appends each line with one ``write`` on a file opened ``O_APPEND``: a line is in the
kernel once ``write`` returns, so it survives a ``kill -9`` of its writer a moment later.

The events (the fields besides ``ev`` and ``t``):

* ``run``: ``seed``, ``duration``, ``topology``, ``fleet``, ``replicas`` (ids), ``proxied``
  (the replica behind the link proxy), ``settings`` (``poll_interval``,
  ``heartbeat_interval``, ``claim_idle``, ``renew_interval``, ``item_timeout``,
  ``max_retries``...); ``schedule``: ``faults`` as drawn; ``healed``, ``drained`` (or
  ``drain-timeout``); ``run-end``: ``phase`` (how far the run got: ``done`` when complete).
* ``spawn``, ``healthy``, ``exit``: a replica life (``replica``, ``pid``; ``exit`` has
  ``status``, the return code, negative for a signal, ``killed`` when the schedule killed it
  and ``stopping`` when the runner asked it to stop); ``start`` and ``exit`` with ``process``
  ``redis``: the server.
* ``item-start``: ``replica``, ``pid``, ``item``, ``kind``, ``version`` and ``held`` (the fleet
  version the replica had applied and whether the fleet's pause held its pool);
  ``item-end``: ``replica``, ``pid``, ``item``, ``outcome`` (``ok``, ``error``, ``cancelled``).
* ``enqueue``: ``item``, ``kind``, ``entry``, ``t0`` (the XADD was sent); ``enqueue-unknown``:
  ``item`` (the XADD failed: it may or may not be in the stream).
* ``ack``: ``replica``, ``version``, ``event``, ``at`` (when the replica sent it),
  ``fleet_held``, ``quiet``, ``in_flight``; ``record``: a replica record read when it changed
  (``applied_version``, ``applied_at``, ``heartbeat_at``, ``fleet_held``, ``quiet``,
  ``in_flight``, ``control``).
* ``change``: ``version``, ``paused``, ``changed_at``, ``auto_resume_at``, ``stagger``,
  ``holds`` (``[[name, starts_at, auto_resume_at], ...]``, epochs or null; null for a state
  without holds) and ``via`` (``control`` channel or ``state`` hash): a state first seen.
* ``audit``: ``action``, ``version``, ``at``, ``by``, ``reason``; ``dead``: ``item``,
  ``error``, ``runs``, ``replica``, ``entry``.
* ``op``: an operator call: ``via`` (``fleet`` or ``cli``), ``action``, ``args``, ``t0``
  (called), ``t`` (returned), ``t_change`` (the change returned, before any wait),
  ``result`` (``ok``, ``error``, ``unknown``, ``cancelled``, ``refused``: a resume naming no
  hold while there were several), ``version``, ``paused``, ``changed_at``, ``auto_resume_at``,
  ``holds``, ``error``; for the CLI ``exit``, ``stderr`` (and
  ``hung`` when it outlived its --timeout); ``wait``: the report (``ok``, ``version``,
  ``action``, ``elapsed_s``, ``replicas``: [{``id``, ``reached``, ``why``}]) and the bounds of
  the moment it was made, ``t_lo`` and ``t_hi``.
* ``fault-start``, ``fault-end``: ``id``, ``kind``, ``target`` (a replica id, ``fleet`` or
  ``redis``), ``params``, ``pid`` (the life it hit); ``fault-skipped``: its target was down;
  ``wiped``: an empty restart's ``items`` (what the work stream held just before, None when it
  could not be read), ``last`` (its last entry id) and ``read_at``.
* ``settled``: ``phase``, ``state`` (the hash), ``replicas`` (their records): a snapshot
  once the faults healed (``healed``) and after the final resume (``final``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

Event = dict[str, Any]

SUFFIX: Final = ".jsonl"


class HistoryWriter:
    """Appends events to one JSON-lines file (created if absent)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, ev: str, t: float | None = None, **fields: Any) -> Event:
        """Append one event (``t`` defaults to now) and return it."""
        event: Event = {"ev": ev, "t": time.time() if t is None else t, **fields}
        line = json.dumps(event, separators=(",", ":"), default=str) + "\n"
        if self._fd is not None:
            os.write(self._fd, line.encode())
        return event

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_lines(path: str | Path) -> Iterator[Event]:
    """The events of one file; a line cut short by a kill (the last one) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "ev" in event and "t" in event:
                yield event


def read_history(where: str | Path | Iterable[str | Path]) -> list[Event]:
    """Every event of a history directory (its ``*.jsonl`` files) or of the given files,
    merged in time order (stable: a file's own order is kept for equal times)."""
    if isinstance(where, str | Path):
        root = Path(where)
        files = sorted(root.glob("*" + SUFFIX)) if root.is_dir() else [root]
    else:
        files = [Path(p) for p in where]
    events: list[Event] = []
    for path in files:
        events.extend(read_lines(path))
    events.sort(key=lambda e: float(e["t"]))
    return events


__all__ = ["Event", "HistoryWriter", "read_history", "read_lines"]
