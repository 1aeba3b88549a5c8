"""The verdict of a chaos check: each rule's outcome (``RuleResult``) and the run's figures
(``CheckResult``), and the product defects whose counterexamples are known (``KNOWN``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

KNOWN: Final[dict[int, str]] = {}
"""Rule number: the known product defect whose counterexamples are counted apart (none now:
rule 4's restored older pause winning over a newer running state was fixed, issue 13, and so
was rule 6's wait that said ok after an empty restart without a replica Redis forgot: a wait
within the live window after the state hash was restored is not ok)."""
RULES: Final = {1: "no start under a pause", 2: "changes applied in time",
                3: "items done or dead-lettered", 4: "versions never go back",
                5: "state settles on the last action", 6: "wait never lies",
                7: "no unexpected exit"}


@dataclass
class RuleResult:
    rule: int
    violations: int = 0
    first: str | None = None
    checked: int = 0
    known: int = 0
    """Counterexamples of a known product defect (``KNOWN``), not failing the run."""
    first_known: str | None = None

    def fail(self, message: str) -> None:
        self.violations += 1
        if self.first is None:
            self.first = message

    def known_defect(self, message: str) -> None:
        self.known += 1
        if self.first_known is None:
            self.first_known = message

    @property
    def held(self) -> bool:
        return self.violations == 0


@dataclass
class CheckResult:
    """Every rule's outcome and the figures of the table."""

    rules: dict[int, RuleResult]
    faults: Counter[str] = field(default_factory=Counter)
    items: int = 0
    done: int = 0
    dead: int = 0
    dead_ok: int = 0
    """Of the dead-lettered, items that were not told to fail or hang (cut off by a fault)."""
    forgotten: int = 0
    unknown_enqueues: int = 0
    unconfirmed_enqueues: int = 0
    """Items written to the primary that no replica confirmed (``enqueue-unconfirmed``): the
    producer was told; a failover may lose them, and rule 3 does not count them lost."""
    unconfirmed_lost: int = 0
    lost: int = 0
    duplicates: Counter[str] = field(default_factory=Counter)
    unexplained: int = 0
    worst_propagation: tuple[float, str] | None = None
    excused_pairs: int = 0
    operator: Counter[str] = field(default_factory=Counter)
    """The operator's calls by kind: ``named hold``, ``window``, ``resume --all``,
    ``refused``."""
    complete: bool = True
    phase: str | None = None
    strict: bool = False

    @property
    def starts_after_apply(self) -> int:
        return self.rules[1].violations

    @property
    def wait_lies(self) -> int:
        return self.rules[6].violations + self.rules[6].known

    @property
    def duplicate_total(self) -> int:
        return sum(self.duplicates.values()) + self.unexplained

    def failed_rules(self) -> list[int]:
        return [n for n, r in sorted(self.rules.items()) if not r.held]

    @property
    def ok(self) -> bool:
        return self.complete and not self.failed_rules()


__all__ = ["KNOWN", "RULES", "CheckResult", "RuleResult"]
