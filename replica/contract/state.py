"""The pause state of a fleet (``FleetState``), as a hash and as the JSON of a change, and
where a replica falls in a staggered resume."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from replica.contract.clock import format_time, now_utc, parse_time
from replica.contract.names import (
    _FALSY,
    _TRUTHY,
    FLEET_NAME_RE,
    MAX_MESSAGE_BYTES,
    MAX_STAGGER_S,
    MAX_TEXT_LEN,
    S_AUTO_RESUME_AT,
    S_BY,
    S_CHANGED_AT,
    S_EXPECTED_UNTIL,
    S_PAUSED,
    S_REASON,
    S_RESUME_STAGGER_S,
    S_SINCE,
    S_VERSION,
    decode_hash,
)
from replica.errors import ContractError, InvalidMessage


@dataclass(frozen=True, slots=True)
class FleetState:
    """The pause state of a fleet: the content of ``fleetgate:{NAME}:state``.

    ``since`` is when the fleet entered its current condition (paused or running); a pause of a
    paused fleet keeps it. ``changed_at`` is when this version was written. ``version`` grows by
    one with every change; 0 means the fleet was never paused.
    """

    fleet: str
    paused: bool
    reason: str
    by: str
    since: datetime | None
    version: int
    expected_until: datetime | None = None
    auto_resume_at: datetime | None = None
    resume_stagger_s: float = 0.0
    changed_at: datetime | None = None

    @classmethod
    def initial(cls, fleet: str) -> FleetState:
        """The state of a fleet that has no state hash: running, version 0."""
        return cls(fleet=fleet, paused=False, reason="", by="", since=None, version=0)

    # -- derived

    def auto_resumed(self, now: datetime | None = None) -> bool:
        """True when this is a pause whose ``auto_resume_at`` has passed."""
        if not self.paused or self.auto_resume_at is None:
            return False
        return (now or now_utc()) >= self.auto_resume_at

    def effectively_paused(self, now: datetime | None = None) -> bool:
        """Paused, and not past its ``auto_resume_at``."""
        return self.paused and not self.auto_resumed(now)

    def resume_start(self) -> datetime | None:
        """When pools should start resuming (before any stagger offset): ``since`` of a running
        state, ``auto_resume_at`` of a pause that ends by itself, None for an open-ended pause."""
        if self.paused:
            return self.auto_resume_at
        return self.since

    def same_content(self, other: FleetState) -> bool:
        """Equal but for ``version`` and ``changed_at`` (a hash edited without a version bump)."""
        return (
            self.paused == other.paused
            and self.reason == other.reason
            and self.by == other.by
            and self.since == other.since
            and self.expected_until == other.expected_until
            and self.auto_resume_at == other.auto_resume_at
            and self.resume_stagger_s == other.resume_stagger_s
        )

    # -- conversions

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: times as ISO 8601 UTC with milliseconds (None when unset)."""
        return {
            "fleet": self.fleet,
            "paused": self.paused,
            "reason": self.reason,
            "by": self.by,
            "since": format_time(self.since) or None,
            "version": self.version,
            "expected_until": format_time(self.expected_until) or None,
            "auto_resume_at": format_time(self.auto_resume_at) or None,
            "resume_stagger_s": self.resume_stagger_s,
            "changed_at": format_time(self.changed_at) or None,
        }

    def to_json(self) -> str:
        """The control message for this state."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_hash(self) -> dict[str, str]:
        """The fields of the state hash."""
        stagger = self.resume_stagger_s
        return {
            S_PAUSED: "1" if self.paused else "0",
            S_REASON: self.reason,
            S_BY: self.by,
            S_SINCE: format_time(self.since),
            S_VERSION: str(self.version),
            S_EXPECTED_UNTIL: format_time(self.expected_until),
            S_AUTO_RESUME_AT: format_time(self.auto_resume_at),
            S_RESUME_STAGGER_S: str(int(stagger)) if stagger == int(stagger) else repr(stagger),
            S_CHANGED_AT: format_time(self.changed_at),
        }

    @classmethod
    def from_hash(cls, fleet: str, mapping: Mapping[Any, Any]) -> FleetState:
        """The state from an HGETALL reply (str or bytes). Lenient, since operators may write
        the hash by hand: a missing field takes its default, ``paused`` may be 1/0/true/false/
        yes/no/on/off. An empty mapping is the initial state. Raises ``InvalidMessage`` (kind
        ``bad_state``) for a value that cannot be read."""
        h = decode_hash(mapping)
        if not h:
            return cls.initial(fleet)
        try:
            paused_raw = h.get(S_PAUSED, "0").strip().lower()
            if paused_raw in _TRUTHY:
                paused = True
            elif paused_raw in _FALSY:
                paused = False
            else:
                raise ContractError(f"paused is {paused_raw[:20]!r}")
            version_raw = h.get(S_VERSION, "").strip() or "0"
            version = int(version_raw)
            if version < 0:
                raise ContractError(f"version is {version}")
            stagger = _stagger(float(h.get(S_RESUME_STAGGER_S, "").strip() or "0"))
            return cls(
                fleet=fleet,
                paused=paused,
                reason=h.get(S_REASON, "")[:MAX_TEXT_LEN],
                by=h.get(S_BY, "")[:MAX_TEXT_LEN],
                since=parse_time(h.get(S_SINCE)),
                version=version,
                expected_until=parse_time(h.get(S_EXPECTED_UNTIL)),
                auto_resume_at=parse_time(h.get(S_AUTO_RESUME_AT)),
                resume_stagger_s=stagger,
                changed_at=parse_time(h.get(S_CHANGED_AT)),
            )
        except (ContractError, ValueError) as exc:
            raise InvalidMessage("bad_state", f"{fleet}: {exc}") from None

    @classmethod
    def from_dict(cls, data: Any, fleet: str | None = None) -> FleetState:
        """The state from a decoded control message. Strict: raises ``InvalidMessage`` with kind
        ``not_object``, ``missing_field``, ``bad_field`` or ``unknown_fleet``."""
        if not isinstance(data, dict):
            raise InvalidMessage("not_object", f"a {type(data).__name__}, not an object")
        for name in ("fleet", "paused", "version"):
            if name not in data:
                raise InvalidMessage("missing_field", name)
        name = data["fleet"]
        if not isinstance(name, str) or FLEET_NAME_RE.fullmatch(name) is None:
            raise InvalidMessage("bad_field", "fleet")
        if fleet is not None and name != fleet:
            raise InvalidMessage("unknown_fleet", f"{name[:64]!r} is not {fleet!r}")
        paused = data["paused"]
        if not isinstance(paused, bool):
            raise InvalidMessage("bad_field", "paused")
        version = data["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidMessage("bad_field", "version")
        stagger = data.get("resume_stagger_s", 0)
        if stagger is None:
            stagger = 0
        if not isinstance(stagger, int | float) or isinstance(stagger, bool):
            raise InvalidMessage("bad_field", "resume_stagger_s")
        try:
            stagger_s = _stagger(float(stagger))
        except ContractError:
            raise InvalidMessage("bad_field", "resume_stagger_s") from None
        return cls(
            fleet=name,
            paused=paused,
            reason=_text_field(data, "reason"),
            by=_text_field(data, "by"),
            since=_time_field(data, "since"),
            version=version,
            expected_until=_time_field(data, "expected_until"),
            auto_resume_at=_time_field(data, "auto_resume_at"),
            resume_stagger_s=stagger_s,
            changed_at=_time_field(data, "changed_at"),
        )

    @classmethod
    def from_json(cls, data: str | bytes, fleet: str | None = None) -> FleetState:
        """The state from a control message. ``fleet``, when given, is the only fleet accepted.

        Raises ``InvalidMessage`` (never anything else) with kind ``oversized``, ``not_json``,
        ``not_object``, ``missing_field``, ``bad_field`` or ``unknown_fleet``.
        """
        if not isinstance(data, str | bytes):
            raise InvalidMessage("not_json", f"a {type(data).__name__}")
        if len(data) > MAX_MESSAGE_BYTES:
            raise InvalidMessage("oversized", f"{len(data)} bytes")
        try:
            decoded = json.loads(data)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise InvalidMessage("not_json", str(exc)[:80]) from None
        return cls.from_dict(decoded, fleet)


def _stagger(value: float) -> float:
    if not math.isfinite(value) or value < 0 or value > MAX_STAGGER_S:
        raise ContractError(f"resume_stagger_s must be 0..{MAX_STAGGER_S:g}, not {value!r}")
    return value


def _text_field(data: dict[str, Any], name: str) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT_LEN:
        raise InvalidMessage("bad_field", name)
    return value


def _time_field(data: dict[str, Any], name: str) -> datetime | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidMessage("bad_field", name)
    try:
        return parse_time(value)
    except ContractError:
        raise InvalidMessage("bad_field", name) from None


def stagger_offset(replica_id: str, window_s: float, peers: Sequence[str] | None = None) -> float:
    """How long after the resume this replica resumes, within a window of ``window_s`` seconds.

    With ``peers`` (the live replica ids, this one among them) the offsets are exactly even:
    the i-th id in sorted order waits ``i * window_s / len(peers)``. Without them (or when this
    id is not among them) the offset comes from a hash of the id, uniform over the window.
    """
    if window_s <= 0:
        return 0.0
    if peers:
        ordered = sorted(set(peers))
        if replica_id in ordered:
            return window_s * ordered.index(replica_id) / len(ordered)
    digest = hashlib.blake2b(replica_id.encode(), digest_size=8).digest()
    return window_s * int.from_bytes(digest, "big") / 2.0**64
