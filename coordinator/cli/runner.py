"""Running a command's Redis work: one client, one deadline, and every failure as an exit status.

``run_with_fleet(settings, action, deadline=...)`` runs ``action(fleet)`` on a fresh client. The
deadline bounds the whole action, whatever Redis does (a hung server included): past it the
action is cancelled and ``DeadlineExceeded`` is raised, for the command to say what is known
(a change command knows whether its change was sent, see ``Progress``). Failures become
``CliError``s by one table, ``ERROR_EXITS`` (``exits`` applies it to a command's checks before
its Redis work too): Redis unreachable (1), a value the contract refuses (2), a change whose
outcome is unknown (5, ``replica.errors.OutcomeUnknown``). Before the action the server is asked
whether it runs Lua scripts (``replica.link.diagnose.require_scripting``: exit 2 when it
cannot); a failure to reach it is read by ``replica.link.diagnose.diagnose``: what can
never work as it is (a password Redis requires, a TLS port reached without TLS, a Sentinel
given as a Redis server...) is one line saying what to fix and exit 2, a likely cause is added
to the unreachable line (exit 1).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from redis.exceptions import RedisError

from coordinator.cli.exits import EXIT_OUTCOME_UNKNOWN, EXIT_UNREACHABLE, CliError, usage
from coordinator.cli.output import plain
from coordinator.fleet.fleet import Fleet
from replica.contract import FleetState
from replica.contract.urls import RedisTarget, parse_redis_url, redact_url
from replica.errors import ContractError, OutcomeUnknown, RedisMisconfigured
from replica.link.connect import connect
from replica.link.redisio import bounded, cancel_bounded
from replica.process.shutdown import Shutdown, conventional_status

if TYPE_CHECKING:
    from coordinator.cli.lightsettings import CommandSettings
    from coordinator.fleet.durability import NotConfirmed

T = TypeVar("T")

CONNECT_TIMEOUT_S: Final = 5.0
SOCKET_TIMEOUT_S: Final = 30.0
CLOSE_TIMEOUT_S: Final = 1.0
"""How long closing the client may take (a hung server must not hold the command)."""
CANCEL_TIMEOUT_S: Final = 2.0
"""How long an action cut off by its deadline may take to end."""


class DeadlineExceeded(Exception):
    """The action ran past the command's deadline and was cancelled."""


@dataclass
class Progress:
    """How far a change command got, so a deadline that cuts it off can say what is known:
    ``step`` is ``read`` (nothing sent yet), ``change`` (the change is on its way: its outcome
    is unknown until it answers) or ``wait`` (the change is made: ``state``).

    ``deadline()`` is ``limit`` seconds after the start, and ``grace`` more once the change is
    made: a wait that runs out of time still reads who did not get there, and why."""

    limit: float
    grace: float = 0.0
    step: str = "read"
    state: FleetState | None = None
    unconfirmed: NotConfirmed | None = None
    """The change is made but no replica confirmed it in time (exit 4 once it is reported)."""
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        """Seconds left of ``limit`` (0 when none)."""
        return max(0.0, self.started + self.limit - time.monotonic())

    def deadline(self) -> float:
        """When the command must end (``time.monotonic()``)."""
        return self.started + self.limit + (self.grace if self.step == "wait" else 0.0)


def _transports(redis: Any) -> list[asyncio.WriteTransport]:
    """The transports of the client's pooled connections (a single server's or a Sentinel
    master's pool: redis-py keeps them in ``_available_connections``/``_in_use_connections``)."""
    pool = getattr(redis, "connection_pool", None)
    found: list[asyncio.WriteTransport] = []
    for attr in ("_available_connections", "_in_use_connections"):
        for conn in list(getattr(pool, attr, None) or ()):
            writer = getattr(conn, "_writer", None)
            transport = getattr(writer, "transport", None)
            if isinstance(transport, asyncio.WriteTransport):
                found.append(transport)
    return found


async def _close(redis: Any) -> None:
    """Close the client within ``CLOSE_TIMEOUT_S``; then abort whatever is still open: a TLS
    connection's close waits for the server's close_notify, which a loaded server may send
    after the bound, and the loop ends with the command (its socket left to the GC)."""
    transports = _transports(redis)
    try:
        await asyncio.shield(bounded(redis.aclose(), CLOSE_TIMEOUT_S))
    finally:
        for transport in transports:
            transport.abort()


def _url(settings: CommandSettings | None) -> str:
    return redact_url(settings.redis_url) if settings is not None else "the configured URL"


def outcome_unknown(settings: CommandSettings | None, why: str) -> CliError:
    """The one line (and exit 5) of a change that was sent and never answered."""
    return CliError(
        f"the outcome is unknown ({why}): the change was sent to Redis at "
        f"{_url(settings)} and may have been applied; check the state with "
        "'fleetgate status' before trying again",
        EXIT_OUTCOME_UNKNOWN,
    )


def unreachable(settings: CommandSettings | None, why: str) -> CliError:
    return CliError(f"cannot reach Redis at {_url(settings)}: {why}", EXIT_UNREACHABLE)


def run_with_fleet(
    settings: CommandSettings,
    action: Callable[[Fleet], Awaitable[T]],
    *,
    deadline: Callable[[], float] | None = None,
    interrupted: Callable[[signal.Signals], int] = conventional_status,
) -> T:
    """Run ``action(fleet)`` on a fresh client, until ``deadline()`` (a ``time.monotonic()``
    time, read again as it may move) when given; else Redis's socket timeouts bound each call.
    Raises ``CliError`` or ``DeadlineExceeded``.

    SIGINT and SIGTERM cancel the action (again, until it ends: see
    ``replica.process.shutdown``) and raise ``Interrupted`` with the exit status
    ``interrupted(signal)`` (130 or 143 by default); the process ends within a second of the
    signal, a hung Redis call included."""

    async def go() -> T:
        try:
            target = parse_redis_url(settings.redis_url)
            redis = connect(
                target,
                decode_responses=True,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=SOCKET_TIMEOUT_S,
            )
        except ValueError as exc:
            raise usage(f"invalid --redis-url {redact_url(settings.redis_url)}: {plain(str(exc))}") from None
        try:
            fleet = Fleet(redis, settings.fleet, min_replicas_ack=settings.min_replicas_ack,
                          min_replicas_timeout=settings.min_replicas_timeout)

            try:
                if deadline is None:
                    return await action(fleet)
                return await _until(action(fleet), deadline)
            except (RedisError, OSError, TimeoutError) as exc:
                raise await _explained(settings, target, exc) from None
        finally:
            await _close(redis)

    with exits(settings):
        return Shutdown(interrupted).run(go())


def _misconfigured(settings: CommandSettings | None, exc: Exception) -> CliError:
    return usage(f"cannot use Redis at {_url(settings)}: {plain(str(exc))}")


def _unknown(settings: CommandSettings | None, exc: Exception) -> CliError:
    cause = exc.__cause__
    why = (plain(str(cause)) or type(cause).__name__) if cause is not None else "no answer came"
    return outcome_unknown(settings, why)


def _unreachable(settings: CommandSettings | None, exc: Exception) -> CliError:
    return unreachable(settings, plain(str(exc)) or type(exc).__name__)


def _refused(settings: CommandSettings | None, exc: Exception) -> CliError:
    return usage(str(exc))


ERROR_EXITS: Final[tuple[tuple[type[Exception] | tuple[type[Exception], ...],
                               Callable[[CommandSettings | None, Exception], CliError]], ...]] = (
    (RedisMisconfigured, _misconfigured),  # the server answered: it cannot work as it is (2)
    (OutcomeUnknown, _unknown),  # Fleet's: the change script was sent, no answer came (5)
    ((RedisError, OSError, TimeoutError), _unreachable),  # Redis cannot be reached (1)
    (ContractError, _refused),  # a value the contract refuses (2)
)
"""Which error exits how, first match: the one table every command's errors go through
(``exits``), in a command's Redis work (``run_with_fleet``) or in its checks before it."""


@contextmanager
def exits(settings: CommandSettings | None = None) -> Iterator[None]:
    """Raise an error of ``ERROR_EXITS`` as its ``CliError`` (its one line and exit status);
    any other goes on as it is."""
    try:
        yield
    except Exception as exc:
        for kinds, error in ERROR_EXITS:
            if isinstance(exc, kinds):
                raise error(settings, exc) from None
        raise


def preflight(settings: CommandSettings) -> None:
    """Before a command that runs until stopped (``serve``): Redis asked once whether it can
    work (``replica.link.diagnose.preflight``). What can never work as it is raises
    ``CliError`` (exit 2, one line); an unreachable Redis does not: the command starts and
    retries, as it does when Redis goes away later."""
    from replica.link.diagnose import preflight as check_redis

    try:
        asyncio.run(check_redis(parse_redis_url(settings.redis_url)))
    except RedisMisconfigured as exc:
        raise usage(f"cannot use Redis at {redact_url(settings.redis_url)}: {plain(str(exc))}") from None
    except ContractError as exc:
        raise usage(f"invalid --redis-url: {plain(str(exc))}") from None


async def _explained(settings: CommandSettings, target: RedisTarget, exc: Exception) -> Exception:
    """``exc`` as the diagnosis reads it: a ``RedisMisconfigured`` when it can never work, the
    unreachable line with its likely cause, or ``exc`` itself."""
    from replica.link.diagnose import diagnose

    found = await diagnose(target, exc)
    if found is None:
        return exc
    if found.certain:
        return RedisMisconfigured(found.message)
    return unreachable(settings, plain(found.message))


async def _until(aw: Awaitable[T], deadline: Callable[[], float]) -> T:
    """``aw``'s result, or ``DeadlineExceeded`` once ``deadline()`` passed and it is cancelled.

    A task of its own and ``cancel_bounded``, not ``asyncio.timeout``: redis-py can swallow a
    cancellation that lands inside a call, and a timeout built on one would be lost with it."""
    task = asyncio.ensure_future(aw)
    try:
        while (left := deadline() - time.monotonic()) > 0:
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                return task.result()
    finally:
        if not task.done():
            await cancel_bounded(task, CANCEL_TIMEOUT_S)
    if task.done() and not task.cancelled() and task.exception() is None:
        return task.result()  # it answered while being cancelled
    raise DeadlineExceeded


__all__ = [
    "ERROR_EXITS",
    "DeadlineExceeded",
    "Progress",
    "exits",
    "outcome_unknown",
    "preflight",
    "run_with_fleet",
    "unreachable",
]
