"""The bodies of the API's writes: ``PauseRequest`` and ``ResumeRequest``.

Strict models: a value of the wrong JSON type is refused, never coerced (``"wait": "yes"``,
``"for_seconds": true`` and ``"timeout": "5"`` are 422; a whole number is still a number of
seconds). NaN and Infinity (which Python's JSON parser lets through) are refused as not
finite. An object with more keys than the model has fields is refused as a whole, in one
error. A reason must be printable, which refuses a lone surrogate too. ``by`` is not accepted:
the audit trail names the token's operator.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from coordinator.durations import MAX_DURATION_S, MIN_DURATION_S
from replica.contract import MAX_REASON, MAX_STAGGER_S, check_optional_reason, check_reason

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _few_keys(data: Any, fields: dict[str, FieldInfo]) -> Any:
    """Refuse at once an object with more keys than the model has fields, before pydantic
    builds an error for each unknown one (200,000 keys took seconds of the event loop)."""
    if isinstance(data, dict) and len(data) > len(fields):
        raise ValueError(
            f"the body has {len(data)} fields; it takes at most {len(fields)}: {', '.join(fields)}"
        )
    return data


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
    """Pause the fleet. ``by`` is not accepted: it is the token's operator name."""

    reason: str = Field(min_length=1, max_length=MAX_REASON, description="Why (1 to 500 printable characters).")
    for_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_DURATION_S,
        description="The expected window; the pause is overdue after it.",
    )
    auto_resume: bool = Field(default=False, description="Resume by itself when the window ends.")
    wait: bool = Field(default=False, description="Block until every live replica is quiet.")
    timeout: float = _timeout()

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
        if self.auto_resume and self.for_seconds is None:
            raise ValueError("auto_resume needs for_seconds")
        return self


class ResumeRequest(_WriteBody):
    """Resume the fleet. ``by`` is not accepted: it is the token's operator name."""

    reason: str | None = Field(
        default=None, max_length=MAX_REASON,
        description="Why, for the audit trail (optional; 1 to 500 printable characters).",
    )
    stagger_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_STAGGER_S,
        description="Spread the replicas' resumes evenly over this window.",
    )
    wait: bool = Field(default=False, description="Block until every live replica is running.")
    timeout: float = _timeout()

    @field_validator("reason", mode="before")
    @classmethod
    def _printable(cls, value: Any) -> str | None:
        return check_optional_reason(value)  # before max_length: it applies to the stripped text


__all__ = ["PauseRequest", "ResumeRequest"]
