"""OpenTelemetry (the ``otel`` extra): spans of ``Fleet.pause``/``resume``/``wait``, of the CLI
commands and of a replica's apply, with the ``fleetgate.*`` attributes; a change's log record
correlated with its span; and, without opentelemetry, the same code running on no-op spans.

Recorded with the SDK's in-memory exporters on a real Redis. Each test reads only the spans of
its own fleet (the tracer provider is the process's, set once)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coordinator.fleet.fleet import Fleet
from tests.clikit import run
from tests.cpkit import Replica, until

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the process's SDK tracer provider (set here if none is); shut
    down after this module, so the tests after it keep no spans."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.clear()
    exporter.shutdown()


@pytest.fixture
def log_records() -> Iterator[InMemoryLogRecordExporter]:
    """The logs SDK's handler on the coordinator's loggers, as an application installs it."""
    provider = LoggerProvider()
    exporter = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    with warnings.catch_warnings():  # the SDK's handler says it moves to instrumentation-logging
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    logger = logging.getLogger("coordinator")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield exporter
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        provider.shutdown()


def of_fleet(exporter: InMemorySpanExporter, fleet: str, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans()
            if s.name == name and s.attributes is not None
            and s.attributes.get("fleetgate.fleet") == fleet]


def one(exporter: InMemorySpanExporter, fleet: str, name: str) -> ReadableSpan:
    found = of_fleet(exporter, fleet, name)
    assert len(found) == 1, f"{name}: {[s.attributes for s in found]}"
    return found[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()}


async def test_a_pause_resume_and_wait_through_fleet_are_spans_with_the_fleetgate_attributes(
    redis: aioredis.Redis, fleet_name: str, spans: InMemorySpanExporter
) -> None:
    fleet = Fleet(redis, fleet_name)
    paused = await fleet.pause("db maintenance", by="alice", hold="db")
    report = await fleet.wait(paused.version, timeout=5)
    resumed = await fleet.resume(by="bob", hold="db")

    pause = attrs(one(spans, fleet_name, "Fleet.pause"))
    assert pause["fleetgate.version"] == paused.version
    assert pause["fleetgate.hold"] == "db" and pause["fleetgate.holds"] == ["db"]
    assert pause["fleetgate.outcome"] == "ok" and pause["fleetgate.paused"] is True
    assert pause["fleetgate.by"] == "alice"
    wait = attrs(one(spans, fleet_name, "Fleet.wait"))
    assert wait["fleetgate.version"] == paused.version
    assert wait["fleetgate.outcome"] == ("ok" if report.ok else "stragglers")
    resume = attrs(one(spans, fleet_name, "Fleet.resume"))
    assert resume["fleetgate.version"] == resumed.version > paused.version
    assert resume["fleetgate.hold"] == "db" and resume["fleetgate.holds"] == []
    assert resume["fleetgate.outcome"] == "ok" and resume["fleetgate.paused"] is False


async def test_a_refused_resume_is_a_span_with_the_error_as_its_outcome(
    redis: aioredis.Redis, fleet_name: str, spans: InMemorySpanExporter
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("one", by="alice", hold="a")
    await fleet.pause("two", by="alice", hold="b")
    with pytest.raises(Exception, match="hold") as raised:
        await fleet.resume(by="bob")  # two holds and none named: ambiguous
    span = one(spans, fleet_name, "Fleet.resume")
    assert attrs(span)["fleetgate.outcome"] == type(raised.value).__name__
    assert span.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


async def test_a_pause_is_a_log_record_correlated_with_its_span(
    redis: aioredis.Redis, fleet_name: str, spans: InMemorySpanExporter,
    log_records: InMemoryLogRecordExporter,
) -> None:
    paused = await Fleet(redis, fleet_name).pause("db maintenance", by="alice")
    span = one(spans, fleet_name, "Fleet.pause")
    ctx = span.get_span_context()
    assert ctx is not None
    mine = [r.log_record for r in log_records.get_finished_logs()
            if f"fleet {fleet_name}: pause v{paused.version} by alice" in str(r.log_record.body)]
    assert len(mine) == 1
    assert (mine[0].trace_id, mine[0].span_id) == (ctx.trace_id, ctx.span_id)


def test_a_pause_through_the_cli_is_a_command_span_around_the_fleet_span(
    env: None, fleet_name: str, capsys: pytest.CaptureFixture[str],
    spans: InMemorySpanExporter,
) -> None:
    code, out, err = run(capsys, "pause", "--reason", "deploy", "--by", "alice", "--json")
    assert code == 0, err
    version = json.loads(out)["state"]["version"]
    assert run(capsys, "status")[0] == 0

    command = one(spans, fleet_name, "fleetgate pause")
    assert attrs(command)["fleetgate.command"] == "pause"
    assert attrs(command)["fleetgate.outcome"] == "ok"
    pause = one(spans, fleet_name, "Fleet.pause")
    assert attrs(pause)["fleetgate.version"] == version
    assert pause.parent is not None and command.context is not None
    assert pause.parent.span_id == command.context.span_id
    assert pause.context is not None and pause.context.trace_id == command.context.trace_id
    assert attrs(one(spans, fleet_name, "fleetgate status"))["fleetgate.outcome"] == "ok"


def test_a_cli_command_that_fails_is_a_span_with_its_exit_status(
    env: None, fleet_name: str, capsys: pytest.CaptureFixture[str],
    spans: InMemorySpanExporter,
) -> None:
    code, _, _ = run(capsys, "history")  # a fleet never seen: exit 6
    assert code == 6
    assert attrs(one(spans, fleet_name, "fleetgate history"))["fleetgate.outcome"] == "exit 6"


async def test_a_replica_applies_a_pause_in_a_span_joined_to_the_change_by_its_version(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, spans: InMemorySpanExporter
) -> None:
    replica = await Replica(redis_url, fleet_name, "r-1", poll_interval=0.1).start()
    try:
        paused = await Fleet(redis, fleet_name).pause("db maintenance", by="alice", hold="db")
        await until(lambda: replica.controller.applied_version == paused.version,
                    what="the pause applied")
    finally:
        await replica.stop()
    applies = [attrs(s) for s in of_fleet(spans, fleet_name, "fleetgate.apply")]
    change = attrs(one(spans, fleet_name, "Fleet.pause"))
    joined = [a for a in applies if a["fleetgate.version"] == change["fleetgate.version"]]
    assert len(joined) == 1
    apply = joined[0]
    assert apply["fleetgate.replica"] == "r-1" and apply["fleetgate.outcome"] == "ok"
    assert apply["fleetgate.holds"] == ["db"] and apply["fleetgate.paused"] is True
    assert apply["fleetgate.source"] in ("push", "poll")
    assert apply["fleetgate.propagation_s"] >= 0


_BLOCK_OTEL = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"blocked: {name}")
        return None
sys.meta_path.insert(0, Blocker())
"""


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_importing_the_tracing_module_loads_no_opentelemetry_until_a_span_is_opened() -> None:
    """The import is deferred to the first span. (redis-py imports opentelemetry itself when it
    is installed, so this is checked on the module that does not import redis.)"""
    code = ("import sys\nimport replica.process.tracing as t\n"
            "before = any(m.startswith('opentelemetry') for m in sys.modules)\n"
            "with t.span('fleetgate.test', 'probe'):\n    pass\n"
            "print(before, 'opentelemetry.trace' in sys.modules)")
    assert _python(code) == "False True"


def test_without_opentelemetry_a_pause_and_an_apply_run_on_no_op_spans(
    redis_url: str, fleet_name: str
) -> None:
    code = _BLOCK_OTEL + f"""
import asyncio
import redis.asyncio as aioredis
from coordinator.fleet.fleet import Fleet
from replica.process import tracing
from tests.cpkit import Replica, until

async def main():
    replica = await Replica({redis_url!r}, {fleet_name!r}, "r-1", poll_interval=0.1).start()
    client = aioredis.Redis.from_url({redis_url!r}, decode_responses=True)
    try:
        state = await Fleet(client, {fleet_name!r}).pause("no otel", by="alice")
        await until(lambda: replica.controller.applied_version == state.version)
        with tracing.span("t", "s") as handle:
            handle.set("fleetgate.version", 1)
        print(tracing.available(), handle.recording, state.paused)
    finally:
        await replica.stop()
        await client.aclose()

asyncio.run(main())
assert not any(m.startswith("opentelemetry") for m in sys.modules)
"""
    assert _python(code) == "False False True"


def test_with_opentelemetry_but_no_tracer_provider_a_span_is_not_opened_until_one_is_set() -> None:
    """The API alone (no SDK's provider set) records nothing, so no span is opened: no current
    span inside the block. Once an application sets a provider, spans are opened and recorded."""
    code = ("from opentelemetry import trace\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
            "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
            "InMemorySpanExporter\n"
            "import replica.process.tracing as t\n"
            "with t.span('fleetgate.test', 'before') as h:\n"
            "    before = (h.recording, trace.get_current_span() is trace.INVALID_SPAN)\n"
            "provider = TracerProvider()\n"
            "exporter = InMemorySpanExporter()\n"
            "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
            "trace.set_tracer_provider(provider)\n"
            "with t.span('fleetgate.test', 'after') as h:\n"
            "    after = h.recording\n"
            "print(*before, after, [s.name for s in exporter.get_finished_spans()])")
    assert _python(code) == "False True True ['after']"
