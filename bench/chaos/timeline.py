"""A chaos history turned into what the checker reasons about (``Timeline``).

* **lives**: each replica process, from ``spawn`` to ``exit``;
* **windows**: each fault, from ``fault-start`` to ``fault-end`` (or the end of the run);
* **changes**: each operator change of the fleet state, keyed by version and ``changed_at``, with
  the earliest moment it was known to be readable in Redis (``readable``: the change call
  returned, or the observer saw it on the channel or in the hash);
* **evidence**: for each life, moments at which its applied version is known: its records
  (``applied_at``, exact, and ``heartbeat_at``), its acknowledgements (sent ``at``) and its
  item starts;
* **items**: what was enqueued, every run of each item (from the handler's lines), the dead
  letters;
* the operator's calls, the settled snapshots, the process exits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from bench.chaos.faults import HA_FAILOVERS, REDIS_RESTART
from bench.chaos.history import Event

FLEET_WIDE: Final = (REDIS_RESTART, *HA_FAILOVERS)
"""Faults that break every replica's connection: Redis restarted, a primary moved."""
DEFAULTS: Final = {"poll_interval": 0.5, "heartbeat_interval": 1.0, "claim_idle": 5.0,
                   "item_timeout": 2.0, "max_retries": 1, "renew_interval": 5.0 / 3}


@dataclass
class Life:
    replica: str
    pid: int
    spawn: float
    healthy: float | None = None
    exit: float | None = None
    status: int | None = None
    killed: bool = False
    stopping: bool = False

    def alive_at(self, t: float) -> bool:
        return self.spawn <= t and (self.exit is None or t <= self.exit)


@dataclass
class Window:
    id: int
    kind: str
    target: str
    start: float
    end: float
    params: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start

    def overlaps(self, lo: float, hi: float, settle: float = 0.0) -> bool:
        return self.start <= hi and lo <= self.end + settle


@dataclass
class Change:
    version: int
    changed_at: float
    paused: bool
    auto_resume_at: float | None = None
    readable: float = float("inf")
    reused: bool = False
    """Another change got the same version (Redis lost the first one): not judged."""
    holds: list[tuple[float | None, float | None]] | None = None
    """The fleet holds of this state as (starts_at, auto_resume_at) epochs, None for a state
    without holds (then ``paused`` and ``auto_resume_at`` rule)."""

    def paused_at(self, t: float) -> bool:
        """Whether this state holds the fleet at ``t`` (a scheduled hold may have started, a
        hold may have ended by itself)."""
        if self.holds is not None:
            return any((start is None or start <= t) and (end is None or t < end)
                       for start, end in self.holds)
        return self.paused and (self.auto_resume_at is None or self.auto_resume_at > t)

    def edge_near(self, t: float, margin: float) -> bool:
        """Whether a hold starts or ends by itself within ``margin`` of ``t`` (a snapshot then
        may catch replicas on either side of it)."""
        edges = [x for start, end in (self.holds or []) for x in (start, end) if x is not None]
        if self.holds is None and self.paused and self.auto_resume_at is not None:
            edges.append(self.auto_resume_at)
        return any(abs(x - t) <= margin for x in edges)

    def first_end_after(self, t: float) -> float | None:
        """The first moment after ``t`` at which a hold in force at ``t`` ends by itself (the
        fleet may run then), or None."""
        if self.holds is not None:
            ends = [end for start, end in self.holds
                    if end is not None and end > t and (start is None or start <= t)]
            return min(ends) if ends else None
        return self.auto_resume_at


@dataclass
class Run:
    """One run of an item's handler."""

    item: str
    replica: str
    pid: int
    start: float
    version: int
    held: bool
    end: float | None = None
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Point:
    """At ``t`` the life had applied ``version`` (``exact``: ``t`` is the apply itself)."""

    t: float
    version: int
    source: str
    exact: bool = False


def _key(version: int, changed_at: float | None) -> tuple[int, int]:
    return version, round((changed_at or 0.0) * 1000)


class Timeline:
    """Everything the checker needs, indexed (see the module docstring)."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = list(events)
        self.header: Event = {}
        self.settings: dict[str, Any] = dict(DEFAULTS)
        self.lives: list[Life] = []
        self.windows: list[Window] = []
        self.changes: dict[tuple[int, int], Change] = {}
        self.points: dict[int, list[Point]] = defaultdict(list)
        self.enqueued: dict[str, Event] = {}
        self.unknown_enqueues: set[str] = set()
        self.unconfirmed: dict[str, Event] = {}
        """Items written to the primary that no replica confirmed in time."""
        self.runs: dict[str, list[Run]] = defaultdict(list)
        self.dead: dict[str, list[Event]] = defaultdict(list)
        self.ops: list[Event] = []
        self.audits: list[Event] = []
        self.settled: list[Event] = []
        self.wipes: list[Event] = []
        """Empty restarts of Redis: the items the work stream held just before (``items``,
        None when unknown), its last entry id (``last``), ``t`` just after the kill."""
        self.exits: list[Event] = []
        self.end: float = max((float(e["t"]) for e in self.events), default=0.0)
        self.phase: str | None = None
        self._build()

    # ------------------------------------------------------------------ lookups

    def life_of(self, replica: str, t: float) -> Life | None:
        for life in self.lives:
            if life.replica == replica and life.alive_at(t):
                return life
        return None

    def life_by_pid(self, pid: int) -> Life | None:
        return next((life for life in self.lives if life.pid == pid), None)

    def windows_on(self, life: Life) -> list[Window]:
        """The faults that touch this life: its own kill and freeze, its replica's link
        (whichever life uses it), Redis's restarts and failovers (``FLEET_WIDE``)."""
        return [w for w in self.windows
                if w.kind in FLEET_WIDE
                or (w.target == life.replica
                    and (w.kind == "link" or w.pid is None or w.pid == life.pid))]

    def change_of(self, version: int) -> Change | None:
        found = [c for c in self.changes.values() if c.version == version]
        return found[-1] if found else None

    # ------------------------------------------------------------------ building

    def _build(self) -> None:
        open_faults: dict[int, Window] = {}
        by_pid: dict[int, Life] = {}
        for e in self.events:
            ev, t = e["ev"], float(e["t"])
            if ev == "run" and not self.header:
                self.header = e
                self.settings.update(e.get("settings") or {})
            elif ev == "spawn":
                life = Life(e["replica"], int(e["pid"]), t)
                self.lives.append(life)
                by_pid[life.pid] = life
            elif ev == "healthy" and int(e["pid"]) in by_pid:
                by_pid[int(e["pid"])].healthy = t
            elif ev == "exit":
                self.exits.append(e)
                life_found = by_pid.get(int(e.get("pid") or -1))
                if life_found is not None and e.get("process", "replica") == "replica":
                    life_found.exit, life_found.status = t, e.get("status")
                    life_found.killed = bool(e.get("killed"))
                    life_found.stopping = bool(e.get("stopping"))
            elif ev == "fault-start":
                open_faults[int(e["id"])] = Window(
                    int(e["id"]), e["kind"], str(e.get("target")), t, float("inf"),
                    dict(e.get("params") or {}), e.get("pid"))
            elif ev == "fault-end" and int(e["id"]) in open_faults:
                window = open_faults.pop(int(e["id"]))
                window.end = t
                self.windows.append(window)
            elif ev == "change":
                self._change(e.get("version"), e.get("changed_at"), e.get("paused"),
                             e.get("auto_resume_at"), t, e.get("holds"))
            elif ev == "op":
                self.ops.append(e)
                if e.get("result") in ("ok", "unconfirmed") and e.get("version") is not None:
                    self._change(e["version"], e.get("changed_at"), e.get("paused"),
                                 e.get("auto_resume_at"), float(e.get("t_change") or t),
                                 e.get("holds"))
            elif ev == "audit":
                self.audits.append(e)
            elif ev == "ack":
                self._ack(e, t)
            elif ev == "record":
                self._record(e)
            elif ev == "item-start":
                run = Run(str(e["item"]), e["replica"], int(e["pid"]), t, int(e["version"]),
                          bool(e["held"]))
                self.runs[run.item].append(run)
                self._point_pid(run.pid, t, run.version, "item-start")
            elif ev == "item-end":
                self._end_run(e, t)
            elif ev == "enqueue":
                self.enqueued[str(e["item"])] = e
            elif ev == "enqueue-unknown":
                self.unknown_enqueues.add(str(e["item"]))
            elif ev == "enqueue-unconfirmed":
                self.unconfirmed[str(e["item"])] = e
            elif ev == "dead" and e.get("item") is not None:
                self.dead[str(e["item"])].append(e)
            elif ev == "settled":
                self.settled.append(e)
            elif ev == "wiped":
                self.wipes.append(e)
            elif ev == "run-end":
                self.phase = e.get("phase")
        for window in open_faults.values():
            window.end = self.end
            self.windows.append(window)
        self.windows.sort(key=lambda w: w.start)
        versions: dict[int, int] = defaultdict(int)
        for change in self.changes.values():
            versions[change.version] += 1
        for change in self.changes.values():
            change.reused = versions[change.version] > 1
        for points in self.points.values():
            points.sort(key=lambda p: p.t)

    def _change(self, version: Any, changed_at: Any, paused: Any, auto_resume_at: Any,
                seen: float, holds: Any = None) -> None:
        if version is None or changed_at is None or int(version) <= 0:
            return
        key = _key(int(version), float(changed_at))
        change = self.changes.get(key)
        if change is None:
            change = self.changes[key] = Change(
                int(version), float(changed_at), bool(paused),
                None if auto_resume_at is None else float(auto_resume_at))
        if change.holds is None and isinstance(holds, list):
            change.holds = [(None if a is None else float(a), None if b is None else float(b))
                            for _name, a, b in holds]
        change.readable = max(change.changed_at, min(change.readable, seen))

    def _point(self, replica: str, t: float, version: Any, source: str,
               exact: bool = False) -> None:
        life = self.life_of(replica, t)
        if life is not None and version is not None:
            self.points[life.pid].append(Point(t, int(version), source, exact))

    def _ack(self, e: Event, t: float) -> None:
        self._point(e["replica"], float(e.get("at") or t), e["version"], "ack")

    def _point_pid(self, pid: int, t: float, version: int, source: str) -> None:
        if version >= 0:
            self.points[pid].append(Point(t, version, source))

    def _record(self, e: Event) -> None:
        replica, version = e["replica"], e.get("applied_version")
        if e.get("heartbeat_at") is not None:
            heartbeat = float(e["heartbeat_at"])
            life = self.life_of(replica, heartbeat)
            if life is None:
                return
            self.points[life.pid].append(Point(heartbeat, int(version or 0), "record"))
            applied_at = e.get("applied_at")
            if applied_at is not None and life.alive_at(float(applied_at)):
                self.points[life.pid].append(
                    Point(float(applied_at), int(version or 0), "record-applied", True))

    def _end_run(self, e: Event, t: float) -> None:
        for run in reversed(self.runs.get(str(e["item"]), [])):
            if run.pid == int(e["pid"]) and run.end is None:
                run.end, run.outcome = t, e.get("outcome")
                return


__all__ = ["Change", "Life", "Point", "Run", "Timeline", "Window"]
