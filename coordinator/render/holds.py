"""A fleet's holds, as status shows them: the ``holds`` object of ``state`` (``holds_dict``,
``state_dict``) and one line per hold under the banner (``holds_text``).

In every JSON shape (``status --json``, ``GET /api/fleet``, a change's answer) ``state.holds``
is the object of the fleet's holds keyed by name, each value the hold's fields
(``replica.contract.holds``) plus its ``status`` at ``summary.now``: ``scheduled`` (before its
``starts_at``), ``active``, or ``ended`` (its ``auto_resume_at`` has passed; the next change
drops it). A state written by an older release (no trusted holds) shows its pause as the one
hold ``default``, and ``{}`` when it runs.
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.schedule import holds_dict, state_dict
from coordinator.render.text import printable
from replica.contract import FleetState, format_time
from replica.contract.holds import ACTIVE, SCHEDULED, Hold


def names(holds: tuple[Hold, ...]) -> str:
    return ", ".join(h.name for h in holds)


def hold_line(hold: Hold, now: datetime) -> str:
    """``hold db (active): 'pg upgrade' by alice since T (4m12s), expected until T, ends at T``."""
    status = hold.status(now)
    parts = [f"hold {hold.name} ({status}): {printable(hold.reason)!r} by {printable(hold.by or '-')}"]
    if status == SCHEDULED and hold.starts_at is not None:
        parts.append(f"scheduled for {format_time(hold.starts_at)} "
                     f"(in {format_age((hold.starts_at - now).total_seconds())})")
    elif hold.since is not None:
        parts.append(f"since {format_time(hold.since)} "
                     f"({format_age(max(0.0, (now - hold.since).total_seconds()))})")
    if hold.expected_until is not None and hold.expected_until != hold.auto_resume_at:
        parts.append(f"expected until {format_time(hold.expected_until)}")
    if hold.auto_resume_at is not None:
        parts.append(f"ends at {format_time(hold.auto_resume_at)}")
    return ", ".join(parts)


def holds_text(state: FleetState, now: datetime) -> Text:
    """One line per hold (none for a running fleet without holds), each starting with a
    newline, to follow the banner."""
    out = Text()
    for hold in sorted(state.effective_holds(), key=lambda h: h.name):
        status = hold.status(now)
        style = "yellow" if status == ACTIVE else ("cyan" if status == SCHEDULED else "dim")
        out.append("\n" + hold_line(hold, now), style=style)
    return out


__all__ = ["hold_line", "holds_dict", "holds_text", "names", "state_dict"]
