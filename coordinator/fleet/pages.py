"""Every replica record, a page at a time: ``page(replicas, limit, cursor)``.

The order is the replica id's (the order ``Fleet.status()`` returns), and the cursor is the last
id of the page before: the next page starts after it. So a client that follows ``next_cursor``
from the first page to the last meets every replica that stayed in the fleet all along exactly
once, whatever joins or leaves meanwhile (a replica that joins may or may not be met, one that
leaves may be met before it left). A cursor is a replica id (``REPLICA_ID_RE``); a bad one, or
a ``limit`` outside 1 to ``MAX_PAGE``, is a ``ContractError`` (the API answers 422, the CLI
exits 2).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from coordinator.fleet.models import ReplicaInfo
from replica.contract import REPLICA_ID_RE
from replica.errors import ContractError

DEFAULT_PAGE: Final = 100
"""Records per page when no ``limit`` is given."""
MAX_PAGE: Final = 1000
"""The largest ``limit``."""


@dataclass(frozen=True, slots=True)
class Page:
    """Up to ``limit`` replicas after ``cursor``, and the cursor of the next page (None: this
    is the last)."""

    replicas: Sequence[ReplicaInfo]
    limit: int
    cursor: str | None
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": [r.to_dict() for r in self.replicas],
            "limit": self.limit,
            "cursor": self.cursor,
            "next_cursor": self.next_cursor,
        }


def check_page(limit: int, cursor: str | None) -> None:
    """Raise ``ContractError`` for a limit outside 1 to ``MAX_PAGE`` or a cursor that is not a
    replica id."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ContractError(f"limit must be a whole number from 1 to {MAX_PAGE}")
    if cursor is not None and (
        not isinstance(cursor, str) or REPLICA_ID_RE.fullmatch(cursor) is None
    ):
        raise ContractError("cursor must be a replica id (the next_cursor of a page)")


def page(
    replicas: Sequence[ReplicaInfo], limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> Page:
    """The page of ``replicas`` (sorted by id) after ``cursor``."""
    check_page(limit, cursor)
    ids = _Ids(replicas)
    start = 0 if cursor is None else bisect.bisect_right(ids, cursor)
    chunk = replicas[start:start + limit]
    more = start + limit < len(replicas)
    return Page(chunk, limit, cursor, chunk[-1].id if more and chunk else None)


class _Ids(Sequence[str]):
    """The ids of a sorted list of replicas, as a sequence ``bisect`` can search (no copy)."""

    def __init__(self, replicas: Sequence[ReplicaInfo]) -> None:
        self._replicas = replicas

    def __len__(self) -> int:
        return len(self._replicas)

    def __getitem__(self, i: Any) -> Any:
        return self._replicas[i].id


__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "Page", "check_page", "page"]
