"""The pause state of a fleet (``FleetState``), as a hash and as the JSON of a change, and
where a replica falls in a staggered resume."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from replica.contract.clock import format_time, now_utc, parse_time
from replica.contract.holds import (
    DEFAULT_HOLD,
    Hold,
    Holds,
    hold_applies,
    holds_field_error,
    holds_from_json,
    holds_from_object,
    holds_to_dict,
    holds_to_json,
    next_transition,
    running_since,
)
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
    S_HOLDS,
    S_HOLDS_VERSION,
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

    ``holds`` are the fleet's named pauses (see ``replica.contract.holds``): when they are
    known (not None) the fleet is paused at a time exactly when one of them is active then, and
    ``paused``, ``reason``, ``since``... describe the fleet as a whole when the state was
    written. None means a state written by an older release or by hand: ``paused`` rules.
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
    holds: Holds | None = None

    @classmethod
    def initial(cls, fleet: str) -> FleetState:
        """The state of a fleet that has no state hash: running, version 0."""
        return cls(fleet=fleet, paused=False, reason="", by="", since=None, version=0)

    # -- derived

    def auto_resumed(self, now: datetime | None = None) -> bool:
        """True when this was written paused and no pause is in force at ``now`` any more
        (``auto_resume_at`` passed; with holds: every active one ended by itself)."""
        if not self.paused:
            return False
        now = now or now_utc()
        if self.holds is not None:
            return not any(h.active(now) for h in self.holds)
        return self.auto_resume_at is not None and now >= self.auto_resume_at

    def effectively_paused(self, now: datetime | None = None) -> bool:
        """Whether the fleet is paused at ``now``: with holds, whether one of them is active
        then (a scheduled one may have started); else paused and not past ``auto_resume_at``."""
        now = now or now_utc()
        if self.holds is not None:
            return any(h.active(now) for h in self.holds)
        return self.paused and not self.auto_resumed(now)

    def active_holds(self, now: datetime | None = None) -> Holds:
        """The holds in force at ``now`` (a legacy pause reads as one hold, ``default``)."""
        now = now or now_utc()
        return tuple(h for h in self.effective_holds() if h.active(now))

    def effective_holds(self) -> Holds:
        """The holds, or for a state without them (older release, by hand) the pause as one
        hold named ``default`` (none when running)."""
        if self.holds is not None:
            return self.holds
        if not self.paused:
            return ()
        return (Hold(DEFAULT_HOLD, self.reason, self.by, self.since, self.expected_until,
                     self.auto_resume_at),)

    def next_transition(self, now: datetime | None = None) -> datetime | None:
        """The first time after ``now`` when the fleet may go from paused to running or back by
        itself (a hold starting or ending), or None."""
        now = now or now_utc()
        if self.holds is not None:
            return next_transition(self.holds, now)
        if self.paused and self.auto_resume_at is not None and self.auto_resume_at > now:
            return self.auto_resume_at
        return None

    def resume_start(self, now: datetime | None = None) -> datetime | None:
        """When pools should start resuming (before any stagger offset): ``since`` of a running
        state, ``auto_resume_at`` of a pause that ends by itself, None for an open-ended pause.
        With holds and ``now``: when the fleet last stopped being paused, before ``now``."""
        if self.holds is not None and now is not None and not self.effectively_paused(now):
            ended = running_since(self.holds, now)
            start = None if self.paused else self.since
            if ended is not None and (start is None or ended > start):
                return ended
            return start
        if self.paused:
            return self.auto_resume_at
        return self.since

    def for_replica(self, labels: Mapping[str, str], replica_id: str) -> FleetState:
        """This state as the replica ``replica_id`` with ``labels`` follows it: only the holds
        that hold it (``hold_applies``: a selector it does not match, or a canary resume that
        released it, leaves a hold out). The state itself when every hold applies (or it has
        no holds: ``paused`` rules, as an older release wrote it)."""
        holds = self.holds
        if holds is None or all(h.select is None and not h.canaries for h in holds):
            return self
        mine = tuple(h for h in holds if hold_applies(h, labels, replica_id))
        return self if len(mine) == len(holds) else replace(self, holds=mine)

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
            and self.holds == other.holds
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
            "holds": None if self.holds is None else holds_to_dict(self.holds),
        }

    def to_json(self) -> str:
        """The control message for this state: UTF-8 text as it is (as the set-state script
        publishes it), so a state of long non-ASCII reasons stays within ``MAX_MESSAGE_BYTES``
        (escaped, a character takes up to 12 bytes); escaped only when the text holds a lone
        surrogate, which UTF-8 cannot carry."""
        data = self.to_dict()
        out = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        try:
            out.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(data, separators=(",", ":"))
        return out

    def to_hash(self) -> dict[str, str]:
        """The fields of the state hash."""
        stagger = self.resume_stagger_s
        fields = {
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
        if self.holds is not None:
            fields[S_HOLDS] = holds_to_json(self.holds)
            fields[S_HOLDS_VERSION] = str(self.version)
        return fields

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
            holds: Holds | None = None
            changed_at = parse_time(h.get(S_CHANGED_AT))
            if S_HOLDS in h and h.get(S_HOLDS_VERSION, "").strip() == str(version):
                holds = holds_from_json(h[S_HOLDS])
                # `paused` edited by hand (no version bump) disagrees with the holds as they
                # stood when the hash was written: the hand edit rules, as before holds
                if changed_at is not None and any(x.active(changed_at) for x in holds) != paused:
                    holds = None
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
                changed_at=changed_at,
                holds=holds,
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
        holds: Holds | None = None
        if data.get("holds") is not None:
            try:
                holds = holds_from_object(data["holds"])
            except ContractError as exc:
                raise holds_field_error(exc) from None
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
            holds=holds,
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
