"""Work handlers: loading ``"module:function"`` references, and the context handlers run in.

A handler is ``async def handle(item)``: ``item`` is the decoded JSON of a work stream entry.
It succeeds by returning and fails by raising; the source acknowledges, retries or dead-letters.

A handler that needs the replica's Redis client, fleet or id calls ``context()`` (a context
variable the service sets before the workers start), so the signature stays one argument.

A circuit breaker is plugged in by giving the handler function, or its module, an attribute
``breaker`` (anything with a ``state`` of closed / open / half-open, e.g. a
``replica.service.breaker.AsyncCircuitBreaker`` or a ``pybreaker.CircuitBreaker``): the service then
pauses the pool while it is open (``follow_breaker``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as aioredis

from replica.contract import Keys
from replica.errors import ConfigError
from replica.types import Handler

HANDLER_REF_RE: Final = re.compile(
    r"(?P<module>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r":(?P<attr>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
)


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """What a handler may use besides its item."""

    redis: aioredis.Redis
    """The replica's Redis client (``decode_responses=True``)."""
    fleet: str
    replica_id: str
    keys: Keys
    settings: Any = None
    """The ``ReplicaSettings`` of the running replica (None in tests that build a context)."""
    fleet_state: Callable[[], tuple[int, bool]] | None = None
    """At this moment: the fleet version this replica has applied, and whether the fleet's
    pause holds its pool (None outside a replica service)."""


_context: ContextVar[HandlerContext] = ContextVar("fleetgate_handler_context")


def context() -> HandlerContext:
    """The context of the replica running this handler. Raises ``RuntimeError`` outside one."""
    try:
        return _context.get()
    except LookupError:
        raise RuntimeError(
            "no fleetgate handler context: this handler runs inside a replica (or a test must "
            "enter replica.service.handlers.use_context(...))"
        ) from None


@contextlib.contextmanager
def use_context(ctx: HandlerContext) -> Iterator[HandlerContext]:
    """Set the handler context for tasks created inside the block (workers copy it at start)."""
    token = _context.set(ctx)
    try:
        yield ctx
    finally:
        _context.reset(token)


@dataclass(frozen=True, slots=True)
class LoadedHandler:
    """A handler and the breaker it exposes, if any."""

    ref: str
    func: Handler
    breaker: Any = None


def _is_async_callable(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - an async __call__ counts too
    return call is not None and inspect.iscoroutinefunction(call)


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut at ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _describe(exc: BaseException) -> str:
    """``Type: message`` on one line, or ``Type`` for an exception without a message."""
    message = _one_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def load_handler(ref: str | None) -> LoadedHandler:
    """Import ``"module:function"``. Raises ``ConfigError`` (one line) when it cannot work."""
    if ref is None or not ref.strip():
        raise ConfigError("no handler: set FLEETGATE_HANDLER or --handler module:function")
    ref = ref.strip()
    match = HANDLER_REF_RE.fullmatch(ref)
    if match is None:
        raise ConfigError(f"handler {ref[:80]!r} is not of the form module:function")
    module_name, attr_path = match["module"], match["attr"]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(f"handler {ref!r}: no module named {exc.name!r}") from None
        raise ConfigError(
            f"handler {ref!r}: importing {module_name} failed: {_one_line(str(exc))}"
        ) from None
    except SystemExit as exc:  # would end the replica silently, with exit status 0 for sys.exit()
        raise ConfigError(
            f"handler {ref!r}: importing {module_name} called sys.exit({exc.code!r})"
        ) from None
    except BaseException as exc:
        # Anything a module raises at import, KeyboardInterrupt included. Synchronous code
        # receives no cancellation from outside: a CancelledError here is the module's own.
        raise ConfigError(
            f"handler {ref!r}: importing {module_name} failed: {_describe(exc)}"
        ) from None
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"handler {ref!r}: {module_name} has no {attr_path!r}") from None
        except Exception as exc:  # a module __getattr__ or a property that raises
            raise ConfigError(
                f"handler {ref!r}: reading {attr_path} failed: {_describe(exc)}"
            ) from None
    if not _is_async_callable(obj):
        raise ConfigError(f"handler {ref!r} is not an async function (async def handle(item))")
    breaker = getattr(obj, "breaker", None)
    if breaker is None:
        breaker = getattr(module, "breaker", None)
    if breaker is not None and not hasattr(breaker, "state"):
        raise ConfigError(f"handler {ref!r}: its breaker has no 'state' attribute")
    return LoadedHandler(ref=ref, func=obj, breaker=breaker)


__all__ = ["HandlerContext", "LoadedHandler", "context", "load_handler", "use_context"]
