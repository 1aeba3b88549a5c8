"""OpenTelemetry spans, when the ``otel`` extra is installed (``pip install 'fleetgate[otel]'``).

``span(tracer, name, attributes)`` is a context manager that opens a span of the OpenTelemetry
API's global tracer provider, sets its attributes, and on leaving sets ``fleetgate.outcome``
(``ok`` unless the code set another, ``cancelled`` for a cancellation, the exception's class
name for an error, which is also recorded on the span). Without opentelemetry it yields a
handle that does nothing. Nothing is imported here until the first span is opened (importing
this module never loads opentelemetry), and an application that configured no tracer provider
(the API's proxy or no-op provider) opens no span at all: the handle does nothing, as without
opentelemetry.

The attribute names are the contract (dashboards and queries join on them):

==========================  ==============================================================
``fleetgate.fleet``         the fleet
``fleetgate.version``       the state version a change made, a wait waited for, a replica
                            applied: the join between a change and every replica's apply
``fleetgate.hold``          the fleet hold a pause or resume names
``fleetgate.holds``         the active holds of the state applied or made
``fleetgate.outcome``       ``ok``, or what went otherwise
``fleetgate.replica``       the replica that applied a state
==========================  ==============================================================

The replica's side: ``replica.control.applier`` opens a ``fleetgate.apply`` span per state
applied. The coordinator's spans (``Fleet.pause`` ...) are in ``coordinator.fleet.tracing``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

FLEET: Final = "fleetgate.fleet"
VERSION: Final = "fleetgate.version"
HOLD: Final = "fleetgate.hold"
HOLDS: Final = "fleetgate.holds"
OUTCOME: Final = "fleetgate.outcome"
REPLICA: Final = "fleetgate.replica"

REPLICA_TRACER: Final = "fleetgate.replica"

AttributeValue = str | bool | int | float | Sequence[str]

_trace: Any = None
"""``opentelemetry.trace`` once looked for; False when it is not installed."""


_NO_PROVIDER: tuple[type, ...] = ()
"""The API's tracer providers that record nothing (no SDK set): a span of theirs is skipped."""


def _api() -> Any:
    global _trace, _NO_PROVIDER
    if _trace is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _trace = False
        else:
            _trace = trace
            _NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    return _trace or None


def available() -> bool:
    """Whether the OpenTelemetry API is installed (spans are recorded once an SDK's tracer
    provider is set)."""
    return _api() is not None


class SpanHandle:
    """What the code inside ``span()`` may do with its span (nothing, without OpenTelemetry)."""

    __slots__ = ("_span", "outcome")

    def __init__(self, span: Any) -> None:
        self._span = span
        self.outcome: str | None = None

    @property
    def recording(self) -> bool:
        """Whether the span is recorded (worth computing attributes for)."""
        return self._span is not None and bool(self._span.is_recording())

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute (None: left out)."""
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def update(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        for key, value in attributes.items():
            self.set(key, value)

    def trace_ids(self) -> tuple[int, int] | None:
        """(trace id, span id) of a recorded span, else None."""
        if not self.recording:
            return None
        ctx = self._span.get_span_context()
        return int(ctx.trace_id), int(ctx.span_id)


@contextmanager
def span(tracer: str, name: str,
         attributes: Mapping[str, AttributeValue | None] | None = None) -> Iterator[SpanHandle]:
    """A span ``name`` of the tracer ``tracer`` (a no-op without OpenTelemetry), current while
    the block runs; see the module's doc for ``fleetgate.outcome``."""
    trace = _api()
    if trace is None or isinstance(trace.get_tracer_provider(), _NO_PROVIDER):
        # no SDK set: the API's spans would record nothing (and at a fleet-wide change a
        # process with many controllers opens one per controller at once)
        yield SpanHandle(None)
        return
    with trace.get_tracer(tracer).start_as_current_span(
        name, record_exception=False, set_status_on_exception=False
    ) as current:
        handle = SpanHandle(current)
        if attributes:
            handle.update(attributes)
        try:
            yield handle
        except asyncio.CancelledError:
            current.set_attribute(OUTCOME, "cancelled")
            raise
        except BaseException as exc:
            current.set_attribute(OUTCOME, handle.outcome or type(exc).__name__)
            current.record_exception(exc)
            current.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))
            raise
        current.set_attribute(OUTCOME, handle.outcome or "ok")


__all__ = ["FLEET", "HOLD", "HOLDS", "OUTCOME", "REPLICA", "REPLICA_TRACER", "VERSION",
           "SpanHandle", "available", "span"]
