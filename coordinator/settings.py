"""The coordinator's settings: ``FLEETGATE_*`` environment variables (pydantic-settings).

One object for the CLI and the HTTP server. Durations accept seconds or text ("30m", "90s").
Tokens are ``SecretStr`` so they never show in a repr or a log line. The limits on what an
operator types (``check_reason``) live here too, so the CLI and the API apply the same ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from coordinator.durations import parse_duration
from replica.contract import validate_fleet

MAX_REASON: Final = 500
"""The longest pause reason (characters)."""


def check_reason(reason: str) -> str:
    """``reason`` without surrounding blanks: 1 to 500 printable characters, else ``ValueError``."""
    value = reason.strip() if isinstance(reason, str) else ""
    if not value or len(value) > MAX_REASON or not value.isprintable():
        raise ValueError(f"reason must be 1 to {MAX_REASON} printable characters")
    return value


class CoordinatorSettings(BaseSettings):
    """Every ``FLEETGATE_*`` setting the coordinator reads (unknown ones are ignored: the
    replicas share the prefix)."""

    model_config = SettingsConfigDict(env_prefix="FLEETGATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Where the fleet's state lives (also --redis-url)."""
    fleet: str = "default"
    """The fleet the CLI and the API act on (also --fleet)."""

    admin_token: SecretStr | None = None
    """Bearer token of the API for pauses and resumes (and reads); `fleetgate serve` refuses to start without one unless --insecure-no-auth."""
    admin_name: str = "admin"
    """The operator name the audit trail records for the admin token."""
    view_token: SecretStr | None = None
    """Bearer token of the API for reads only (a write with it gets 403)."""
    view_name: str = "viewer"
    """The name of the view token's holder."""
    tokens_file: Path | None = None
    """A file of more named operators: JSON, or `name:token[:role]` lines (role admin or view)."""
    metrics_auth: bool = False
    """Require a token on /metrics too (by default Prometheus scrapes it without one)."""

    max_pause: float = Field(default=1800.0)
    """Seconds after which a pause given no window (--for) is overdue: the metric and the warning."""
    overdue_log_interval: float = Field(default=60.0)
    """Seconds between the warnings `fleetgate serve` logs while a pause is overdue."""
    restore_interval: float = Field(default=5.0)
    """Seconds between the checks `fleetgate serve` makes for a state hash Redis lost (restored from the replicas)."""
    max_wait: float = Field(default=300.0)
    """The longest, in seconds, an API pause or resume with wait=true blocks."""

    host: str = "127.0.0.1"
    """Where `fleetgate serve` listens (also --host)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The port of `fleetgate serve` (also --port)."""

    @field_validator("fleet")
    @classmethod
    def _valid_fleet(cls, value: str) -> str:
        return validate_fleet(value)

    @field_validator("max_pause", "overdue_log_interval", "restore_interval", "max_wait", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return parse_duration(value, name="duration", minimum=0.01)
        raise ValueError("must be a duration like 90s, 30m, 2h or 1d")

    @field_validator("admin_token", "view_token", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("admin_name", "view_name")
    @classmethod
    def _name(cls, value: str) -> str:
        value = value.strip()
        if not value or len(value) > 100 or not value.isprintable():
            raise ValueError("an operator name is 1 to 100 printable characters")
        return value

    def secret(self, name: str) -> str | None:
        """The plain value of ``admin_token`` or ``view_token`` (None when unset)."""
        value: SecretStr | None = getattr(self, name)
        return None if value is None else value.get_secret_value()


__all__ = ["MAX_REASON", "CoordinatorSettings", "check_reason"]


def redact(url: str) -> str:
    """The URL without its password."""
    try:
        parts = urlsplit(url)
        if parts.password:
            netloc = parts.netloc.rsplit("@", 1)[1]
            user = parts.username or ""
            parts = parts._replace(netloc=f"{user}:***@{netloc}")
        return urlunsplit(parts)
    except ValueError:
        return "<unreadable URL>"
