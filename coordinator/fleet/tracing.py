"""The coordinator's OpenTelemetry spans (the ``otel`` extra; no-ops without it): ``Fleet.pause``,
``Fleet.resume`` and ``Fleet.wait`` of the library, and one span per CLI command
(``fleetgate pause``, ``fleetgate status`` ...), the parent of the library's spans it runs.

Built on ``replica.process.tracing`` (the attribute names, the lazy import, the outcome rule):
the replica's ``fleetgate.apply`` span of a state carries the same ``fleetgate.fleet`` and
``fleetgate.version`` as the ``Fleet.pause`` or ``Fleet.resume`` span that made it, which is how
a change is joined to its applies across processes (no trace context travels in the state, so
replicas of any release keep reading it).

A change's log record (``coordinator.fleet.changes``: ``fleet NAME: pause v7 by alice ...``) is
written while the ``Fleet.pause`` or ``Fleet.resume`` span is current: an OpenTelemetry logging
handler the application installs correlates it with the span (trace and span ids).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final

from coordinator.fleet.models import WaitReport
from replica.contract import FleetState
from replica.process.tracing import (
    FLEET,
    HOLD,
    HOLDS,
    OUTCOME,
    VERSION,
    AttributeValue,
    SpanHandle,
    span,
)

COORDINATOR_TRACER: Final = "fleetgate.coordinator"
COMMAND: Final = "fleetgate.command"


def change_span(fleet: str, action: str, hold: str | None, by: str) -> AbstractContextManager[SpanHandle]:
    """The span of ``Fleet.pause`` or ``Fleet.resume`` (``action``) of the hold ``hold``."""
    return span(COORDINATOR_TRACER, f"Fleet.{action}",
                {FLEET: fleet, HOLD: hold, "fleetgate.by": by})


def made(traced: SpanHandle, state: FleetState) -> None:
    """What a change made: its version, the fleet's active holds after it."""
    if traced.recording:
        traced.update({VERSION: state.version, "fleetgate.paused": state.effectively_paused(),
                       HOLDS: [h.name for h in state.active_holds()]})


async def traced_change(fleet: str, action: str, hold: str | None, by: str,
                        change: Callable[[], Awaitable[FleetState]]) -> FleetState:
    """Run ``change`` (a ``Fleet.pause`` or ``Fleet.resume``) in its span: what it made, or,
    when no replica confirmed it (``NotConfirmed``: made all the same), that and what it made."""
    from coordinator.fleet.durability import NotConfirmed  # loaded with the first change

    with change_span(fleet, action, hold, by) as traced:
        try:
            state = await change()
        except NotConfirmed as exc:
            made(traced, exc.state)
            traced.outcome = "not_confirmed"
            raise
        made(traced, state)
        return state


def wait_span(fleet: str, version: int) -> AbstractContextManager[SpanHandle]:
    return span(COORDINATOR_TRACER, "Fleet.wait", {FLEET: fleet, VERSION: version})


def waited(traced: SpanHandle, report: WaitReport) -> None:
    """A wait's report: ``ok``, or ``stragglers`` with how many."""
    traced.outcome = "ok" if report.ok else "stragglers"
    traced.update({"fleetgate.action": report.action, "fleetgate.replicas": len(report.replicas),
                   "fleetgate.stragglers": len(report.stragglers)})


@contextmanager
def command_span(command: str, fleet: str,
                 **attributes: AttributeValue | None) -> Iterator[SpanHandle]:
    """The span of a CLI command (``fleetgate <command>``); a ``CliError`` ends it with the
    outcome ``exit <status>``."""
    with span(COORDINATOR_TRACER, f"fleetgate {command}",
              {FLEET: fleet, COMMAND: command, **attributes}) as traced:
        try:
            yield traced
        except Exception as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, int):
                traced.outcome = f"exit {code}"
            raise


__all__ = ["COMMAND", "COORDINATOR_TRACER", "OUTCOME", "change_span", "command_span", "made",
           "traced_change", "wait_span", "waited"]
