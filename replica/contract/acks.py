"""A replica's acknowledgement of a change (``Ack``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from replica.contract.clock import format_time, now_utc
from replica.contract.names import (
    ACK_EVENTS,
    MAX_MESSAGE_BYTES,
    REPLICA_ID_RE,
)
from replica.contract.state import _time_field
from replica.errors import InvalidMessage


@dataclass(frozen=True, slots=True)
class Ack:
    """A replica's acknowledgement, published on ``fleetgate:{NAME}:acks`` as JSON.

    Sent when the replica applies a version (``applied``), when its pool turns quiet under a
    fleet pause (``quiet``) and when a staggered or automatic resume takes effect (``resumed``).
    The replica writes its record before it publishes, so a reader that subscribes and then
    reads the records misses nothing.
    """

    replica: str
    version: int
    event: str
    fleet_held: bool
    """The pool is held by the fleet (source ``fleet`` or ``fleet:NAME``: a fleet hold)."""
    quiet: bool
    """The pool is paused and nothing is in flight."""
    in_flight: int
    at: datetime
    resume_at: datetime | None = None
    """A resume is pending on this replica (stagger or auto-resume) at this time."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "replica": self.replica,
                "version": self.version,
                "event": self.event,
                "fleet_held": self.fleet_held,
                "quiet": self.quiet,
                "in_flight": self.in_flight,
                "at": format_time(self.at),
                "resume_at": format_time(self.resume_at) or None,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Ack:
        """Raises ``InvalidMessage`` (never anything else) on a message that is not an ack."""
        if not isinstance(data, str | bytes):
            raise InvalidMessage("not_json", f"a {type(data).__name__}")
        if len(data) > MAX_MESSAGE_BYTES:
            raise InvalidMessage("oversized", f"{len(data)} bytes")
        try:
            d = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise InvalidMessage("not_json", str(exc)[:80]) from None
        if not isinstance(d, dict):
            raise InvalidMessage("not_object", type(d).__name__)
        try:
            replica = d["replica"]
            version = d["version"]
            event = d["event"]
            in_flight = d.get("in_flight", 0)
            if not isinstance(replica, str) or REPLICA_ID_RE.fullmatch(replica) is None:
                raise InvalidMessage("bad_field", "replica")
            if not isinstance(version, int) or isinstance(version, bool) or version < 0:
                raise InvalidMessage("bad_field", "version")
            if event not in ACK_EVENTS:
                raise InvalidMessage("bad_field", "event")
            if not isinstance(in_flight, int) or isinstance(in_flight, bool):
                raise InvalidMessage("bad_field", "in_flight")
            at = _time_field(d, "at") or now_utc()
            return cls(
                replica=replica,
                version=version,
                event=event,
                fleet_held=bool(d.get("fleet_held", False)),
                quiet=bool(d.get("quiet", False)),
                in_flight=in_flight,
                at=at,
                resume_at=_time_field(d, "resume_at"),
            )
        except KeyError as exc:
            raise InvalidMessage("missing_field", str(exc)) from None
