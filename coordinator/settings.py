"""The coordinator's settings: ``FLEETGATE_*`` environment variables (pydantic-settings).

One object for the CLI and the HTTP server. Durations accept seconds or text ("30m", "90s").
Tokens are ``SecretStr`` so they never show in a repr or a log line. The rule for what an
operator types (a reason, a name) is the contract's (``replica.contract.check_reason``,
``check_by``), so the library, the CLI and the API apply the same one.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coordinator.durations import parse_duration
from replica.contract import validate_fleet
from replica.contract.urls import check_redis_url, redact_url


class CoordinatorSettings(BaseSettings):
    """Every ``FLEETGATE_*`` setting the coordinator reads (unknown ones are ignored: the
    replicas share the prefix)."""

    # a bad value is never echoed by pydantic's own message (a URL's password, a token)
    model_config = SettingsConfigDict(
        env_prefix="FLEETGATE_", extra="ignore", hide_input_in_errors=True
    )

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
    """A file of more named operators: JSON entries `{"name", "token", "role", "fleets"}`, or `name:token[:role[:a,b]]` lines (role admin or view). With `fleets` (the 4th field) the token acts on those fleets only: on another it gets 403."""
    metrics_auth: bool = False
    """Require a token on /metrics too (by default Prometheus scrapes it without one)."""

    max_pause: float = Field(default=1800.0)
    """Seconds after which a pause given no window (--for) is overdue: the metric and the warning."""
    slow_ack: float = Field(default=1.0, gt=0)
    """Seconds: a replica that took this long or longer to acknowledge the current version needs attention in `status` and the API (one poll interval by default: a healthy fleet's spread is milliseconds). The slowest are named whatever their lag."""
    overdue_log_interval: float = Field(default=60.0)
    """Seconds between the warnings `fleetgate serve` logs while a pause is overdue."""
    restore_interval: float = Field(default=5.0)
    """Seconds between the checks `fleetgate serve` makes for a state hash Redis lost (restored from the replicas)."""
    refresh_interval: float = Field(default=1.0)
    """Seconds `fleetgate serve` answers every API request, dashboard and scrape of a fleet from one read of its replica records (sooner when its state or its number of replicas changes)."""
    max_wait: float = Field(default=300.0)
    """The longest, in seconds, an API pause or resume with wait=true blocks."""
    min_replicas_ack: int = Field(default=1, ge=0, le=100)
    """Replicas of the Redis primary that must confirm a pause, a resume or a batch of enqueued items (WAIT) before it answers, when the primary has replicas connected, or is a Sentinel master that a failover may be demoting (0: do not wait). Not confirmed in time, the change stays made: the CLI exits 4, the API answers 202; `fleetgate enqueue` exits 4 naming the items written but unconfirmed (enqueue them again if they must not be lost) and those not sent; `Fleet.enqueue` raises BatchNotConfirmed (a NotConfirmed) with their ids."""
    min_replicas_timeout: float = Field(default=1.0, le=60.0)
    """Seconds a pause or resume waits for min_replicas_ack replicas to confirm it (at most 60)."""
    max_body: int = Field(default=64 * 1024, ge=4096, le=1024 * 1024)
    """The largest request body, in bytes, the API reads (4096 to 1048576): a larger one gets 413 before it is parsed."""

    host: str = "127.0.0.1"
    """Where `fleetgate serve` listens (also --host)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The port of `fleetgate serve` (also --port)."""
    http_header_timeout: float = Field(default=10.0, le=3600.0)
    """Seconds a client of `fleetgate serve` has to send a whole request (line, headers, body) once its connection opens or its last response is sent; past that the connection is closed."""
    http_max_connections: int = Field(default=256, ge=1, le=100_000)
    """HTTP connections `fleetgate serve` keeps open at once; one more is answered 503 and closed before it is read."""
    api_docs: bool = False
    """Serve the interactive API docs (/docs, /redoc: Swagger UI and ReDoc, loaded from a CDN into the dashboard's origin). Off by default; /openapi.json is always served."""

    webhook_urls: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), json_schema_extra={"doc_default": "none"}
    )
    """Where `fleetgate serve` POSTs every audit event and alert (see Notifications): http:// or https:// URLs, separated by commas or spaces."""
    webhook_format: Literal["json", "slack"] = "json"
    """The body of a notification: json (the event's fields and a sentence, `text`) or slack (a Slack-compatible `{"text", "blocks"}`)."""
    webhook_secret: SecretStr | None = None
    """The key of each notification's signatures (see Notifications): Standard Webhooks' `webhook-signature` (keyed with the secret's bytes, or with what a `whsec_<base64>` secret encodes) and, for one more release, `X-Fleetgate-Signature: sha256=<hex>` (unset: unsigned, with a warning at start)."""
    webhook_max_age: float = Field(default=3600.0)
    """Seconds a notification is retried after its event; past that it is given up (logged, counted). Older events a server finds when it starts are skipped."""

    @field_validator("redis_url")
    @classmethod
    def _valid_redis_url(cls, value: str) -> str:
        return check_redis_url(value)

    @field_validator("fleet")
    @classmethod
    def _valid_fleet(cls, value: str) -> str:
        return validate_fleet(value)

    @field_validator(
        "max_pause", "overdue_log_interval", "restore_interval", "refresh_interval", "max_wait",
        "webhook_max_age", "http_header_timeout", "slow_ack",
        "min_replicas_timeout", mode="before",
    )
    @classmethod
    def _duration(cls, value: Any) -> float:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return parse_duration(value, name="duration", minimum=0.01)
        raise ValueError("must be a duration like 90s, 30m, 2h or 1d")

    @field_validator("webhook_urls", mode="before")
    @classmethod
    def _webhook_urls(cls, value: Any) -> tuple[str, ...]:
        urls = value.replace(",", " ").split() if isinstance(value, str) else value
        if not isinstance(urls, list | tuple) or not all(isinstance(u, str) for u in urls):
            raise ValueError("must be URLs separated by commas or spaces")
        for i, url in enumerate(urls, 1):
            try:
                parts = urlsplit(url)
                parts.port  # noqa: B018 (raises on a port that is not a number)
            except ValueError:
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                # never the URL itself: a chat webhook's path is its secret
                raise ValueError(f"URL {i} is not an http:// or https:// URL with a host")
        return tuple(urls)

    @field_validator("admin_token", "view_token", "webhook_secret", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _standard_secret(cls, value: SecretStr | None) -> SecretStr | None:
        raw = None if value is None else value.get_secret_value()
        if raw is not None and raw.startswith("whsec_"):
            rest = raw.removeprefix("whsec_").rstrip("=")
            try:
                key = base64.b64decode(rest + "=" * (-len(rest) % 4), validate=True)
            except binascii.Error:
                key = b""
            if not key:  # never the secret itself in the message
                raise ValueError("a secret that starts with whsec_ must be base64 after it")
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


__all__ = ["CoordinatorSettings"]


def redact(url: str) -> str:
    """The URL without its password (``replica.contract.urls.redact_url``: one function for
    every URL either side prints or logs)."""
    return redact_url(url)
