"""coordinator.Fleet: the operator's side of the control plane, as a library.

    fleet = Fleet(redis, "orders")
    state = await fleet.pause("db maintenance", by="alice", expected_for=timedelta(minutes=30))
    report = await fleet.wait(state.version, timeout=60)
    state = await fleet.resume(by="alice", stagger=timedelta(seconds=30))

``Fleet`` is the one public class; its work is done by one module per noun: ``changes``
(pause, resume, restore: one script each), ``reads`` (state, replicas, history),
``waiting`` (``wait``, from acknowledgements confirmed by the records), ``listener`` (the
subscription to the acknowledgements) and ``calls`` (how each kind of call meets a lost
connection). No method does a round trip per replica.

Errors: ``ContractError`` (a ``ValueError``) for input refused before anything is sent;
redis-py's ``ConnectionError``/``TimeoutError`` when Redis cannot be reached (nothing was
sent); ``OutcomeUnknown`` when a change was sent and no answer came (read the state);
``NotConfirmed`` (``coordinator.fleet.durability``, carrying the state) when a pause or resume
is made on the primary but no replica confirmed it in time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.fleet.calls import again
from coordinator.fleet.limits import LimitChange, LimitReading, Limits
from coordinator.fleet.models import AuditEvent, FleetStatus, ReplicaInfo, WaitReport
from coordinator.fleet.reads import Reads
from coordinator.fleet.schedules import Schedules
from coordinator.fleet.tracing import traced_change, wait_span, waited
from replica.contract import (
    A_ACTION,
    A_AT,
    A_BY,
    A_REASON,
    A_VERSION,
    AUDIT_MAXLEN,
    DEFAULT_HOLD,
    FleetState,
    Keys,
    format_time,
    now_utc,
    validate_fleet,
)
from replica.contract.keys import FLEETS_KEY
from replica.contract.schedules import Schedule, ScheduleSet
from replica.link.redisio import uncancelled

if TYPE_CHECKING:  # loaded by the first change or wait: a command that only reads never needs them
    from coordinator.fleet.changes import Changes
    from coordinator.fleet.dryrun import DryRun
    from coordinator.fleet.listener import AckListener
    from coordinator.fleet.waiting import Waiter
    from coordinator.fleet.waitscope import WaitScope

log = logging.getLogger(__name__)


class Fleet:
    """One fleet's control plane, seen from the operator's side.

    ``redis`` is a ``redis.asyncio.Redis`` client with or without ``decode_responses``.
    ``wait_poll_interval`` is how often ``wait`` re-reads the records of the replicas it has
    not heard from (the fallback to acknowledgements; it waits while acknowledgements keep
    coming: ``coordinator.fleet.fallback``). A pause or resume on a primary with
    replicas connected waits up to ``min_replicas_timeout`` seconds for ``min_replicas_ack``
    of them to confirm it (``WAIT``; 0: off), else raises ``NotConfirmed``.
    """

    def __init__(
        self,
        redis: Redis,
        name: str,
        *,
        wait_poll_interval: float = 0.5,
        min_replicas_ack: int = 1,
        min_replicas_timeout: float = 1.0,
    ) -> None:
        self._redis = redis
        self._name = validate_fleet(name)
        self._keys = Keys(name)
        self.wait_poll_interval = wait_poll_interval
        self._min_replicas = (min_replicas_ack, min_replicas_timeout)
        self._reads = Reads(redis, self._name, self._keys)
        self._limits = Limits(redis, self._name, self._keys)
        self._schedules = Schedules(redis, self._name, self._keys)

    # The changes, the acknowledgements' subscription and the wait are made (and their modules
    # loaded) on first use: ``fleetgate status`` reads and loads none of them.

    @cached_property
    def _changes(self) -> Changes:
        from coordinator.fleet.changes import Changes
        from coordinator.fleet.durability import Durability

        return Changes(self._redis, self._name, self._keys, self._reads,
                       Durability(*self._min_replicas))

    @cached_property
    def _listener(self) -> AckListener:
        from coordinator.fleet.listener import AckListener

        return AckListener(self._redis, self._keys)

    @cached_property
    def _waiter(self) -> Waiter:
        from coordinator.fleet.waiting import Waiter

        return Waiter(self._redis, self._keys, self._reads, self._listener)

    # ------------------------------------------------------------------ listening

    async def listen(self) -> Fleet:
        """Keep a subscription to the acknowledgements open (until ``aclose()``), so ``wait``
        needs no subscribe round trip and reads no record for an ack it could have missed:
        for a coordinator that pauses and waits often (the API, the bench). Idempotent."""
        await self._listener.open()
        return self

    async def aclose(self) -> None:
        """Close the subscription ``listen()`` opened (if any)."""
        if "_listener" in self.__dict__:  # made by listen() or a wait: else nothing is open
            await self._listener.close()

    async def __aenter__(self) -> Fleet:
        return await self.listen()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def name(self) -> str:
        return self._name

    @property
    def keys(self) -> Keys:
        return self._keys

    @property
    def redis(self) -> Redis:
        """The client this fleet talks through."""
        return self._redis

    def __repr__(self) -> str:
        return f"Fleet({self._name!r})"

    # ------------------------------------------------------------------ changes

    async def pause(
        self,
        reason: str,
        by: str,
        expected_for: timedelta | float | None = None,
        auto_resume_after: timedelta | float | None = None,
        *,
        resume_stagger: timedelta | float | None = None,
        hold: str | None = None,
        starts_at: datetime | None = None,
        reschedule: bool = False,
        for_wait: bool = False,
        select: str | None = None,
        dry_run: bool = False,
    ) -> FleetState:
        """Add or update the fleet hold ``hold`` (``default`` when None): the fleet is paused
        while any hold is active. Updating an active hold keeps its ``since``. ``reason`` and
        ``by`` follow the contract's rule (``check_reason``, ``check_by``: printable,
        stripped, bounded). ``expected_for`` only informs (alerts, dashboards);
        ``auto_resume_after`` ends the hold on every replica's own clock, with no coordinator
        running, spread over ``resume_stagger`` when the fleet resumes then. ``starts_at`` (an
        aware datetime in the future) schedules the hold: it starts then on every replica's own
        clock, and both durations count from it (a maintenance window). Durations are
        timedeltas or seconds. Raises ``HoldConflict`` past ``MAX_HOLDS`` holds.

        Scheduling a hold that is active now for later ends it now: refused
        (``ActiveHoldConflict``, kind ``active``, nothing changed) unless ``reschedule``; then,
        when it was the last active hold, the fleet resumes and the change is audited as the
        ``resume`` it is.

        ``select`` (a label selector, Kubernetes syntax) makes the hold hold only the replicas
        whose labels match; updating a hold replaces its selector (none: every replica).
        ``dry_run=True`` writes nothing and returns the state the change would write; what it
        would do is then ``dry_run_result`` (``coordinator.fleet.dryrun``).

        ``for_wait=True`` when a ``wait()`` on this version follows: the change reads the
        ``replicas`` set with it (just before it, in one ``MULTI``/``EXEC``: no round trip
        added), so the wait starts from the membership at the change and names a replica that
        stops cleanly meanwhile as having left. Without it the change reads no member (it costs
        the same at any fleet size) and ``wait`` reads the set itself, after the change."""
        if hold is not None:  # a schedule's name is its own (ScheduleConflict, kind clash)
            await self._schedules.refuse_hold_named_as_schedule(hold)
        return await traced_change(self._name, "pause", hold or DEFAULT_HOLD, by,
                                   lambda: self._changes.pause(
                                       reason, by, expected_for, auto_resume_after,
                                       resume_stagger, hold, starts_at, reschedule, for_wait,
                                       select, dry_run))

    async def resume(
        self,
        by: str,
        stagger: timedelta | float | None = None,
        *,
        reason: str | None = None,
        hold: str | None = None,
        all: bool = False,
        for_wait: bool = False,
        canary: str = "",
        canaries: Sequence[str] = (),
        dry_run: bool = False,
    ) -> FleetState:
        """Release the fleet hold ``hold``; without one, the only hold there is; with
        ``all=True``, every hold. A resume without a hold name while the fleet has several
        holds raises ``HoldConflict`` (kind ``ambiguous``) and changes nothing, so nobody undoes
        someone else's pause by accident; naming a hold the fleet does not have raises it too
        (kind ``unknown``). Releasing a scheduled hold cancels it. When the last active hold
        goes, the fleet resumes; with ``stagger`` each replica waits an offset derived from
        its id, spread evenly over that window. ``reason`` (optional) goes to the audit trail.
        Resuming a fleet without holds changes nothing and returns the state. ``for_wait``: as
        for ``pause()``. A canary resume of ``hold``: ``canary="canary"`` releases it on the
        replica ids ``canaries`` only (``coordinator.fleet.canary`` chooses them),
        ``"rollback"`` puts it back on them, ``"promote"`` releases it (both raise
        ``NoCanaryConflict`` for a hold without canaries). ``dry_run``: as for ``pause()``."""
        return await traced_change(self._name, "resume", "*" if all else hold, by,
                                   lambda: self._changes.resume(by, stagger, reason, hold, all,
                                                                for_wait, canary, canaries,
                                                                dry_run))

    @property
    def dry_run_result(self) -> DryRun | None:
        """What the last ``dry_run=True`` change would have done (holds before, state after,
        audit action)."""
        return self._changes.dry

    async def restore_if_missing(self) -> bool:
        """Put the state hash back from the replica records when Redis forgot it (or holds an
        older version than a replica applied): the newest applied version wins, and a pause is
        never replaced by a running state. The coordinator's side of what every replica tries
        on its own (replicas may lack the permission). True when it wrote the hash."""
        return await self._changes.restore_if_missing()

    # ------------------------------------------------------------------ reading

    async def state(self) -> FleetState:
        """The fleet's state (the initial running state, version 0, when there is no hash).

        A pause past its ``auto_resume_at`` still reads ``paused`` here (replicas have resumed
        on their own clocks): see ``FleetState.effectively_paused()``."""
        return await self._reads.state()

    async def known(self) -> bool:
        """Whether this fleet was ever seen on this Redis: it has a state, replicas or an audit
        trail, or is in the registry of fleets (the API's 404 follows the same rule). A
        mistyped name is not: nothing that changed nothing ever writes one."""
        redis, keys = self._redis, self._keys
        if await again(lambda: redis.exists(keys.state, keys.replicas, keys.audit)):
            return True
        return await again(lambda: redis.zscore(FLEETS_KEY, self._name)) is not None

    async def replicas(self, include_stale: bool = True) -> list[ReplicaInfo]:
        """Every replica in the ``replicas`` set, sorted by id; a replica whose heartbeat is too
        old (or whose record expired) is marked ``stale``. Entries that cannot be read are
        skipped (``status()`` counts them)."""
        infos, _unreadable = await self._reads.infos(await self._reads.members(), include_stale)
        return infos

    async def status(self, include_stale: bool = True) -> FleetStatus:
        """The state and every replica (as ``state()`` and ``replicas()``, in two round trips
        instead of three), with the count of entries that could not be read."""
        return await self._reads.status(include_stale)

    async def history(self, limit: int = 50) -> list[AuditEvent]:
        """The latest audit events, newest first."""
        return await self._reads.history(limit)

    async def enqueue(self, items: Iterable[Any], *, timeout: float = 60.0) -> list[str]:
        """Append the items (as JSON, field ``item``) to the work stream as one batch, whole or
        not at all, within the fleet's backlog limit (``set_limit``; none by default); returns
        the entry ids. The limit is checked in the script that adds the batch
        (``coordinator.fleet.producer``): a full backlog raises ``BacklogFull`` (nothing
        written) at once, or with ``when_full`` wait once ``timeout`` seconds passed without
        room. On a primary with replicas connected, the batch is confirmed as a change is
        (``WAIT`` on that connection, ``min_replicas_ack`` within ``min_replicas_timeout``): a
        batch no replica confirmed raises ``BatchNotConfirmed`` carrying its ids (written to
        the primary; a failover now could lose it)."""
        from coordinator.fleet import producer

        return await producer.enqueue(self._redis, self._name, self._keys, items,
                                      self._changes.durability, timeout)

    # ------------------------------------------------------------------ backlog limit

    async def set_limit(
        self, max_backlog: int, when_full: str = "reject", *, by: str
    ) -> LimitChange:
        """Limit the work not yet done (lag plus pending) of the work stream to
        ``max_backlog`` entries for every producer; ``when_full`` ``reject`` or ``wait``.
        Audited (``limit_set``)."""
        return await self._limits.set(max_backlog, when_full, by=by)

    async def clear_limit(self, *, by: str) -> LimitChange:
        """Remove the backlog limit (audited, ``limit_cleared``); a fleet without one: nothing
        written, ``changed`` False."""
        return await self._limits.clear(by=by)

    async def limit(self) -> LimitReading:
        """The backlog limit as Redis holds it: none, the limit, or why it cannot be read."""
        return await self._limits.read()

    # ------------------------------------------------------------------ schedules

    async def add_schedule(
        self, name: str, cron: str, duration: timedelta | float, timezone: str, reason: str,
        by: str, *, starting: datetime | None = None, until: datetime | None = None,
        skip: Iterable[date] = (),
    ) -> Schedule:
        """Add (or replace) the recurring maintenance window ``name``: a hold of that name
        during each occurrence of ``cron`` in ``timezone``, lasting ``duration``, from
        ``starting`` to ``until``, but on the local dates in ``skip``. The replicas start and
        end each occurrence on their own clocks. Raises ``ContractError`` for a bad value or a
        window that would overlap its next occurrence, ``ScheduleConflict`` for a name a hold
        has or past ``MAX_SCHEDULES`` (``coordinator.fleet.schedules``)."""
        return await self._schedules.add(name, cron, duration, timezone, reason, by,
                                         starting=starting, until=until, skip=skip)

    async def schedules(self) -> ScheduleSet:
        """The fleet's schedules (``.schedules``, sorted by name) and the entries that cannot
        be read (``.unreadable``)."""
        return await self._schedules.read()

    async def remove_schedule(self, name: str, by: str, reason: str = "") -> None:
        """Remove the schedule ``name``; an occurrence in force ends on every replica."""
        await self._schedules.remove(name, by, reason)

    async def end_occurrence(self, name: str, by: str, reason: str = "") -> Schedule:
        """End the occurrence of schedule ``name`` in force now (``resume --hold NAME``): the
        replicas release its hold until its next occurrence; the schedule stays."""
        return await self._schedules.end_occurrence(name, by, reason)

    # ------------------------------------------------------------------ wait

    async def wait(
        self, version: int, timeout: float = 60.0, *, scope: WaitScope | None = None
    ) -> WaitReport:
        """Wait until every replica live at the change applied ``version`` and, for a pause,
        is quiet (for a resume: no longer held by the fleet). Never raises on timeout: the
        report says who did not get there and why. A replica is let go only when it left (a
        clean stop: ``report.excused``, ``gone``); one gone silent (frozen, cut off, killed) is
        a straggler, ``unreachable``, with when it was last heard and its ``in_flight`` then.
        The final word on each replica is its record: an acknowledgement its record does not
        confirm does not count. A wait that ends with stragglers is recorded in the events
        stream, for ``fleetgate serve`` to announce."""
        with wait_span(self._name, version) as traced:
            report = await self._waiter.wait(
                version, timeout, self.wait_poll_interval, self._changes.last, scope
            )
            waited(traced, report)
            if report.stragglers:
                await self._record_stragglers(report)
            return report

    async def _record_stragglers(self, report: WaitReport) -> None:
        """A ``wait`` entry in the events stream: bounded to a second, never the wait's error
        (the notifier's side: ``coordinator.notify``)."""
        last = self._changes.last
        state = last.state if last is not None and last.state.version == report.version else None
        fields: dict[Any, Any] = {
            A_ACTION: "wait",
            A_REASON: state.reason if state is not None else "",
            A_BY: state.by if state is not None else "",
            A_VERSION: str(report.version),
            A_AT: format_time(now_utc()),
            "wait_action": report.action,
            "elapsed_s": f"{report.elapsed_s:.3f}",
            "replicas": str(len(report.replicas)),
            "stragglers": json.dumps([{"id": r.id, "why": r.why} for r in report.stragglers]),
        }
        try:
            async with asyncio.timeout(1.0):
                await uncancelled(self._redis.xadd(
                    self._keys.events, fields, maxlen=AUDIT_MAXLEN, approximate=True
                ))
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("fleet %s: the wait for v%d ended with stragglers, but could not be "
                        "recorded for notification: %s", self._name, report.version, exc)


__all__ = ["Fleet"]
