"""The bodies of the API's writes: ``PauseRequest`` and ``ResumeRequest``.

Strict models: a value of the wrong JSON type is refused, never coerced (``"wait": "yes"``,
``"for_seconds": true`` and ``"timeout": "5"`` are 422; a whole number is still a number of
seconds). NaN and Infinity (which Python's JSON parser lets through) are refused as not
finite. An object with more keys than the model has fields is refused as a whole, in one
error. A reason must be printable, which refuses a lone surrogate too. ``by`` is not accepted:
the audit trail names the token's operator.

Holds (issue 14): a pause takes ``hold``, ``at`` (an ISO 8601 time or a duration from now, in
the future) and its window as ``for`` (a duration or seconds) or ``for_seconds`` (seconds, as
before), with ``auto_resume``; a resume takes ``hold`` or ``all``. An invalid hold name, an
``at`` in the past or unreadable, both ``hold`` and ``all``: 422. Both route families
(``/api/fleet/...`` and ``/api/fleets/{name}/...``) parse these bodies.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic.fields import FieldInfo

from coordinator.durations import MAX_DURATION_S, MIN_DURATION_S, InvalidDuration, parse_duration
from coordinator.fleet.schedule import InvalidAt, parse_at
from replica.contract import (
    MAX_REASON,
    MAX_STAGGER_S,
    check_optional_reason,
    check_reason,
    now_utc,
)
from replica.contract.holds import validate_hold
from replica.contract.limits import MAX_BACKLOG
from replica.contract.selectors import canonical_selector
from replica.errors import ContractError

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _few_keys(data: Any, fields: dict[str, FieldInfo]) -> Any:
    """Refuse at once an object with more keys than the model has fields, before pydantic
    builds an error for each unknown one (200,000 keys took seconds of the event loop)."""
    if isinstance(data, dict) and len(data) > len(fields):
        names = ", ".join(f.alias or name for name, f in fields.items())
        raise ValueError(
            f"the body has {len(data)} fields; it takes at most {len(fields)}: {names}"
        )
    return data


def _hold(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_hold(value)
    except ContractError as exc:
        raise ValueError(str(exc)) from None


def _timeout() -> Any:
    """The ``timeout`` field of every write: the whole request's bound."""
    return Field(
        default=60.0, ge=MIN_DURATION_S, le=MAX_DURATION_S,
        description="Seconds the whole request may take; the wait in it is capped by FLEETGATE_MAX_WAIT.",
    )


class _WriteBody(BaseModel):
    """What every write's body shares: strict, and no more keys than it has fields."""

    model_config = _STRICT

    @model_validator(mode="before")
    @classmethod
    def _few_fields(cls, data: Any) -> Any:
        return _few_keys(data, cls.model_fields)


class PauseRequest(_WriteBody):
    """Pause the fleet: add or update the hold ``hold`` (``default``), now or, with ``at``, at
    a time to come (a maintenance window: ``for``/``for_seconds`` and ``auto_resume`` count
    from it). ``by`` is not accepted: it is the token's operator name."""

    reason: str = Field(min_length=1, max_length=MAX_REASON, description="Why (1 to 500 printable characters).")
    hold: str | None = Field(
        default=None, max_length=63,
        description="The fleet hold to add or update (a name like a fleet's; default 'default').",
    )
    at: str | None = Field(
        default=None, max_length=64,
        description=("Start the hold then: an ISO 8601 time (2026-12-01T02:00Z) or a duration "
                     "from now ('2h'); in the future."),
    )
    for_: str | float | None = Field(
        default=None, alias="for",
        description="The expected window, a duration ('30m') or seconds; as for_seconds.",
    )
    for_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_DURATION_S,
        description="The expected window; the pause is overdue after it.",
    )
    auto_resume: bool = Field(default=False, description="Resume by itself when the window ends.")
    reschedule: bool = Field(default=False, description=(
        "With 'at', move a hold that is active now to the later start: it ends now (the fleet "
        "resumes if no other hold is active). Without it, that is refused (409, kind 'active')."))
    wait: bool = Field(default=False, description=(
        "Block until every live replica is quiet (with a future 'at': until each has the "
        "schedule, i.e. acknowledged the version)."))
    timeout: float = _timeout()
    select: str | None = Field(default=None, max_length=1000, description=(
        "Hold only the replicas whose labels match this Kubernetes label selector "
        "(zone=eu-west-1a); 'wait' waits for those."))
    dry_run: bool = Field(default=False, description=(
        "Answer what the change would do (holds before and after, replicas held or released) "
        "and write nothing."))
    _starts_at: datetime | None = PrivateAttr(default=None)
    _window_s: float | None = PrivateAttr(default=None)

    @field_validator("hold")
    @classmethod
    def _valid_hold(cls, value: str | None) -> str | None:
        return _hold(value)

    @field_validator("select")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        return None if value is None else canonical_selector(value)

    @field_validator("for_")
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            try:
                parse_duration(value, name="for")
            except InvalidDuration as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def starts_at(self) -> datetime | None:
        """When the hold starts (None: now), read from ``at`` when the body was."""
        return self._starts_at

    @property
    def window(self) -> timedelta | None:
        """The window of ``for`` or ``for_seconds`` (None without one)."""
        return None if self._window_s is None else timedelta(seconds=self._window_s)

    @field_validator("reason", mode="before")
    @classmethod
    def _trim(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str) -> str:
        return check_reason(value)

    @model_validator(mode="after")
    def _auto_resume_needs_window(self) -> PauseRequest:
        if self.for_ is not None and self.for_seconds is not None:
            raise ValueError("give the window as for or for_seconds, not both")
        if self.for_ is not None:
            self._window_s = parse_duration(self.for_, name="for")
        else:
            self._window_s = self.for_seconds
        if self.auto_resume and self._window_s is None:
            raise ValueError("auto_resume needs for_seconds (or for)")
        if self.at is not None:
            try:
                self._starts_at = parse_at(self.at, now_utc(), name="at")
            except InvalidAt as exc:
                raise ValueError(str(exc)) from None
        return self


class ResumeRequest(_WriteBody):
    """Resume the fleet: release the hold ``hold`` (a scheduled one is cancelled), the only
    hold there is (409 with several), or with ``all`` every hold. ``by`` is not accepted: it is
    the token's operator name."""

    reason: str | None = Field(
        default=None, max_length=MAX_REASON,
        description="Why, for the audit trail (optional; 1 to 500 printable characters).",
    )
    stagger_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_STAGGER_S,
        description="Spread the replicas' resumes evenly over this window.",
    )
    hold: str | None = Field(
        default=None, max_length=63, description="The hold to release (default: the only one).",
    )
    all_: bool = Field(default=False, alias="all", description="Release every hold.")
    wait: bool = Field(default=False, description="Block until every live replica is running.")
    timeout: float = _timeout()
    dry_run: bool = Field(default=False, description=(
        "Answer what the change would do (holds before and after, replicas held or released) "
        "and write nothing."))

    @field_validator("reason", mode="before")
    @classmethod
    def _printable(cls, value: Any) -> str | None:
        return check_optional_reason(value)  # before max_length: it applies to the stripped text

    @field_validator("hold")
    @classmethod
    def _valid_hold(cls, value: str | None) -> str | None:
        return _hold(value)

    @model_validator(mode="after")
    def _one_or_all(self) -> ResumeRequest:
        if self.hold is not None and self.all_:
            raise ValueError("hold names one hold and all every hold: give one of them")
        return self


class LimitRequest(_WriteBody):
    """Set the fleet's backlog limit (``PUT .../limits``): the most entries of its work stream
    not yet done (not delivered, or delivered and not acknowledged) that producers may leave,
    and what a producer does when a batch would pass it. ``by`` is the token's operator."""

    max_backlog: int = Field(ge=1, le=MAX_BACKLOG, description=(
        "The most entries not yet done (lag plus pending), 1 to 10^12."))
    when_full: Literal["reject", "wait"] = Field(default="reject", description=(
        "reject: a batch that does not fit is refused at once; wait: the producer waits for "
        "room up to its timeout, then is refused."))


__all__ = ["LimitRequest", "PauseRequest", "ResumeRequest"]
