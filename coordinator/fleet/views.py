"""The body of ``GET /api/fleets/{name}``: the summary, or every record a page at a time.

    ?                                  the summary shape (``FleetSummary.to_dict()``)
    ?replicas=all[&limit=N][&cursor=C] the summary shape's state and ``summary``, with a page of
                                       every record instead of ``attention`` (``pages.page``)

Query values arrive as text and are checked here: an unknown ``replicas``, a ``limit`` that is
not a whole number from 1 to ``MAX_PAGE`` or a ``cursor`` that is not a replica id is a
``ContractError`` (the API's 422 with a JSON ``detail``), as is ``limit`` or ``cursor`` without
``replicas=all``. Both shapes come from the snapshot cache (``snapshots.Snapshots``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.pages import DEFAULT_PAGE, check_page, page
from coordinator.fleet.snapshots import Snapshots
from coordinator.fleet.summary import DEFAULT_MAX_PAUSE_S, summarize
from replica.errors import ContractError

REPLICAS_ALL: Final = "all"
REPLICAS_ATTENTION: Final = "attention"
"""The default of ``replicas``: the replicas that need attention (the summary shape)."""
QUERY: Final = ("replicas", "limit", "cursor")


def parse_query(query: Mapping[str, str]) -> tuple[bool, int, str | None]:
    """``(every record, limit, cursor)`` of a request's query (see the module's doc)."""
    which = query.get("replicas", REPLICAS_ATTENTION)
    if which not in (REPLICAS_ALL, REPLICAS_ATTENTION):
        raise ContractError(f"replicas must be {REPLICAS_ALL} or {REPLICAS_ATTENTION}")
    raw_limit, cursor = query.get("limit"), query.get("cursor")
    if which != REPLICAS_ALL:
        if raw_limit is not None or cursor is not None:
            raise ContractError("limit and cursor page replicas=all")
        return False, DEFAULT_PAGE, None
    limit = DEFAULT_PAGE
    if raw_limit is not None:
        text = raw_limit.strip()
        if not text.isascii() or not text.isdigit() or len(text) > 6:
            raise ContractError("limit must be a whole number from 1 to 1000")
        limit = int(text)
    check_page(limit, cursor)
    return True, limit, cursor


async def fleet_body(
    snapshots: Snapshots,
    fleet: Fleet,
    query: Mapping[str, str] | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The body of ``GET /api/fleets/{name}`` for ``query`` (its parameters, as text)."""
    every, limit, cursor = parse_query(query or {})  # checked before anything is read
    snap = await snapshots.snap(fleet)
    fs = summarize(snap.status, now, max_pause, figures=snap.figures, read_at=snap.read_at)
    if not every:
        return fs.to_dict()
    return {
        "fleet": fs.state.fleet,
        "state": fs.state.to_dict(),
        "summary": fs.counts(),
        **page(snap.status.replicas, limit, cursor).to_dict(),
    }


__all__ = ["QUERY", "REPLICAS_ALL", "REPLICAS_ATTENTION", "fleet_body", "parse_query"]
