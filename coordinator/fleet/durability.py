"""A change that survives the failover it meets: ``WAIT`` for a replica after the change script.

Redis replicates asynchronously: a primary that dies right after a pause's script may take the
pause with it, and a replica promoted in its place never saw it. So after the script answers,
on the same connection (``WAIT`` counts the replicas that have every write *of its connection*),
the coordinator sends ``WAIT min_replicas_ack timeout_ms``, when the primary has replicas
connected:

* whether it has any is read with ``ROLE`` on that connection (one round trip; a count of
  replicas is remembered for ``REPLICAS_CACHE_S``, "none" never: a replica that comes back
  within that second would otherwise go unwaited on, and the writes it has not got yet, told
  the caller as confirmed, die with the primary if it is promoted: the Sentinel chaos run lost
  7 confirmed items so; a server that refuses ``ROLE`` is waited on all the same). A standalone
  server without replicas is never waited on: ``WAIT`` would block its whole timeout there.
  A primary reached through Sentinel that shows no replicas is waited on all the same unless
  every sentinel answers and names it as the master with no failover in progress: during a
  ``SENTINEL FAILOVER`` (or a partition) the old primary, its replica promoted away and itself
  not yet demoted (about ten seconds here), takes writes that the demotion then discards;
* ``WAIT`` answering fewer replicas than asked (or not answering) does not undo anything: the
  change is made on the primary and published. ``Confirmation.check`` then raises
  ``NotConfirmed``, which carries the state, for the caller to say so (the CLI exits 4, the API
  answers 202).

``Durability(0)`` turns it off. The hook is ``ChangeScript``'s ``then``: whatever connection a
client gives the script (a pool's, a cluster node's), the ``WAIT`` goes on that one.

Work items are confirmed the same way (``write_confirmed``): ``Fleet.enqueue`` sends a batch of
``XADD``s pipelined on one connection of the work stream's node, then ``WAIT`` on it; a batch no
replica confirmed raises ``BatchNotConfirmed`` carrying the entry ids, so that a producer told
"written" is never told so of a batch a failover can lose (it may enqueue it again).

``except NotConfirmed`` catches both (the name the issue gives the producer's error):
``BatchNotConfirmed`` derives from ``NotConfirmed``, which derives from ``Unconfirmed`` (kept as
the common name too). A change's carries ``state``; a batch's ``fleet`` and ``ids`` instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from replica.contract import FleetState, text
from replica.errors import ContractError, FleetgateError
from replica.link.connect import pool_for
from replica.link.diagnose import short

log = logging.getLogger(__name__)

DEFAULT_MIN_REPLICAS_ACK: Final = 1
DEFAULT_MIN_REPLICAS_TIMEOUT_S: Final = 1.0
REPLICAS_CACHE_S: Final = 1.0
"""How long the count of connected replicas (``ROLE``) is taken as still true."""
READ_MARGIN_S: Final = 1.0
"""Past ``WAIT``'s own timeout, how long its answer may take to come back."""
_SAID: Final = 200
"""The most characters of one answer (a sentinel's error, flags or address) a message quotes."""


class Unconfirmed(FleetgateError):
    """Written to the Redis primary, not confirmed by a replica in time (``WAIT``): a pause or
    resume (``NotConfirmed``) or a batch of work items (``BatchNotConfirmed``, which is a
    ``NotConfirmed`` too)."""

    acked: int | None
    wanted: int
    why: str
    doubt: str

    @property
    def counted(self) -> str:
        """What ``WAIT`` found, for a message: ``0 of 1 replicas``, or ``no answer: ...``; then
        why it was waited on at all when the primary showed no replica (``doubt``)."""
        counted = (f"{self.acked} of {self.wanted} replicas" if self.acked is not None
                   else f"no answer: {self.why}")
        return f"{counted}; {self.doubt}" if self.doubt else counted


class NotConfirmed(Unconfirmed):
    """A pause or resume that is made on the Redis primary, and published, but that no replica
    confirmed within the timeout (``WAIT``): a failover now could lose it. Also the base of
    ``BatchNotConfirmed`` (a batch of enqueued items), so that ``except NotConfirmed`` around
    ``Fleet.enqueue`` catches it; a batch's carries ``fleet`` and ``ids``, not ``state``.

    ``state`` is the state the change wrote; ``acked`` the replicas ``WAIT`` counted (None when
    it did not answer: ``why``); ``wanted`` how many were asked for; ``doubt`` why a primary
    that showed no replica was waited on all the same (a sentinel that names another master,
    or did not answer), else empty."""

    def __init__(
        self, state: FleetState, acked: int | None, wanted: int, timeout_s: float, why: str = "",
        doubt: str = "",
    ) -> None:
        self.state = state
        self.acked = acked
        self.wanted = wanted
        self.timeout_s = timeout_s
        self.why = why
        self.doubt = doubt
        super().__init__(
            f"the change to fleet {state.fleet} (version {state.version}, "
            f"{'paused' if state.paused else 'running'}) was written to the Redis primary but "
            f"not confirmed by a replica within {timeout_s:g}s ({self.counted}): a failover now "
            "could lose it"
        )


class BatchNotConfirmed(NotConfirmed):
    """A batch of work items (``Fleet.enqueue``) written to the Redis primary, which no replica
    confirmed within the timeout: a failover now could lose it. ``ids`` are the entry ids the
    primary gave; ``acked``, ``wanted``, ``timeout_s`` and ``why`` as ``NotConfirmed``'s (whose
    ``state`` a batch has not: ``except NotConfirmed`` catches it, a change's handler reads
    ``state`` only from what a change raised)."""

    def __init__(
        self, fleet: str, ids: list[str], acked: int | None, wanted: int, timeout_s: float,
        why: str = "", doubt: str = "",
    ) -> None:
        self.fleet = fleet
        self.ids = ids
        self.acked = acked
        self.wanted = wanted
        self.timeout_s = timeout_s
        self.why = why
        self.doubt = doubt
        span = f" ({ids[0]} .. {ids[-1]})" if ids else ""
        Unconfirmed.__init__(  # not NotConfirmed's: a batch has no state
            self,
            f"{len(ids)} items{span} were written to fleet {fleet}'s work stream on the Redis "
            f"primary but not confirmed by a replica within {timeout_s:g}s ({self.counted}): a "
            "failover now could lose them; enqueue them again if they must not be lost",
        )


class Durability:
    """One fleet's rule for confirming its changes: ``min_replicas_ack`` replicas (0: off)
    within ``timeout_s`` seconds."""

    def __init__(
        self,
        min_replicas_ack: int = DEFAULT_MIN_REPLICAS_ACK,
        timeout_s: float = DEFAULT_MIN_REPLICAS_TIMEOUT_S,
    ) -> None:
        if isinstance(min_replicas_ack, bool) or min_replicas_ack < 0:
            raise ContractError("min_replicas_ack must be 0 (off) or more")
        if not timeout_s > 0:
            raise ContractError("the timeout of a replica's confirmation must be positive")
        self.min_replicas_ack = min_replicas_ack
        self.timeout_s = timeout_s
        self._replicas: int | None = None
        self._seen_at = float("-inf")
        self._role_refused = ""
        """``ROLE``'s refusal, once refused: every change waits from then on."""

    def __repr__(self) -> str:
        return f"Durability({self.min_replicas_ack}, {self.timeout_s:g})"

    def begin(self) -> Confirmation | None:
        """What one change passes to its script call as ``then`` (None when off)."""
        return Confirmation(self) if self.min_replicas_ack > 0 else None

    async def replicas(self, conn: Any) -> tuple[int | None, str]:
        """Replicas connected to the server of ``conn`` (``ROLE``; a count above 0 remembered
        for a moment, 0 asked again each time: no replica is what skips ``WAIT``), and why not
        when the count is None: it cannot be told, or a Sentinel primary without replicas is
        not the master every sentinel names, or is being failed over (``_not_named_alone``).
        The reason is returned, not kept: changes run at once on one rule."""
        if self._role_refused:
            return None, self._role_refused
        if self._replicas and time.monotonic() - self._seen_at < REPLICAS_CACHE_S:
            return self._replicas, ""
        await conn.send_command("ROLE")
        try:
            reply = await conn.read_response()
        except ResponseError as exc:  # NOPERM, or a service without ROLE
            self._role_refused = f"ROLE refused: {short(exc)}"
            log.warning("cannot tell whether Redis has replicas (ROLE: %s): every change waits "
                        "for %d to confirm it; set FLEETGATE_MIN_REPLICAS_ACK=0 where there are "
                        "none", exc, self.min_replicas_ack)
            return None, self._role_refused
        count = len(reply[2]) if text(reply[0]) == "master" and len(reply) > 2 else None
        doubt = "" if count is not None else f"ROLE answered {text(reply[0])[:_SAID]!r}"
        if count == 0 and isinstance(conn, SentinelManagedConnection):
            doubt = await _not_named_alone(conn)
            if doubt:
                count = None  # a primary a failover may be replacing: what it takes is lost
        self._replicas, self._seen_at = count, time.monotonic()
        return count, doubt


class Confirmation:
    """One change's confirmation: called with the connection its script ran on, after the
    script answered (``ChangeScript``'s ``then``); ``check(state)`` then says what it found."""

    def __init__(self, rule: Durability) -> None:
        self.rule = rule
        self.waited = False
        """``WAIT`` was sent (the server has replicas, or could not say)."""
        self.acked: int | None = None
        self.why = ""
        self.doubt = ""
        """Why ``WAIT`` was sent although the primary showed no replica (``Durability.replicas``)."""

    async def __call__(self, conn: Any) -> None:
        """Never raises but ``CancelledError``: the change is made whatever this finds."""
        rule = self.rule
        self.waited, self.acked, self.why, self.doubt = False, None, "", ""
        try:
            count, doubt = await rule.replicas(conn)
            if count == 0:
                return
            self.waited, self.doubt = True, doubt
            await conn.send_command("WAIT", rule.min_replicas_ack, _ms(rule.timeout_s))
            self.acked = int(await conn.read_response(timeout=rule.timeout_s + READ_MARGIN_S))
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError, TimeoutError, ValueError, TypeError, IndexError) as exc:
            self.waited = True
            self.why = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("could not confirm a change on a replica: %s", self.why)

    @property
    def confirmed(self) -> bool:
        """No replica to wait for, or enough of them confirmed."""
        return not self.waited or (self.acked is not None and self.acked >= self.rule.min_replicas_ack)

    def check(self, state: FleetState) -> FleetState:
        """``state`` when confirmed; else raise ``NotConfirmed`` carrying it."""
        if self.confirmed:
            return state
        log.warning("fleet %s: v%d written to the primary, but %s of %d replicas confirmed it "
                    "within %gs", state.fleet, state.version,
                    "none" if self.acked is None else self.acked, self.rule.min_replicas_ack,
                    self.rule.timeout_s)
        raise NotConfirmed(state, self.acked, self.rule.min_replicas_ack, self.rule.timeout_s,
                           self.why, self.doubt)

    def check_batch(self, fleet: str, ids: list[str]) -> list[str]:
        """``ids`` when confirmed; else raise ``BatchNotConfirmed`` carrying them."""
        if self.confirmed:
            return ids
        log.warning("fleet %s: %d items written to the primary, but %s of %d replicas "
                    "confirmed them within %gs", fleet, len(ids),
                    "none" if self.acked is None else self.acked, self.rule.min_replicas_ack,
                    self.rule.timeout_s)
        raise BatchNotConfirmed(fleet, ids, self.acked, self.rule.min_replicas_ack,
                                self.rule.timeout_s, self.why, self.doubt)


async def _not_named_alone(conn: Any) -> str:
    """Empty when every sentinel names ``conn``'s server as the master, with no failover in
    progress (``SENTINEL MASTER``, asked of all of them at once); else why not, each sentinel
    that does not agree named with its reason, for the caller's message. One that does not
    answer is a reason (wait: it cannot be told): the sentinel leading a ``SENTINEL FAILOVER``
    is the only one that says "failover in progress" until the others learn the new master,
    and passed over (slow, under load) it let a 10-minute chaos run write an item unwaited to
    the old primary, confirmed, and lost. A failover a sentinel tries on a primary it briefly
    saw down (``+odown``, 1 s without a ``PING`` answer, under load) counts too: while it
    tries, a replica the primary does not show (partitioned from it) may be promoted."""
    pool = getattr(conn, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    service = getattr(pool, "service_name", None)
    alone = "the primary shows no replica connected"
    if manager is None or service is None or not manager.sentinels:
        return f"{alone}, and there is no sentinel to ask whether it is the master"
    here = (str(conn.host), int(conn.port))
    sentinels = list(manager.sentinels)
    answers = await asyncio.gather(*(s.sentinel_master(service) for s in sentinels),
                                   return_exceptions=True)
    reasons: list[str] = []
    for sentinel, state in zip(sentinels, answers, strict=True):
        where = _address(sentinel)
        if isinstance(state, RedisError | OSError | TimeoutError):
            reasons.append(f"sentinel {where} did not say it is the master "
                           f"({short(state)[:_SAID]})")
            continue
        if isinstance(state, BaseException):
            raise state  # CancelledError, or a defect: Confirmation says it was not confirmed
        if not isinstance(state, dict):
            reasons.append(f"sentinel {where} answered {str(state)[:_SAID]!r}, not a master's "
                           "state")
            continue
        flags = state.get("flags", "")
        flagged = sorted(map(str, flags)) if isinstance(flags, set | frozenset | list) \
            else str(flags).split(",")
        named = (str(state.get("ip"))[:_SAID], str(state.get("port"))[:_SAID])
        if named != (here[0], str(here[1])):
            reasons.append(f"sentinel {where} names {named[0]}:{named[1]} as the master, not "
                           f"{here[0]}:{here[1]}")
        elif "failover_in_progress" in flagged or not state.get("is_master", True):
            reasons.append(f"sentinel {where} flags it {','.join(flagged)[:_SAID]}: a failover "
                           "may be replacing it")
    return f"{alone}, and {'; '.join(reasons)}" if reasons else ""


def _address(client: Any) -> str:
    """``host:port`` of a sentinel's client, for a message."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


async def write_confirmed(
    redis: Any, key: str, commands: Sequence[tuple[Any, ...]], rule: Durability,
    written: Callable[[list[Any]], bool] | None = None,
) -> tuple[list[Any], Confirmation | None]:
    """Send ``commands`` (all on ``key``'s node) pipelined on one connection, read every reply,
    then confirm them there (``WAIT``, as a change's). Returns the replies and the
    confirmation (None when ``rule`` is off, or when ``written(replies)`` says nothing was
    written: a batch the backlog limit refused); ``confirmation.confirmed`` says what it found.

    A reply that is an error is raised once every reply is read (nothing is confirmed then).
    A connection that breaks before the commands go out is tried once more, afresh (nothing
    was sent); one that breaks after raises redis-py's error as it is: some of the batch may
    be written."""
    pool = pool_for(redis, key)
    for attempt in range(2):
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            try:
                if not conn.is_connected:
                    await conn.connect()
                await conn.send_packed_command(conn.pack_commands(commands))
            except (RedisConnectionError, OSError):
                await conn.disconnect()
                if attempt:
                    raise
                continue
            replies, error = await _replies(conn, len(commands))
            if error is not None:
                raise error
            confirm = rule.begin() if written is None or written(replies) else None
            if confirm is not None:
                await confirm(conn)
            return replies, confirm
        except BaseException:
            await conn.disconnect()  # replies may be left unread on it
            raise
        finally:
            await pool.release(conn)
    raise AssertionError("unreachable")  # pragma: no cover


async def _replies(conn: Any, count: int) -> tuple[list[Any], ResponseError | None]:
    """``count`` replies of ``conn``; the first error reply is returned, not raised, so that
    the connection is read to its end."""
    replies: list[Any] = []
    error: ResponseError | None = None
    for _ in range(count):
        try:
            replies.append(await conn.read_response())
        except ResponseError as exc:
            error = error or exc
            replies.append(exc)
    return replies, error


def _ms(seconds: float) -> int:
    """WAIT's timeout in milliseconds: at least 1 (0 would block for ever)."""
    return max(1, round(seconds * 1000))


__all__ = [
    "DEFAULT_MIN_REPLICAS_ACK",
    "DEFAULT_MIN_REPLICAS_TIMEOUT_S",
    "BatchNotConfirmed",
    "Confirmation",
    "Durability",
    "NotConfirmed",
    "Unconfirmed",
    "write_confirmed",
]
