"""The schedule routes of the API: a fleet's recurring maintenance windows.

    GET    /api/fleets/{name}/schedules                   view   the ``schedule list --json`` shape
    POST   /api/fleets/{name}/schedules                   admin  add (or replace) one
    DELETE /api/fleets/{name}/schedules/{schedule}        admin  remove it
    POST   /api/fleets/{name}/schedules/{schedule}/end    admin  end its occurrence in force early
    POST   /api/fleets/{name}/schedules/{schedule}/canary admin  a canary resume of that occurrence

The POST body: ``{"name", "cron", "duration" ("2h") or "duration_seconds", "timezone",
"reason", "starting"?, "until"? (ISO 8601 times), "skip"? (["2027-01-03", ...])}``; it answers
200 with the schedule as ``schedule list`` shows it. A bad cron expression, zone, duration,
date, or a window that overlaps its next occurrence: 422 ``{"detail"}``; a name a hold has, or
past the cap of schedules: 409 ``{"detail", "kind"}``; a schedule there is not: 404; an early
end outside an occurrence: 409 (kind ``not_active``). The audit trail names the token.

The canary body: ``{"step": "canary"|"rollback"|"promote", "canary"? ("1", "10%"; with
``canary``), "reason"?, "dry_run"?}``: ``canary`` releases the occurrence's hold on the
replicas chosen as ``resume --hold NAME --canary`` chooses them (named in ``canaries``),
``rollback`` puts it back on them, ``promote`` ends the occurrence early (as the CLI's
``--promote``; the API has no soak: a client watches and promotes or rolls back). Outside an
occurrence: 409 ``not_active`` saying when the next one starts; a promote or rollback with no
canary: 409 ``no_canary``; ``dry_run``: what it would do, written nowhere.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from coordinator.durations import InvalidDuration, parse_duration
from coordinator.fleet.schedules import ScheduleConflict
from coordinator.render.schedules import schedule_dict, schedules_dict
from coordinator.web.deps import NamedChange, NamedView
from replica.contract import FLEET_NAME_RE, now_utc, parse_time
from replica.contract.recurrence import MAX_CRON_LEN, MAX_DURATION_S
from replica.contract.schedules import MAX_SKIP, parse_date
from replica.errors import ContractError

ScheduleName = Annotated[str, Path(pattern=f"^{FLEET_NAME_RE.pattern}$", max_length=63)]


class ScheduleRequest(BaseModel):
    """``POST /api/fleets/{name}/schedules``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=63)
    cron: str = Field(max_length=MAX_CRON_LEN)
    duration: str | None = Field(default=None, max_length=32)
    duration_seconds: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    timezone: str = Field(max_length=64)
    reason: str = Field(max_length=1000)
    starting: str | None = Field(default=None, max_length=64)
    until: str | None = Field(default=None, max_length=64)
    skip: list[str] = Field(default_factory=list, max_length=MAX_SKIP)


class EndRequest(BaseModel):
    """``POST /api/fleets/{name}/schedules/{schedule}/end`` and ``DELETE``: an optional
    reason for the audit trail."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=1000)


class CanaryRequest(BaseModel):
    """``POST /api/fleets/{name}/schedules/{schedule}/canary``."""

    model_config = ConfigDict(extra="forbid")

    step: Literal["canary", "rollback", "promote"]
    canary: str | None = Field(default=None, max_length=8, description="3 or 10%")
    reason: str = Field(default="", max_length=1000)
    dry_run: bool = False


def _conflict(exc: ScheduleConflict) -> JSONResponse:
    return JSONResponse({"detail": str(exc), "kind": exc.kind},
                        status_code=404 if exc.kind == "unknown" else 409)


def _time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ContractError:
        raise ContractError(f"{field} must be an ISO 8601 time, not {value[:40]!r}") from None


def install(app: FastAPI) -> None:
    """Add the schedule routes to ``app``."""

    @app.get("/api/fleets/{name}/schedules", tags=["schedules"])
    async def get_schedules(access: NamedView) -> dict[str, Any]:
        """The fleet's schedules, each with its next 3 occurrences (in its zone and UTC)."""
        fleet = access.fleet
        return schedules_dict(fleet.name, await fleet.schedules(), now_utc())

    @app.post("/api/fleets/{name}/schedules", tags=["schedules"], response_model=None)
    async def add_schedule(access: NamedChange, body: ScheduleRequest
                           ) -> dict[str, Any] | JSONResponse:
        """Add (or replace) a recurring maintenance window: a hold named after it during
        each occurrence, started and ended by every replica on its own clock."""
        if (body.duration is None) == (body.duration_seconds is None):
            raise ContractError('give one of "duration" (2h) and "duration_seconds"')
        seconds = body.duration_seconds
        if body.duration is not None:
            try:
                seconds = parse_duration(body.duration, name="duration",
                                         maximum=MAX_DURATION_S)
            except InvalidDuration as exc:
                raise ContractError(str(exc)) from None
        assert seconds is not None
        skip: list[date] = [parse_date(d) for d in body.skip]
        try:
            schedule = await access.fleet.add_schedule(
                body.name, body.cron, seconds, body.timezone, body.reason,
                access.operator.name, starting=_time(body.starting, "starting"),
                until=_time(body.until, "until"), skip=skip)
        except ScheduleConflict as exc:
            return _conflict(exc)
        return {"fleet": access.fleet.name, "schedule": schedule_dict(schedule, now_utc())}

    @app.delete("/api/fleets/{name}/schedules/{schedule}", tags=["schedules"],
                response_model=None)
    async def remove_schedule(access: NamedChange, schedule: ScheduleName,
                              body: EndRequest | None = None) -> dict[str, Any] | JSONResponse:
        """Remove the schedule; an occurrence in force ends on every replica."""
        try:
            await access.fleet.remove_schedule(schedule, access.operator.name,
                                               body.reason if body else "")
        except ScheduleConflict as exc:
            return _conflict(exc)
        return {"fleet": access.fleet.name, "removed": schedule}

    @app.post("/api/fleets/{name}/schedules/{schedule}/end", tags=["schedules"],
              response_model=None)
    async def end_occurrence(access: NamedChange, schedule: ScheduleName,
                             body: EndRequest | None = None) -> dict[str, Any] | JSONResponse:
        """End the schedule's occurrence in force now (as ``resume --hold NAME``): the
        replicas release its hold until its next occurrence; the schedule stays."""
        try:
            ended = await access.fleet.end_occurrence(schedule, access.operator.name,
                                                      body.reason if body else "")
        except ScheduleConflict as exc:
            return _conflict(exc)
        return {"fleet": access.fleet.name, "schedule": schedule_dict(ended, now_utc())}

    @app.post("/api/fleets/{name}/schedules/{schedule}/canary", tags=["schedules"],
              response_model=None)
    async def occurrence_canary(access: NamedChange, schedule: ScheduleName,
                                body: CanaryRequest) -> dict[str, Any] | JSONResponse:
        """A canary resume of the schedule's occurrence in force: release its hold on a few
        replicas (``canary``), put it back (``rollback``) or end the occurrence (``promote``)."""
        from coordinator.web.occurrence import canary_step

        try:
            return await canary_step(access.fleet, schedule, body.step, body.canary,
                                     access.operator.name, body.reason, body.dry_run)
        except ScheduleConflict as exc:
            return _conflict(exc)


__all__ = ["CanaryRequest", "EndRequest", "ScheduleRequest", "install"]
