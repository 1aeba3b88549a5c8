"""The checker: reads a chaos history and proves each rule, or names its first counterexample.

1. **starts**: no item starts on a replica while that replica has a pause applied (the
   handler's own ``held`` at the item's start: the pool hands an item over and enters its
   handler in one step, so a handler never begins after the pause).
2. **propagation**: every replica that is up and connected applies each change within
   ``poll_interval`` + 100 ms of the change becoming readable in Redis, outside its own fault
   windows (its kill, freeze and link faults, and Redis restarts, each followed by the time to
   reconnect). Proof of a late apply: the replica applied exactly that version after the
   deadline (its record's ``applied_at``), or showed an older version after it (a record, an
   acknowledgement or an item start).
3. **items**: every enqueued item is done at least once, or is in the dead-letter stream with
   its error (an item the work stream held when an empty restart wiped it, or added to it
   after it was read for that, is counted apart: Redis forgot it).
   Each duplicate (a second completion) is explained by a kill (the life that completed it
   was killed before the other run started), a freeze past the claim idle time less one lease
   renewal (on a replica that ran it, while it existed) or a lost acknowledgement (the link of
   the replica that completed it was cut, or Redis restarted, between its run and the other),
   and counted by cause.
4. **versions**: the versions a replica applies never go back within one process life (after
   Redis lost its data too: an older pause put back over a newer running state is raised
   above it by the restore, never applied at its older version).
5. **settled**: once every fault healed, every replica's state equals the last operator action
   (its version; held exactly when it is a pause still in force), or the restored state where
   the audit trail says ``restore`` after it.
6. **wait**: ``wait`` never reported ``ok`` while a replica live at the change had not reached
   it. Proof: the replica had an item running through the report (a pause), applied the
   version only after it, showed an older version after it, or was frozen from before the
   change until after it.
7. **exits**: no process exited non-zero unless the schedule killed it; the CLI exits with a
   documented status (0, 1, 3, 5; 2 only for a resume refused because it named no hold while
   the fleet had several, or a hold the fleet did not have, and for a window over a hold that
   is active now, refused without ``--reschedule``), never a traceback.

Fleet holds and maintenance windows: a change's state says which holds it has and when each
starts and ends by itself (``Change.paused_at``), so rules 5 and 6 judge a window that started
or ended on the replicas' own clocks as they do an automatic resume.

Counterexamples of known product defects (``KNOWN``, none at present) are counted and
reported apart and do not fail the run unless ``strict``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from typing import Final

from bench.chaos.exits import check_exits, count_operator
from bench.chaos.faults import HA_FAILOVERS
from bench.chaos.history import Event
from bench.chaos.timeline import FLEET_WIDE, Change, Life, Run, Timeline
from bench.chaos.verdict import KNOWN, RULES, CheckResult, RuleResult

SLACK_S: Final = 0.1
"""Rule 2's allowance beyond ``poll_interval``."""
FAILOVER_SETTLE_S: Final = 3.0
"""After a failover's window (it ends once the new primary serves), how long a replica may take
to reach it: its connections to the old one break or are refused (READONLY, MOVED), and it
asks the sentinels or the slots again."""
TIME_TOLERANCE_S: Final = 0.002
"""Times written with millisecond precision are up to 1 ms early."""
def _fmt_t(t: float, t0: float) -> str:
    return f"t+{t - t0:.3f}s"


class Checker:
    """Checks one history (``check()``)."""

    def __init__(self, events: Iterable[Event], *, strict: bool = False) -> None:
        self.tl = Timeline(events)
        self.strict = strict
        run = self.tl.header
        self.t0 = float(run["t"]) if run else (float(self.tl.events[0]["t"])
                                                if self.tl.events else 0.0)
        s = self.tl.settings
        self.poll = float(s["poll_interval"])
        self.claim_idle = float(s["claim_idle"])
        self.renew = float(s.get("renew_interval") or self.claim_idle / 3)

    def at(self, t: float) -> str:
        return _fmt_t(t, self.t0)

    def check(self) -> CheckResult:
        tl = self.tl
        result = CheckResult({n: RuleResult(n) for n in RULES}, strict=self.strict)
        result.phase = tl.phase
        result.complete = tl.phase in ("done", "stopped")
        result.faults = Counter(w.kind for w in tl.windows)
        result.operator = count_operator(tl)
        self.rule1(result.rules[1])
        self.rule2(result.rules[2], result)
        self.rule3(result.rules[3], result)
        self.rule4(result.rules[4])
        self.rule5(result.rules[5])
        self.rule6(result.rules[6])
        self.rule7(result.rules[7])
        return result

    # ------------------------------------------------------------------ 1

    def known(self, r: RuleResult, message: str) -> None:
        """A counterexample of a known product defect: apart, unless ``strict``."""
        if self.strict:
            r.fail(message)
        else:
            r.known_defect(message)

    def rule1(self, r: RuleResult) -> None:
        for runs in self.tl.runs.values():
            for run in runs:
                r.checked += 1
                if run.held:
                    r.fail(f"item {run.item} started on {run.replica} (pid {run.pid}) at "
                           f"{self.at(run.start)} with the pause of v{run.version} applied")

    # ------------------------------------------------------------------ 2

    def settle(self, kind: str, params: dict[str, object]) -> float:
        """How long after a fault a replica may take to be up and connected again."""
        if kind == "redis-restart":
            return 2 * self.poll + 1.0
        if kind in HA_FAILOVERS:  # the window ends once failed over; clients find the new one
            return 2 * self.poll + FAILOVER_SETTLE_S
        if kind == "link":
            delay = params.get("delay")
            return self.poll + 1.0 + (float(delay) if isinstance(delay, int | float) else 0.0)
        return self.poll + 1.0

    def excused(self, life: Life, lo: float, hi: float) -> bool:
        return any(w.overlaps(lo, hi, self.settle(w.kind, w.params))
                   for w in self.tl.windows_on(life))

    def rule2(self, r: RuleResult, result: CheckResult) -> None:
        tl = self.tl
        limit = self.poll + SLACK_S
        for change in sorted(tl.changes.values(), key=lambda c: c.readable):
            if change.reused or change.readable == float("inf"):
                continue
            lo, deadline = change.readable, change.readable + limit
            for life in tl.lives:
                if life.healthy is None or life.healthy > lo:
                    continue
                if life.exit is not None and life.exit <= deadline:
                    continue
                if self.excused(life, lo, deadline):
                    result.excused_pairs += 1
                    continue
                r.checked += 1
                late = self._late(life, change, deadline)
                if late is not None:
                    r.fail(f"{life.replica} (pid {life.pid}) {late}; v{change.version} was "
                           f"readable at {self.at(lo)}, deadline {self.at(deadline)}")
                first = next((p for p in tl.points.get(life.pid, [])
                              if p.version >= change.version and p.t >= lo - 1.0), None)
                if first is not None:
                    delay = max(0.0, first.t - lo)
                    worst = result.worst_propagation
                    if worst is None or delay > worst[0]:
                        result.worst_propagation = (delay, f"{life.replica} v{change.version}")

    def _late(self, life: Life, change: Change, deadline: float) -> str | None:
        """Proof that ``life`` had not applied ``change`` by ``deadline``, or None."""
        for p in self.tl.points.get(life.pid, []):
            if p.t <= deadline + TIME_TOLERANCE_S:
                continue
            if p.exact and p.version == change.version:
                return f"applied v{change.version} at {self.at(p.t)}"
            if p.version < change.version:
                return f"still had v{p.version} at {self.at(p.t)} ({p.source})"
        return None

    # ------------------------------------------------------------------ 3

    def rule3(self, r: RuleResult, result: CheckResult) -> None:
        tl = self.tl
        held, unknown = self._wiped()
        result.items = len(tl.enqueued)
        result.unknown_enqueues = len(tl.unknown_enqueues)
        result.unconfirmed_enqueues = len(tl.unconfirmed)
        confirmed = [(item, enq, True) for item, enq in tl.enqueued.items()]
        unconfirmed = [(item, enq, False) for item, enq in tl.unconfirmed.items()]
        for item, enq, told in confirmed + unconfirmed:
            runs = tl.runs.get(item, [])
            completions = sorted((x for x in runs if x.outcome == "ok"), key=lambda x: x.start)
            letters = [d for d in tl.dead.get(item, []) if d.get("error")]
            if not told:  # the producer was told it may be lost: only its duplicates count
                result.unconfirmed_lost += not completions and not letters
            elif completions:
                r.checked += 1
                result.done += 1
            elif letters:
                r.checked += 1
                result.dead += 1
                result.dead_ok += enq.get("kind", "ok") == "ok"
            elif item in held or any(float(enq.get("t0") or enq["t"]) <= w for w in unknown) \
                    or self._after_the_last_read(enq):
                r.checked += 1
                result.forgotten += 1
            else:
                r.checked += 1
                result.lost += 1
                r.fail(f"item {item} (enqueued at {self.at(float(enq['t']))}) was never done "
                       f"nor dead-lettered ({len(runs)} runs started)")
            for earlier, later in itertools.pairwise(completions):
                cause = self._duplicate_cause(earlier, later)
                if cause is None:
                    result.unexplained += 1
                    r.fail(f"item {item} completed twice, on {earlier.replica} (pid "
                           f"{earlier.pid}) at {self.at(earlier.start)} and on "
                           f"{later.replica} (pid {later.pid}) at {self.at(later.start)}, "
                           "with no kill, long freeze or lost acknowledgement to explain it")
                else:
                    result.duplicates[cause] += 1

    def _wiped(self) -> tuple[set[str], list[float]]:
        """The items the work stream held when an empty restart wiped it, and the times of the
        wipes whose stream could not be read (every item enqueued before one may be gone)."""
        held: set[str] = set()
        unknown: list[float] = []
        for wipe in self.tl.wipes:
            if wipe.get("items") is None:
                unknown.append(float(wipe["t"]))
            else:
                held.update(str(i) for i in wipe["items"])
        return held, unknown

    def _after_the_last_read(self, enq: Event) -> bool:
        """Enqueued after the stream was read for a wipe (an entry id past its last one, or
        sent just before an empty stream was read) and before the kill: wiped too."""
        entry = _entry(enq.get("entry"))
        t0 = float(enq.get("t0") or enq["t"])
        for wipe in self.tl.wipes:
            if wipe.get("items") is None or t0 > float(wipe["t"]):
                continue
            last = _entry(wipe.get("last"))
            if last is not None and entry is not None and entry > last:
                return True
            if last is None and t0 >= float(wipe.get("read_at") or wipe["t"]) - 0.5:
                return True
        return False

    def _duplicate_cause(self, x: Run, y: Run) -> str | None:
        """Why ``y`` ran the item again after ``x`` completed it (``x`` started first)."""
        tl = self.tl
        x_life = tl.life_by_pid(x.pid)
        if x_life is not None and x_life.killed and x_life.exit is not None \
                and (x.end or x.start) - TIME_TOLERANCE_S <= x_life.exit <= y.start:
            return "kill"
        long_freeze = self.claim_idle - self.renew
        lo = x.start - self.claim_idle
        for w in tl.windows:
            if w.kind == "freeze" and w.duration >= long_freeze and \
                    w.pid in (x.pid, y.pid) and w.overlaps(lo, y.start):
                return "freeze"
        x_end = x.end if x.end is not None else x.start
        for w in tl.windows:
            if w.kind in FLEET_WIDE or (
                    w.kind == "link" and w.params.get("mode") in ("drop", "blackhole")
                    and w.target in (x.replica, y.replica)):
                if w.overlaps(min(x.start, x_end), y.start, self.settle(w.kind, w.params)):
                    return "lost-ack"
        return None

    # ------------------------------------------------------------------ 4

    def rule4(self, r: RuleResult) -> None:
        for life in self.tl.lives:
            highest: tuple[float, int, str] | None = None
            for p in self.tl.points.get(life.pid, []):
                r.checked += 1
                if highest is not None and p.version < highest[1] and \
                        p.t > highest[0] + TIME_TOLERANCE_S:
                    r.fail(f"{life.replica} (pid {life.pid}) had v{highest[1]} at "
                           f"{self.at(highest[0])} ({highest[2]}) and v{p.version} at "
                           f"{self.at(p.t)} ({p.source})")
                    break
                if highest is None or p.version > highest[1]:
                    highest = (p.t, p.version, p.source)

    # ------------------------------------------------------------------ 5

    def last_action(self, before: float) -> tuple[Change | None, bool]:
        """The state of the last operator action before ``before`` and whether the audit trail
        says ``restore`` after it, or that the action was never confirmed by a Redis replica
        (a failover may have lost it: then the state hash is the judge, as after a restore)."""
        tl = self.tl
        best: Change | None = None
        unconfirmed = False
        for op in tl.ops:
            if op.get("result") not in ("ok", "unknown", "cancelled", "unconfirmed") or \
                    float(op["t"]) > before:
                continue
            lo, hi = float(op.get("t0") or op["t"]), float(op["t"])
            for change in tl.changes.values():
                if lo - TIME_TOLERANCE_S <= change.changed_at <= hi + TIME_TOLERANCE_S or (
                        op.get("version") == change.version
                        and op.get("changed_at") is not None
                        and abs(float(op["changed_at"]) - change.changed_at) < 0.001):
                    if best is None or change.changed_at >= best.changed_at:
                        best = change
                        unconfirmed = op.get("result") == "unconfirmed"
        if best is None:
            return None, False
        if unconfirmed:
            return best, True
        restored = any(a.get("action") == "restore" and a.get("at") is not None
                       and float(a["at"]) > best.changed_at and float(a["t"]) <= before
                       for a in tl.audits)
        return best, restored

    def rule5(self, r: RuleResult) -> None:
        for snap in self.tl.settled:
            t = float(snap["t"])
            state = snap.get("state")
            change, restored = self.last_action(t)
            if change is None:
                continue
            if restored:
                if not isinstance(state, dict):
                    r.fail(f"after {snap.get('phase')}: the state hash is missing")
                    continue
                version, paused = int(state["version"]), bool(state["effectively_paused"])
                what = f"the restored v{version}"
            else:
                version = change.version
                paused = change.paused_at(t)
                what = f"the last action, v{version} ({'paused' if paused else 'running'})"
            if isinstance(state, dict) and int(state["version"]) != version:
                r.fail(f"after {snap.get('phase')}: the state hash is at v{state['version']}, "
                       f"not {what}")
            for rep in snap.get("replicas") or []:
                r.checked += 1
                if rep.get("stale"):
                    r.fail(f"after {snap.get('phase')}: {rep['id']} is stale")
                elif rep.get("applied_version") != version or (
                        bool(rep.get("fleet_held")) != paused
                        and (restored or not change.edge_near(t, self.poll + SLACK_S))):
                    r.fail(f"after {snap.get('phase')}: {rep['id']} has v"
                           f"{rep.get('applied_version')} "
                           f"({'held' if rep.get('fleet_held') else 'running'}), not {what}")

    # ------------------------------------------------------------------ 6

    def rule6(self, r: RuleResult) -> None:
        tl = self.tl
        for op in tl.ops:
            wait = op.get("wait")
            if not isinstance(wait, dict) or not wait.get("ok"):
                continue
            version = int(wait.get("version") or op.get("version") or 0)
            change = tl.change_of(version)
            if change is None or change.reused:
                continue
            t_lo, t_hi = float(wait["t_lo"]), float(wait["t_hi"])
            pause = wait.get("action", "pause" if change.paused else "resume") == "pause"
            for life in tl.lives:
                if life.healthy is None or life.healthy > change.changed_at:
                    continue
                if life.exit is not None and life.exit <= t_hi:
                    continue
                r.checked += 1
                why = self._not_reached(life, change, pause, t_lo, t_hi)
                if why is not None:
                    r.fail(f"wait for v{version} ({op.get('via')}) said ok at "
                           f"{self.at(t_hi)} but {life.replica} (pid {life.pid}) {why}")

    def _not_reached(self, life: Life, change: Change, pause: bool, t_lo: float,
                     t_hi: float) -> str | None:
        tl = self.tl
        for w in tl.windows_on(life):
            if w.kind == "freeze" and w.start <= change.changed_at and w.end >= t_hi:
                return f"was frozen from {self.at(w.start)} to {self.at(w.end)}"
        if pause:
            ends = change.first_end_after(change.changed_at)
            started_before = t_lo if ends is None else min(t_lo, ends)
            for runs in tl.runs.values():
                for run in runs:
                    if run.pid == life.pid and run.start < started_before and (
                            (run.end is not None and run.end > t_hi) or run.end is None):
                        return (f"had item {run.item} in flight from {self.at(run.start)} to "
                                + (self.at(run.end) if run.end is not None else "its end"))
        late = self._late(life, change, t_hi)
        return None if late is None else late

    # ------------------------------------------------------------------ 7

    def rule7(self, r: RuleResult) -> None:
        check_exits(self.tl, r, self.at)


def _entry(value: object) -> tuple[int, int] | None:
    """A stream entry id (``1700000000000-0``) as a comparable pair."""
    if not isinstance(value, str) or "-" not in value:
        return None
    ms, _, seq = value.partition("-")
    try:
        return int(ms), int(seq)
    except ValueError:
        return None


def check(events: Iterable[Event], *, strict: bool = False) -> CheckResult:
    """Check a history (its events, in any order: they are sorted by time)."""
    ordered = sorted(events, key=lambda e: float(e["t"]))
    return Checker(ordered, strict=strict).check()


__all__ = ["KNOWN", "RULES", "CheckResult", "Checker", "RuleResult", "check"]
