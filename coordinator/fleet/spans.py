"""A fleet's holds as spans of time (``rebuild``): who held it, why, from when until when.

The spans are rebuilt from the audit trail, oldest entry first, and then squared with the
state, which has the last word on what is in force now and what is planned:

* ``pause``, ``hold_added`` open the hold's span at the entry's ``at``; ``hold_updated``
  changes its reason, by and end (a span not seen opening began before the entries read);
* ``hold_released`` closes it (``ended: released``, ``ended_by`` who), ``resume`` closes the
  holds it names and every other open one (the fleet runs after it);
* ``hold_scheduled`` plans a window (``starts_at`` to ``auto_resume_at``); a hold active then
  is rescheduled, its span closed (``ended: rescheduled``); ``resume`` with a ``starts_at`` is
  the same for the last active hold; ``hold_cancelled`` drops a planned window;
* ``window_started``/``window_ended`` (the watcher's edges) open and close a window; with no
  watcher running the edges are taken from ``starts_at``/``auto_resume_at`` themselves, as the
  replicas do (a span closes by itself at its ``auto_resume_at``: ``ended: auto``);
* ``schedule_started``/``schedule_ended`` (the watcher's) open and close a schedule's
  occurrence (``kind: schedule``); an early end or ``schedule_removed`` close it then;
* ``canary_started`` marks the hold's span with its canary phase (``canary``: start, the
  replicas released), ``canary_rolled_back`` ends the phase, ``canary_promoted`` ends it and
  the hold (``ended: promoted``);
* any other action (``restore``, ``schedule_added``, ``limit_set``, one of a later release)
  changes no hold and is passed over. An entry that cannot be read (no time, no action or one
  that is not a word, a hold name that is not one) is skipped and counted
  (``Rebuilt.skipped``).

Then the state: a hold active now is an open span (``end`` null, ``until`` its
``auto_resume_at``), begun at its ``since``; a scheduled one is a planned window; one that
ended by itself and was not dropped yet is a closed span. A span the entries left open that
the state does not have ended unseen (``ended: unknown``) at the latest at the state's last
change. Each span is a ``Span`` (``kind`` ``hold``, ``window`` or ``schedule``); ``EXTRAS`` of
a hold or an entry (a selector, canaries) are carried along as they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from coordinator.fleet.models import AuditEvent
from replica.contract import FLEET_NAME_RE, FleetState, format_time
from replica.contract.holds import ACTIVE, ENDED, SCHEDULED, Hold

HOLD: Final = "hold"
WINDOW: Final = "window"
SCHEDULE: Final = "schedule"
EXTRAS: Final = ("select", "canaries", "schedule")
"""Fields of a hold (or an audit entry) a span carries as they are, when present."""
ENTRY_FIELDS: Final = (*EXTRAS, "cron", "timezone", "early")
"""The fields of an audit entry the rebuild reads beyond ``AuditEvent``'s."""
OPENS: Final = frozenset({"pause", "hold_added", "hold_updated"})
OCCURRENCE_EDGES: Final = frozenset({"schedule_started", "schedule_ended", "schedule_removed"})
"""An occurrence of a schedule starting and ending (the watcher's, or an early end), and a
schedule removed (its occurrence in force ends)."""
CANARY: Final = frozenset({"canary_started", "canary_rolled_back", "canary_promoted"})
"""A canary resume: released on some replicas, put back on them, or released on all."""
HOLD_ACTIONS: Final = OPENS | OCCURRENCE_EDGES | CANARY | {
    "resume", "hold_released", "hold_scheduled", "hold_cancelled", "window_started",
    "window_ended"}
"""The actions that open or close a span; any other well-formed action (``restore``,
``schedule_added``, ``limit_set``, one of a later release) changes no hold and is passed over."""
ACTION_RE: Final = re.compile(r"[a-z][a-z_]{0,39}")


@dataclass(slots=True)
class Span:
    """One hold in force (or planned) over a stretch of time."""

    hold: str
    kind: str
    start: datetime | None
    """When it began; None: before the entries read (open at the left edge)."""
    end: datetime | None
    """When it ended; None: still in force (or, planned, no end of its own)."""
    by: str
    reason: str
    until: datetime | None = None
    """When it ends by itself (``auto_resume_at``)."""
    ended: str = ""
    """How it ended: ``released``, ``resumed``, ``auto``, ``rescheduled``, ``cancelled``,
    ``unknown``; "" while in force or planned."""
    ended_by: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, now: datetime) -> dict[str, Any]:
        last = self.end or (now if self.start is None or self.start <= now else None)
        duration = None
        if self.start is not None and last is not None:
            duration = round(max(0.0, (last - self.start).total_seconds()), 3)
        return {
            "hold": self.hold, "kind": self.kind,
            "start": format_time(self.start) or None, "end": format_time(self.end) or None,
            "open": self.end is None, "until": format_time(self.until) or None,
            "by": self.by, "reason": self.reason, "duration_s": duration,
            "ended": self.ended or None, "ended_by": self.ended_by or None, **self.extras,
        }


@dataclass(frozen=True, slots=True)
class Entry:
    """One audit entry as the rebuild reads it: the event and its extra fields."""

    event: AuditEvent
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Rebuilt:
    spans: list[Span]
    skipped: int = 0


def readable(entry: Entry) -> bool:
    """Whether the rebuild can use ``entry``: a known action, a time, hold names."""
    e = entry.event
    if ACTION_RE.fullmatch(e.action) is None or e.at is None:
        return False
    if e.action not in HOLD_ACTIONS:
        return True
    names = e.hold.split(",") if e.hold else []
    if e.action == "hold_scheduled" and e.starts_at is None:
        return False
    return all(FLEET_NAME_RE.fullmatch(n) for n in names)


def _extras(source: Mapping[str, Any]) -> dict[str, Any]:
    return {k: source[k] for k in EXTRAS if source.get(k) not in (None, "", [], {})}


class _Rebuild:
    def __init__(self) -> None:
        self.open: dict[str, Span] = {}
        self.planned: dict[str, Span] = {}
        self.done: list[Span] = []

    def close(self, name: str, at: datetime, how: str, by: str = "") -> None:
        span = self.open.pop(name, None)
        if span is None:
            return
        if span.until is not None and span.until < at:  # it had ended by itself before
            at, how, by = span.until, "auto", ""
        span.end, span.ended, span.ended_by = at, how, by
        self.done.append(span)

    def advance(self, t: datetime) -> None:
        """The edges that passed by ``t`` on their own: planned starts, ends of their own."""
        for name, span in sorted(self.planned.items(), key=lambda p: p[1].start or t):
            if span.start is not None and span.start <= t:
                del self.planned[name]
                self.close(name, span.start, "rescheduled")
                self.open[name] = span
        for name, span in list(self.open.items()):
            if span.until is not None and span.until <= t:
                self.close(name, span.until, "auto")

    def apply(self, entry: Entry) -> None:
        e = entry.event
        at = e.at
        assert at is not None  # readable()
        self.advance(at)
        names = e.hold.split(",") if e.hold else ["default"]
        name = names[0]
        extras = {k: v for k, v in entry.extras.items() if k in EXTRAS}
        if e.action in OPENS:
            self.planned.pop(name, None)
            span = self.open.get(name)
            if span is None:
                start = None if e.action == "hold_updated" else at
                self.open[name] = Span(name, HOLD, start, None, e.by, e.reason,
                                       e.auto_resume_at, extras=extras)
            else:
                span.by, span.reason, span.until = e.by, e.reason, e.auto_resume_at
                span.extras.update(extras)
        elif e.action == "hold_scheduled" or (e.action == "resume" and e.starts_at is not None):
            self.close(name, at, "rescheduled", e.by)
            if e.action == "resume":
                for other in list(self.open):
                    self.close(other, at, "resumed", e.by)
            self.planned[name] = Span(name, WINDOW, e.starts_at, None, e.by, e.reason,
                                      e.auto_resume_at, extras=extras)
        elif e.action in ("resume", "hold_released", "hold_cancelled"):
            how = {"hold_cancelled": "cancelled"}.get(e.action, "released")
            for n in names:
                self.planned.pop(n, None)
                if n not in self.open and e.action == "hold_released":  # began before
                    self.open[n] = Span(n, HOLD, None, None, e.by, e.reason, extras=extras)
                self.close(n, at, how, e.by)
            if e.action == "resume":  # the fleet runs: nothing else is in force
                for other in list(self.open):
                    self.close(other, at, "resumed", e.by)
        elif e.action == "window_started":
            if name not in self.open:
                span = self.planned.pop(name, None) or Span(
                    name, WINDOW, at, None, e.by, e.reason, e.auto_resume_at, extras=extras)
                span.start = at
                self.open[name] = span
        elif e.action == "schedule_started":
            if name not in self.open:
                extras.setdefault("schedule", f"{entry.extras.get('cron', '')} "
                                              f"({entry.extras.get('timezone', '')})")
                self.open[name] = Span(name, SCHEDULE, at, None, e.by, e.reason,
                                       e.auto_resume_at, extras=extras)
        elif e.action in ("schedule_ended", "schedule_removed"):
            early = e.action == "schedule_removed" or entry.extras.get("early") == "1"
            self.close(name, at, "early" if early else "auto", e.by if early else "")
        elif e.action in CANARY:
            self.canary(entry, name, at)
        elif e.action == "window_ended":
            if name in self.open:
                self.close(name, at, "auto")
            elif not any(s.hold == name and s.end == at for s in self.done):
                self.done.append(Span(name, WINDOW, e.starts_at, at, e.by, e.reason, at,
                                      "auto", extras=extras))

    def canary(self, entry: Entry, name: str, at: datetime) -> None:
        """A canary resume of ``name``: its phase (``canary``: start, end, outcome, replicas)
        on the hold's span; a promotion releases the hold."""
        e = entry.event
        span = self.open.get(name)
        if span is None:  # began before the entries read
            span = self.open[name] = Span(name, HOLD, None, None, e.by, e.reason)
        phase = span.extras.get("canary")
        if e.action == "canary_started":
            replicas = [r for r in str(entry.extras.get("canaries", "")).split(",") if r]
            span.extras["canary"] = {"start": format_time(at), "end": None, "outcome": None,
                                     "replicas": replicas, "by": e.by}
            return
        outcome = "promoted" if e.action == "canary_promoted" else "rolled_back"
        if isinstance(phase, dict):
            phase.update(end=format_time(at), outcome=outcome)
        else:
            span.extras["canary"] = {"start": None, "end": format_time(at), "outcome": outcome,
                                     "replicas": [], "by": e.by}
        span.extras.pop("canaries", None)
        if outcome == "promoted":
            self.close(name, at, "promoted", e.by)

    def square(self, state: FleetState, now: datetime) -> None:
        """The state has the last word on what is in force now and what is planned."""
        self.advance(now)
        holds: dict[str, Hold] = {h.name: h for h in state.effective_holds()}
        planned: dict[str, Span] = {}
        for h in holds.values():
            status = h.status(now)
            extras = _extras(h.to_dict())
            kind = WINDOW if h.starts_at is not None else HOLD
            if status == ACTIVE:
                span = self.open.get(h.name)
                if span is None:
                    span = self.open[h.name] = Span(h.name, kind, None, None, h.by, h.reason)
                span.start = h.starts_at or h.since or span.start
                span.by, span.reason, span.until, span.kind = h.by, h.reason, h.auto_resume_at, kind
                span.extras.update(extras)
            elif status == SCHEDULED:
                planned[h.name] = Span(h.name, WINDOW, h.starts_at, h.auto_resume_at, h.by,
                                       h.reason, h.auto_resume_at, extras=extras)
            elif status == ENDED and h.auto_resume_at is not None and not any(
                    s.hold == h.name and s.end == h.auto_resume_at for s in self.done):
                self.done.append(Span(h.name, kind, h.starts_at or h.since, h.auto_resume_at,
                                      h.by, h.reason, h.auto_resume_at, "auto", extras=extras))
        ours = [n for n, s in self.open.items() if s.kind != SCHEDULE]  # occurrences end alone
        for name in [n for n in ours if n not in holds or not holds[n].active(now)]:
            changed = state.changed_at if state.changed_at is not None else now
            span = self.open[name]
            end = changed if span.start is None or changed >= span.start else now
            self.close(name, min(end, now), "unknown")
        self.planned = planned


def rebuild(entries: Iterable[Entry], state: FleetState, now: datetime) -> Rebuilt:
    """The spans of ``entries`` (oldest first) squared with ``state`` at ``now``: closed, in
    force (``end`` None) and planned ones, by start (unknown starts first)."""
    work = _Rebuild()
    skipped = 0
    for entry in entries:
        if not readable(entry):
            skipped += 1
            continue
        work.apply(entry)
    work.square(state, now)
    spans = work.done + list(work.open.values()) + list(work.planned.values())
    spans.sort(key=lambda s: (s.start is not None, s.start or now, s.hold))
    return Rebuilt(spans, skipped)


def clip(spans: Iterable[Span], left: datetime, right: datetime, now: datetime) -> list[Span]:
    """The spans that overlap ``left``..``right`` (an open one lasts until ``now`` at least,
    or its ``until``; a planned one without an end, until ``right``)."""
    out = []
    for s in spans:
        last = s.end or max(now, s.until or now) if s.start is None or s.start <= now else (
            s.end or s.until or right)
        if last >= left and (s.start is None or s.start <= right):
            out.append(s)
    return out


__all__ = ["CANARY", "ENTRY_FIELDS", "EXTRAS", "HOLD", "HOLD_ACTIONS", "SCHEDULE", "WINDOW", "Entry", "Rebuilt", "Span", "clip",
           "readable", "rebuild"]
