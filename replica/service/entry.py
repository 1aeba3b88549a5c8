"""One work stream entry: read as raw bytes, decoded on its own (``WorkItem``).

The source reads the stream's entries undecoded (``NEVER_DECODE``), so no entry's bytes can
make a read fail: a reply holds every entry of the batch, good or bad. Each entry is then
decoded here, alone. An entry that cannot be decoded or parsed (no ``item`` field, bytes that
are not UTF-8, text that is not JSON, JSON nested past the parser's depth) raises
``MalformedEntry`` with the reason, and the source dead-letters it at once.

A dead letter keeps the entry whole (``dead_letter_fields``): the ``item`` field as the producer
wrote it, byte for byte, and every other field of the entry as ``field:<name>``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from replica.contract import ITEM_FIELD

ITEM_KEY: Final = ITEM_FIELD.encode()
OTHER_FIELD_PREFIX: Final = b"field:"
"""Dead letters keep an entry's fields other than ``item`` under this prefix."""

RawFields = Mapping[bytes, bytes]


class MalformedEntry(ValueError):
    """An entry the source cannot turn into an item; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True, eq=False)
class WorkItem:
    """One stream entry in this replica's hands."""

    entry_id: str
    item: Any
    fields: RawFields
    """The entry as read (raw bytes): what a dead letter keeps."""
    via: str
    """How it arrived: "read", "claim" (from a silent replica) or "history" (own pending)."""
    runs: int = 0
    """Runs of the handler started for it, on every replica (the runs hash): read with its batch
    at admission, one more as a run starts (this one's current run included), then the count
    Redis answered for that run; counted here alone when Redis could not answer."""
    counted: bool = False
    """The current run is in the runs hash (a run given back must be taken out of it). Known
    once the run is settled (``Ledger.settle_run``)."""
    counting: asyncio.Task[None] | None = None
    """The current run's ``HINCRBY``, sent without being awaited before the handler, until the
    run is settled."""
    succeeded: bool = False


def text(value: bytes | str) -> str:
    """An entry id or cursor as text."""
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def decode(entry_id: str, fields: RawFields, via: str) -> WorkItem:
    """The item of one entry, or ``MalformedEntry``."""
    raw = fields.get(ITEM_KEY)
    if raw is None:
        raise MalformedEntry(f"no {ITEM_FIELD!r} field")
    try:
        document = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedEntry(f"item is not UTF-8: {exc}") from None
    try:
        item = json.loads(document)
    except RecursionError:
        raise MalformedEntry("item is not JSON this replica can read: nested too deep") from None
    except ValueError as exc:
        raise MalformedEntry(f"item is not JSON: {exc}") from None
    return WorkItem(entry_id=entry_id, item=item, fields=fields, via=via)


def dead_letter_fields(fields: RawFields | None) -> dict[bytes, bytes]:
    """An entry's fields as a dead letter keeps them: whole, ``item`` under its own name."""
    kept: dict[bytes, bytes] = {}
    for name, value in (fields or {}).items():
        key = name if isinstance(name, bytes) else str(name).encode()
        data = value if isinstance(value, bytes) else str(value).encode()
        kept[key if key == ITEM_KEY else OTHER_FIELD_PREFIX + key] = data
    return kept


def read_entries(reply: Any) -> list[tuple[Any, Any]]:
    """The entries of an XREADGROUP reply for one stream, each as ``(id, fields)``: the reply
    as Redis sent it (RESP2 list or RESP3 map; each entry's fields a flat list, or nil for an
    entry deleted while pending) or as redis-py's reply callbacks parse it."""
    if not reply:
        return []
    if isinstance(reply, dict):
        value: Any = next(iter(reply.values()), None) or []
        if value and isinstance(value[0], list) and (
            not value[0] or isinstance(value[0][0], (list, tuple))
        ):  # parsed RESP3: one list of entries, wrapped
            value = value[0]
    else:
        value = reply[0][1] or []
    return [(entry[0], _fields(entry[1])) for entry in value]


def _fields(raw: Any) -> Any:
    """An entry's fields as a mapping (a raw reply gives them as a flat list), or None."""
    if isinstance(raw, list):
        return dict(zip(raw[::2], raw[1::2], strict=False))
    return raw


__all__ = [
    "ITEM_KEY",
    "MalformedEntry",
    "RawFields",
    "WorkItem",
    "dead_letter_fields",
    "decode",
    "read_entries",
    "text",
]
