"""Every exception fleetgate raises on the replica side.

The hierarchy::

    FleetgateError                 base of everything fleetgate raises
    ├── PoolClosed                 put() after drain()/stop(): the pool hands work back, takes none
    ├── ItemCancelled              passed to on_error for an item cut off by drain() past its deadline
    ├── ItemTimeout                passed to on_error for an item that ran past item_timeout
    │                              (also a builtin TimeoutError)
    ├── HandlerCancelled           passed to on_error for an item whose handler let a CancelledError
    │                              escape while its worker was not cancelled: a failure of the item
    ├── HandlerExited              passed to on_error for an item whose handler raised SystemExit,
    │                              KeyboardInterrupt or another BaseException: a failure of the item
    ├── BreakerOpen                a call refused by an open AsyncCircuitBreaker (the dependency
    │                              is considered down; the source retries it after the outage)
    ├── ConfigError                a setting or handler reference that cannot work (exit status 2)
    │   ├── InvalidDuration        a duration ("30m", "90s") that cannot be read or is out of bounds
    │   │                          (also a builtin ValueError)
    │   └── RedisMisconfigured     Redis answered, and the answer says it cannot work as configured
    │                              (no Lua scripting, a password it requires...)
    ├── ContractError              a value that breaks the Redis contract (bad fleet name, bad state)
    │   ├── InvalidMessage         a control-channel message that is not a valid state (ignored, counted)
    │   └── HoldConflict           a resume that names no hold while there are several, or a hold
    │                              there is not, or a pause past the most holds a fleet may have
    ├── OutcomeUnknown             a change was sent to Redis but no answer came: it may have been
    │                              applied; read the state before trying again
    └── BacklogFull                a batch of work items refused by the fleet's backlog limit
        │                          (``Fleet.enqueue``): nothing of it was written
        └── BacklogLimitUnreadable the limit cannot be read, so every batch is refused (fail
                                   closed) until it is set again or cleared

``TimeoutError`` (the builtin) is raised by ``pause()``, ``join()`` and ``drain()`` waits that
run out, as asyncio itself does; ``asyncio.QueueFull`` by ``put_nowait()`` on a full pool.
"""

from __future__ import annotations


class FleetgateError(Exception):
    """Base class for every error fleetgate raises."""


class PoolClosed(FleetgateError):
    """The pool was drained or stopped: it takes no new items."""


class ItemCancelled(FleetgateError):
    """An in-flight item was cancelled because a drain ran past its deadline."""


class ItemTimeout(FleetgateError, TimeoutError):
    """An item's handler ran past ``item_timeout`` and was cancelled."""


class HandlerCancelled(FleetgateError):
    """A handler let a ``CancelledError`` escape while its worker was not being cancelled.

    It awaited something that something else cancelled (a shared task, a future): the item
    failed, like any exception; the worker goes on. The ``CancelledError`` is the cause."""


class HandlerExited(FleetgateError):
    """A handler raised ``SystemExit`` (``sys.exit()``), ``KeyboardInterrupt`` or another
    ``BaseException`` that is not an ``Exception``.

    The item failed, like any exception; the worker goes on and the process does not end. The
    original exception is the cause."""


class BreakerOpen(FleetgateError):
    """A call refused because the breaker is open (the dependency is considered down)."""


class ConfigError(FleetgateError):
    """A configuration value that cannot work."""


class InvalidDuration(ConfigError, ValueError):
    """A duration ("30m", "90s", "2h") that cannot be read or is outside its bounds."""


class RedisMisconfigured(ConfigError):
    """Redis answered, and its answer says that the URL or the server cannot work as they are
    (a server without Lua scripting, a password it requires): retrying will not help."""


class ContractError(FleetgateError, ValueError):
    """A value that breaks the Redis contract."""


class InvalidMessage(ContractError):
    """A control-channel message that is not a valid fleet state."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class HoldConflict(ContractError):
    """A hold change that cannot be made as asked; nothing changed.

    ``kind`` is ``ambiguous`` (a resume without a hold name while the fleet has several holds),
    ``unknown`` (a resume of a hold the fleet does not have) or ``too_many`` (a pause that would
    add a hold past ``MAX_HOLDS``); ``holds`` names the fleet's holds."""

    def __init__(self, kind: str, fleet: str, holds: tuple[str, ...], hold: str = "") -> None:
        listed = ", ".join(holds) or "none"
        if kind == "ambiguous":
            message = (f"fleet {fleet} has {len(holds)} holds ({listed}): name the one to "
                       "release with --hold NAME, or release them all with --all")
        elif kind == "unknown":
            message = f"fleet {fleet} has no hold {hold!r} (holds: {listed})"
        else:
            message = f"fleet {fleet} already has {len(holds)} holds ({listed}), the most it may have"
        super().__init__(message)
        self.kind = kind
        self.fleet = fleet
        self.holds = holds
        self.hold = hold


class OutcomeUnknown(FleetgateError):
    """A change was sent to Redis and no answer came back: it may or may not have been applied.

    Unlike "unreachable" (nothing was sent), the caller must read the fleet's state to know."""


class BacklogFull(FleetgateError):
    """A batch of work items refused by the fleet's backlog limit: nothing of it was written.

    ``backlog`` is the work not yet done when the script last ran (lag plus pending; a lower
    bound when ``exact`` is False), ``limit`` the fleet's ``max_backlog``, ``count`` the
    batch's items, ``waited_s`` how long the producer waited for room (``when_full`` wait)."""

    def __init__(
        self, fleet: str, backlog: int | None, limit: int | None, count: int,
        waited_s: float = 0.0, *, exact: bool = True, message: str = "",
    ) -> None:
        self.fleet = fleet
        self.backlog = backlog
        self.limit = limit
        self.count = count
        self.waited_s = waited_s
        self.exact = exact
        if not message:
            at_least = "" if exact else "at least "
            never = " (a batch larger than the limit never fits)" if limit is not None \
                and count > limit else ""
            waited = f" after waiting {waited_s:.1f}s" if waited_s else ""
            message = (f"fleet {fleet}: backlog full: {at_least}{backlog} not yet done, limit "
                       f"{limit}; {count} items not enqueued{waited}{never}")
        super().__init__(message)


class BacklogLimitUnreadable(BacklogFull):
    """The fleet's limits hash cannot be read (``why``): every batch is refused, nothing
    written, until an operator sets the limit again or clears it (fail closed: see
    ``replica.contract.limits``)."""

    def __init__(self, fleet: str, why: str, count: int) -> None:
        self.why = why
        super().__init__(
            fleet, None, None, count,
            message=(f"fleet {fleet}: the backlog limit cannot be read ({why}): {count} items "
                     "not enqueued; set it again (fleetgate limits set) or clear it "
                     "(fleetgate limits clear)"),
        )
