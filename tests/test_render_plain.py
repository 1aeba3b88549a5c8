"""``fleetgate status`` into a pipe prints, without rich, the bytes rich prints.

``coordinator.render.ink`` keeps the status view's text, tables and groups and makes their
text itself when the output is no terminal (``coordinator.cli.output.show``), or says it cannot
(None) and rich prints them. Each view here is printed both ways, on the console the CLI makes
for a pipe (width 200, no terminal): the same text, or None.
"""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from rich.console import Console

from coordinator import render
from coordinator.fleet.backlog import Backlog
from coordinator.fleet.models import FleetStatus
from coordinator.fleet.summary import summarize
from coordinator.render.ink import plain
from replica.contract.holds import Hold
from tests.test_render import NOW, replica, state


def rich_prints(renderable: Any) -> str:
    """What ``coordinator.cli.output.console()`` prints into a pipe."""
    stream = io.StringIO()
    Console(width=200, soft_wrap=False, file=stream).print(renderable)
    return stream.getvalue()


HOLD = Hold(name="db", reason="pg 16 upgrade", by="bob", since=NOW - timedelta(minutes=3),
            expected_until=NOW + timedelta(minutes=27))
LATER = Hold(name="flush", reason="cache flush", by="ops", since=NOW + timedelta(hours=2),
             starts_at=NOW + timedelta(hours=2), auto_resume_at=NOW + timedelta(hours=3))
BACKLOG = Backlog(backlog=12, pending=3, dead_letters=1,
                  oldest_waiting_at=NOW - timedelta(seconds=95), stream=True, group=True)

MANY = [replica(f"orders-{i:02d}", in_flight=i % 3, quiet=i % 3 == 0,
                applied_version=6 if i % 7 == 0 else 7, stale=i % 11 == 0) for i in range(25)]

# (name, status, whether the text is made here)
VIEWS: list[tuple[str, FleetStatus, bool]] = [
    ("no replicas", FleetStatus(state(), []), True),
    ("running", FleetStatus(state(paused=False, reason="", by="bob"),
                            [replica(paused=False, quiet=False, holds={}, in_flight=4)]), True),
    ("never changed", FleetStatus(state(paused=False, reason="", by="", since=None, version=0),
                                  []), True),
    ("overdue", FleetStatus(state(since=NOW - timedelta(hours=3)), [replica()]), True),
    ("holds", FleetStatus(state(holds=(HOLD, LATER)), [replica("a"), replica("b")]), True),
    ("window", FleetStatus(state(expected_until=NOW + timedelta(minutes=20),
                                 auto_resume_at=NOW + timedelta(minutes=20)), [replica()]), True),
    ("backlog", FleetStatus(state(), [replica()], backlog=BACKLOG), True),
    ("unknown backlog", FleetStatus(state(), [replica()], backlog=replace(
        BACKLOG, backlog=None, pending=None, error="WRONGTYPE")), True),
    ("unreadable", FleetStatus(state(), [replica()], unreadable=2), True),
    ("many", FleetStatus(state(), MANY, unreadable=1, backlog=BACKLOG), True),
    ("stale and behind", FleetStatus(state(version=9), [
        replica("s", stale=True, heartbeat_at=NOW - timedelta(minutes=5)),
        replica("b", applied_version=8, applied_at=None),
        replica("e", control="error: NOPERM no permissions", paused=False, quiet=False)]), True),
    ("markup", FleetStatus(state(reason="[bold]x[/] :smile:", by="[red]m"),
                           [replica("[link=x]r", host="[b]h")]), True),
    ("escapes", FleetStatus(state(by="e\x1bvil"), [replica(host="evil\x1b[2J\u202e")]), True),
    ("no host", FleetStatus(state(), [replica(host="")]), True),
    ("non-ASCII", FleetStatus(state(reason="café ☕"), [replica(host="nœud-1")]), False),
    ("wide cell", FleetStatus(state(), [replica(host="h" * 190)]), False),
    ("long banner", FleetStatus(state(reason="r" * 220), [replica()]), False),
]


@pytest.mark.parametrize(("name", "status", "made_here"), VIEWS, ids=[v[0] for v in VIEWS])
def test_the_status_views_print_as_rich_prints_them(
    name: str, status: FleetStatus, made_here: bool
) -> None:
    views = [
        render.summary_renderable(status, summarize(status, NOW, 1800.0)),
        render.summary_renderable(status, summarize(status, NOW, 1800.0), rows=3),
        render.fleet_status_renderable(status, NOW, 1800.0),
    ]
    for view in views:
        text = plain(view)
        assert (text is not None) == made_here
        if text is not None:
            assert text == rich_prints(view)


def test_a_view_holding_what_is_not_made_here_is_printed_by_rich() -> None:
    """A rich object inside a group (a renderer not ported) is rich's to print."""
    from rich.text import Text as RichText

    from coordinator.render.ink import Group, Text

    other: Any = RichText("two")
    assert plain(Group(Text("one"), other)) is None
    assert rich_prints(Group(Text("one"), other)) == "one\ntwo\n"
