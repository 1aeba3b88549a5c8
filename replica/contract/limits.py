"""A fleet's backlog limit: the hash ``fleetgate:{NAME}:limits`` (``BacklogLimit``).

Opt in: without the key, a fleet has no limit and enqueueing goes on during a pause, as users
of job queues expect. With it, every producer that enqueues through ``enqueue.lua`` (the
``Fleet.enqueue`` of the library, ``fleetgate enqueue``, or another language running the same
script) obeys it::

    max_backlog   a whole number, 1 to MAX_BACKLOG: the most entries of the work stream that
                  may be not yet done (the group's lag plus its pending entries: see below)
    when_full     "reject" (the batch is refused at once) or "wait" (the producer polls until
                  there is room or its timeout, then refuses); absent: "reject"
    by, at        who set it, and when (ISO 8601 UTC, ms): for status and the audit trail

**What the limit counts.** The backlog of ``coordinator.fleet.backlog`` is what waits for a
replica (``XINFO GROUPS`` ``lag``). Entries stay in the work stream after their ``XACK`` until
a replica trims it, so ``XLEN`` counts done work too. The limit counts the work **not yet
done**: entries not yet delivered to the group (``lag``) plus entries delivered and not yet
acknowledged (``pending``). A batch of ``n`` items is written when ``lag + pending + n <=
max_backlog``, whole or not at all.

**An unreadable limit fails closed.** A key that is not a hash, a ``max_backlog`` that is not a
whole number in bounds, a ``when_full`` that is neither word: the script refuses every batch
(``unreadable``) and says why, and status shows it. An operator who set a limit wanted a bound;
one that cannot be read might be any number, and writing past the bound is what the limit
exists to prevent (under ``noeviction`` a Redis out of memory refuses every write, the fleet's
pause state included). A producer that handles a full backlog handles this too (it is a
``BacklogFull``), and goes on by itself once the limit is set again or cleared.

The package loads neither redis nor pydantic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from replica.contract.clock import format_time, parse_time
from replica.contract.names import decode_hash
from replica.contract.reasons import MAX_BY
from replica.errors import ContractError

L_MAX_BACKLOG: Final = "max_backlog"
L_WHEN_FULL: Final = "when_full"
L_BY: Final = "by"
L_AT: Final = "at"
LIMIT_FIELDS: Final = (L_MAX_BACKLOG, L_WHEN_FULL, L_BY, L_AT)

REJECT: Final = "reject"
WAIT: Final = "wait"
WHEN_FULL: Final = (REJECT, WAIT)
MAX_BACKLOG: Final = 1_000_000_000_000
"""The largest limit (10**12: exact in a Lua number, and more than any Redis holds)."""

_WHOLE: Final = re.compile(r"[1-9][0-9]{0,12}")


class UnreadableLimit(ContractError):
    """The limits hash holds something no producer can obey (see the module's doc)."""


def check_max_backlog(value: object) -> int:
    """``value`` if it is a limit (a whole number, 1 to ``MAX_BACKLOG``; not a bool); else
    ``ContractError``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BACKLOG:
        raise ContractError(f"max_backlog must be a whole number from 1 to {MAX_BACKLOG}")
    return value


def check_when_full(value: object) -> str:
    """``value`` if it is ``reject`` or ``wait``; else ``ContractError``."""
    if value not in WHEN_FULL:
        raise ContractError("when_full must be 'reject' or 'wait'")
    return str(value)


@dataclass(frozen=True, slots=True)
class BacklogLimit:
    """A fleet's limit on the work not yet done (see the module's doc)."""

    max_backlog: int
    when_full: str = REJECT
    by: str = ""
    at: datetime | None = None

    def __post_init__(self) -> None:
        check_max_backlog(self.max_backlog)
        check_when_full(self.when_full)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_backlog": self.max_backlog,
            "when_full": self.when_full,
            "by": self.by or None,
            "at": format_time(self.at) or None,
        }

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> BacklogLimit:
        """The limit of a limits hash (bytes or text). Raises ``UnreadableLimit`` saying what
        is wrong (never repeating more than a short excerpt of it)."""
        h = decode_hash(raw)
        number = h.get(L_MAX_BACKLOG)
        if number is None:
            raise UnreadableLimit("the limits hash has no max_backlog")
        if _WHOLE.fullmatch(number) is None or int(number) > MAX_BACKLOG:
            raise UnreadableLimit(f"max_backlog {_excerpt(number)} is not a whole number from 1 "
                                  f"to {MAX_BACKLOG}")
        when = h.get(L_WHEN_FULL) or REJECT
        if when not in WHEN_FULL:
            raise UnreadableLimit(f"when_full {_excerpt(when)} is neither reject nor wait")
        try:
            at = parse_time(h.get(L_AT))
        except ContractError:  # informative only: an unreadable time does not void the limit
            at = None
        return cls(int(number), when, h.get(L_BY, "")[:MAX_BY], at)


def _excerpt(value: str, limit: int = 20) -> str:
    head = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in value[:limit])
    return "'" + head + ("..." if len(value) > limit else "") + "'"


__all__ = [
    "LIMIT_FIELDS",
    "L_AT",
    "L_BY",
    "L_MAX_BACKLOG",
    "L_WHEN_FULL",
    "MAX_BACKLOG",
    "REJECT",
    "WAIT",
    "WHEN_FULL",
    "BacklogLimit",
    "UnreadableLimit",
    "check_max_backlog",
    "check_when_full",
]
