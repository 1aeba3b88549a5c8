"""Loading "module:function" handler references, and the handler context."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from replica.contract import Keys
from replica.errors import ConfigError
from replica.service.breaker import AsyncCircuitBreaker
from replica.service.handlers import HandlerContext, context, load_handler, use_context


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path where a test writes the user's handler modules."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write(root: Path, name: str, source: str) -> None:
    (root / f"{name}.py").write_text(textwrap.dedent(source))


def test_the_demo_handler_loads_without_a_breaker() -> None:
    loaded = load_handler("replica.demo:sleep")
    assert loaded.ref == "replica.demo:sleep" and loaded.breaker is None


def test_a_breaker_attribute_on_the_function_is_picked_up() -> None:
    loaded = load_handler("replica.demo:flaky")
    assert isinstance(loaded.breaker, AsyncCircuitBreaker)


def test_a_module_level_breaker_is_picked_up(user_modules: Path) -> None:
    write(user_modules, "jobs_with_breaker", """
        import pybreaker
        breaker = pybreaker.CircuitBreaker()
        async def handle(item):
            return None
    """)
    loaded = load_handler("jobs_with_breaker:handle")
    assert type(loaded.breaker).__name__ == "CircuitBreaker"


def test_an_object_with_an_async_call_is_a_handler(user_modules: Path) -> None:
    write(user_modules, "jobs_callable", """
        class Handler:
            async def __call__(self, item):
                return item
        handle = Handler()
    """)
    assert load_handler("jobs_callable:handle").func is not None


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (None, "no handler: set FLEETGATE_HANDLER or --handler"),
        ("  ", "no handler"),
        ("replica.demo", "is not of the form module:function"),
        ("replica.demo:sleep:extra", "is not of the form module:function"),
        ("no_such_pkg.jobs:handle", "no module named 'no_such_pkg'"),
        ("replica.demo:missing", "replica.demo has no 'missing'"),
        ("replica.demo:item_id", "is not an async function"),
        ("replica.demo:DEFAULT_ITEM_SECONDS", "is not an async function"),
    ],
)
def test_a_handler_that_cannot_work_is_a_config_error(ref: str | None, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_handler(ref)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_module_that_fails_to_import_is_a_config_error_naming_the_cause(
    user_modules: Path,
) -> None:
    write(user_modules, "jobs_broken", "raise RuntimeError('missing DATABASE_URL')\n")
    write(user_modules, "jobs_bad_import", "import no_such_dependency_xyz\n")
    with pytest.raises(ConfigError, match="RuntimeError: missing DATABASE_URL"):
        load_handler("jobs_broken:handle")
    with pytest.raises(ConfigError, match="importing jobs_bad_import failed"):
        load_handler("jobs_bad_import:handle")


@pytest.mark.parametrize(
    ("name", "source", "message"),
    [
        ("jobs_exit", "import sys\nsys.exit()\n", "importing jobs_exit called sys.exit(None)"),
        ("jobs_exit_3", "raise SystemExit(3)\n", "importing jobs_exit_3 called sys.exit(3)"),
        ("jobs_interrupt", "raise KeyboardInterrupt\n",
         "importing jobs_interrupt failed: KeyboardInterrupt"),
        ("jobs_base", "class Odd(BaseException):\n    pass\nraise Odd('odd')\n",
         "importing jobs_base failed: Odd: odd"),
        ("jobs_lines", "raise RuntimeError('no DATABASE_URL\\nset it in the environment')\n",
         "importing jobs_lines failed: RuntimeError: no DATABASE_URL set it in the environment"),
    ],
    ids=["sys.exit()", "SystemExit(3)", "KeyboardInterrupt", "a BaseException", "a long message"],
)
def test_a_module_that_exits_or_raises_anything_at_import_is_a_config_error_of_one_line(
    user_modules: Path, name: str, source: str, message: str
) -> None:
    write(user_modules, name, source)
    with pytest.raises(ConfigError) as info:
        load_handler(f"{name}:handle")
    assert str(info.value) == f"handler '{name}:handle': {message}"


def test_a_module_whose_attribute_raises_when_read_is_a_config_error(user_modules: Path) -> None:
    write(user_modules, "jobs_lazy", """
        def __getattr__(name):
            raise RuntimeError(f"loading {name} failed")
    """)
    with pytest.raises(ConfigError) as info:
        load_handler("jobs_lazy:handle")
    assert str(info.value) == (
        "handler 'jobs_lazy:handle': reading handle failed: RuntimeError: loading handle failed"
    )


def test_a_breaker_without_a_state_is_a_config_error(user_modules: Path) -> None:
    write(user_modules, "jobs_odd_breaker", """
        async def handle(item):
            return None
        handle.breaker = object()
    """)
    with pytest.raises(ConfigError, match="its breaker has no 'state'"):
        load_handler("jobs_odd_breaker:handle")


def test_the_context_is_available_only_inside_a_replica(redis: aioredis.Redis) -> None:
    with pytest.raises(RuntimeError, match="no fleetgate handler context"):
        context()
    ctx = HandlerContext(redis=redis, fleet="f", replica_id="r1", keys=Keys("f"))
    with use_context(ctx):
        assert context() is ctx
    with pytest.raises(RuntimeError):
        context()


async def test_tasks_started_inside_the_context_keep_it(redis: aioredis.Redis) -> None:
    import asyncio

    ctx = HandlerContext(redis=redis, fleet="f", replica_id="r1", keys=Keys("f"))
    seen: list[Any] = []

    async def worker() -> None:
        seen.append(context().replica_id)

    with use_context(ctx):
        task = asyncio.create_task(worker())
    await task
    assert seen == ["r1"]
