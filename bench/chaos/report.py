"""What a chaos run prints: a table of what happened and what held, then one last line.

The last line is exactly of the form::

    chaos: seed=7 duration=600s topology=single faults=183 items=41230 lost=0 starts-after-apply=0 duplicates=12 (explained 12) wait-lies=0: ok

ending in ``ok`` when every rule held (counterexamples of known product defects, ``KNOWN``,
aside: the table names them), else ``failed``.
"""

from __future__ import annotations

from bench.chaos.faults import ALL_KINDS, KINDS
from bench.chaos.verdict import KNOWN, RULES, CheckResult


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:g}s"


def table(result: CheckResult) -> list[str]:
    """The table, one line per row (Markdown, so it pastes into the README as it is)."""
    rows: list[tuple[str, str]] = []
    for kind in ALL_KINDS:  # one server's always; the replicated topologies' when drawn
        if kind in KINDS or result.faults.get(kind):
            rows.append((f"faults: {kind}", str(result.faults.get(kind, 0))))
    for kind in ("named hold", "window", "resume --all", "refused"):
        rows.append((f"operator: {kind}", str(result.operator.get(kind, 0))))
    rows += [
        ("items enqueued", str(result.items)),
        ("items done", str(result.done)),
        ("items dead-lettered (with their error)", str(result.dead)),
        ("... of which not told to fail or hang", str(result.dead_ok)),
        ("items Redis forgot (empty restart)", str(result.forgotten)),
        ("enqueues of unknown outcome", str(result.unknown_enqueues)),
        ("enqueues no replica confirmed (a failover may lose them)",
         str(result.unconfirmed_enqueues)),
        ("... of which a failover lost", str(result.unconfirmed_lost)),
        ("items lost", str(result.lost)),
        ("starts during a pause", str(result.starts_after_apply)),
    ]
    for cause in ("kill", "freeze", "lost-ack"):
        rows.append((f"duplicates: {cause}", str(result.duplicates.get(cause, 0))))
    rows.append(("duplicates: unexplained", str(result.unexplained)))
    worst = result.worst_propagation
    rows.append(("worst propagation (outside fault windows)",
                 "-" if worst is None else f"{worst[0] * 1000:.0f} ms ({worst[1]})"))
    rows.append(("wait reports that lied", str(result.wait_lies)))
    for n, rule in sorted(result.rules.items()):
        if rule.held:
            verdict = f"held ({rule.checked} checks)"
        else:
            verdict = f"BROKEN {rule.violations}x: {rule.first}"
        if rule.known:
            verdict += (f"; {rule.known}x known ({KNOWN.get(n, 'a known defect')}), the first: "
                        f"{rule.first_known}")
        rows.append((f"rule {n}: {RULES[n]}", verdict))
    if not result.complete:
        rows.append(("run", f"did not complete (stopped in phase {result.phase})"))
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'what':<{width}} | measured |", f"|{'-' * (width + 2)}|----------|"]
    lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
    return lines


def last_line(result: CheckResult, seed: int, duration: float, topology: str) -> str:
    explained = sum(result.duplicates.values())
    return (f"chaos: seed={seed} duration={_duration(duration)} topology={topology} "
            f"faults={sum(result.faults.values())} items={result.items} lost={result.lost} "
            f"starts-after-apply={result.starts_after_apply} "
            f"duplicates={result.duplicate_total} (explained {explained}) "
            f"wait-lies={result.wait_lies}: {'ok' if result.ok else 'failed'}")


__all__ = ["last_line", "table"]
