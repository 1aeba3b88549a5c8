"""Rule 7 of the checker, **exits**, and the operator's calls counted by kind.

No process exits non-zero unless the schedule killed it; the CLI exits with a documented status
(0, 1, 3, 4, 5), never a traceback (4: the change is made on the primary, no Redis replica
confirmed it in time: a failover, or a replica frozen or restarting, on the replicated
topologies). Exit 2 is a documented status too for one kind of call: a
resume refused with one line because it named no hold while the fleet had several, or named a
hold the fleet did not have (any more: a window ended by itself meanwhile); and a window
(``pause --hold NAME --at``) over a hold that is active now, refused with one line unless
``--reschedule`` (issue 19 C.7). Nothing changed either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Final

from bench.chaos.history import Event
from bench.chaos.timeline import Timeline
from bench.chaos.verdict import RuleResult

CLI_STATUSES: Final = frozenset({0, 1, 3, 4, 5})
REFUSED_STATUS: Final = 2
"""A resume refused for its holds, or a window over a hold active now (see the module
docstring): nothing changed."""


def check_exits(tl: Timeline, r: RuleResult, at: Callable[[float], str]) -> None:
    """Rule 7 over the timeline's process exits and CLI calls (``at`` formats a time)."""
    for e in tl.exits:
        r.checked += 1
        status = e.get("status")
        who = f"{e.get('replica') or e.get('process', 'a process')} (pid {e.get('pid')})"
        if status not in (0, None) and not e.get("killed"):
            r.fail(f"{who} exited with status {status} at {at(float(e['t']))}"
                   + (" after it was asked to stop" if e.get("stopping") else ""))
    for op in tl.ops:
        if op.get("via") != "cli" or op.get("result") == "cancelled":
            continue
        r.checked += 1
        stderr = str(op.get("stderr") or "")
        if op.get("hung"):
            r.fail(f"fleetgate {op.get('action')} ran past its --timeout at "
                   f"{at(float(op['t0']))}")
        elif op.get("exit") == REFUSED_STATUS and (refused_resume(op) or refused_window(op)):
            continue
        elif op.get("exit") not in CLI_STATUSES or "Traceback" in stderr:
            r.fail(f"fleetgate {op.get('action')} exited {op.get('exit')} at "
                   f"{at(float(op['t']))}: {stderr.strip()[-200:]}")


def refused_resume(op: Event) -> bool:
    """A CLI resume refused with one line for its holds (see the module docstring)."""
    args = op.get("args") or {}
    stderr = str(op.get("stderr") or "")
    if op.get("action") != "resume" or args.get("all") or "Traceback" in stderr or \
            len(stderr.strip().splitlines()) != 1:
        return False
    if args.get("hold"):
        return f"has no hold '{args['hold']}'" in stderr
    return " holds (" in stderr


def refused_window(op: Event) -> bool:
    """A CLI window refused with one line because its hold is active now (see the module
    docstring)."""
    args = op.get("args") or {}
    stderr = str(op.get("stderr") or "")
    return (op.get("action") == "pause" and "at" in args and bool(args.get("hold"))
            and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
            and "is active now" in stderr and "--reschedule" in stderr)


def count_operator(tl: Timeline) -> Counter[str]:
    """The operator's calls by kind: ``named hold``, ``window``, ``resume --all``,
    ``refused``."""
    counts: Counter[str] = Counter()
    for op in tl.ops:
        args = op.get("args") or {}
        counts.update(kind for kind, hit in (("named hold", bool(args.get("hold"))),
                                             ("window", "at" in args),
                                             ("resume --all", bool(args.get("all"))),
                                             ("refused", op.get("result") == "refused")) if hit)
    return counts


__all__ = ["CLI_STATUSES", "REFUSED_STATUS", "check_exits", "count_operator", "refused_resume"]
