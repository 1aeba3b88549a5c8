"""The coordinator's settings: ``FLEETGATE_*`` environment variables (pydantic-settings).

One object for the CLI and the HTTP server. Durations accept seconds or text ("30m", "90s").
Tokens are ``SecretStr`` so they never show in a repr or a log line. The limits on what an
operator types (``check_reason``) live here too, so the CLI and the API apply the same ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

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
    """FLEETGATE_REDIS_URL: where the fleet's state lives."""
    fleet: str = "default"
    """FLEETGATE_FLEET: the fleet this coordinator manages."""

    admin_token: SecretStr | None = None
    """FLEETGATE_ADMIN_TOKEN: Bearer token for writes (and reads)."""
    admin_name: str = "admin"
    """FLEETGATE_ADMIN_NAME: the operator name the audit trail records for the admin token."""
    view_token: SecretStr | None = None
    """FLEETGATE_VIEW_TOKEN: Bearer token for read-only access."""
    view_name: str = "viewer"
    """FLEETGATE_VIEW_NAME: the name of the view token's holder."""
    tokens_file: Path | None = None
    """FLEETGATE_TOKENS_FILE: more named operators, JSON or ``name:token[:role]`` lines."""
    metrics_auth: bool = False
    """FLEETGATE_METRICS_AUTH: require a token on ``/metrics`` too (Prometheus scrapes it without
    one by default)."""

    max_pause: float = Field(default=1800.0)
    """FLEETGATE_MAX_PAUSE: a pause with no window is overdue after this long (default 30m)."""
    overdue_log_interval: float = Field(default=60.0)
    """FLEETGATE_OVERDUE_LOG_INTERVAL: how often the watcher logs an overdue pause."""
    restore_interval: float = Field(default=5.0)
    """FLEETGATE_RESTORE_INTERVAL: how often the watcher rebuilds a state hash Redis lost."""
    max_wait: float = Field(default=300.0)
    """FLEETGATE_MAX_WAIT: the longest an HTTP ``wait=true`` pause or resume blocks."""

    host: str = "127.0.0.1"
    """FLEETGATE_HOST: where ``fleetgate serve`` listens."""
    port: int = Field(default=8080, ge=0, le=65535)
    """FLEETGATE_PORT."""

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
