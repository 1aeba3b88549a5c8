"""The replica's settings: ``FLEETGATE_*`` environment variables, or the matching flags.

``ReplicaSettings`` is everything ``fleetgate-replica`` reads (pydantic-settings, env prefix
``FLEETGATE_``; durations are seconds). ``BreakerSettings`` (prefix ``FLEETGATE_BREAKER_``)
configures the default circuit breaker and how often the pool follows it. Every value is checked
when the settings are built, so a bad one stops the replica before it starts anything:
``load_settings`` turns the first problem into a ``ConfigError`` with one readable line.

``settings_table(cls)`` prints a settings class as a Markdown table (the README's configuration
section is generated from it by ``scripts/gen_config_docs.py``).
"""

from __future__ import annotations

import inspect
import itertools
import os
import socket
from collections.abc import Mapping
from typing import Any, Final

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.crc import key_slot

from replica.contract import Keys, validate_fleet, validate_replica_id
from replica.contract.selectors import parse_labels
from replica.contract.urls import REDIS_SCHEMES, check_redis_url, parse_redis_url
from replica.control.options import CONTROL_LOSS_MODES, ControlLossMode
from replica.errors import ConfigError
from replica.service.labels import canonical_labels, read_labels_file

LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def default_replica_id() -> str:
    """The host name plus the process id (in Kubernetes set FLEETGATE_REPLICA_ID to the pod name)."""
    host = "".join(c if c.isalnum() or c in "_.-" else "-" for c in socket.gethostname())
    return f"{host.strip('-.') or 'replica'}-{os.getpid()}"


def _controller_default(name: str) -> float:
    """A default of ``FleetController`` (one place decides it: the controller)."""
    from replica.control.controller import FleetController

    return float(inspect.signature(FleetController).parameters[name].default)


class ReplicaSettings(BaseSettings):
    """Every ``FLEETGATE_*`` setting of a replica (unknown ones are ignored: the coordinator
    shares the prefix)."""

    model_config = SettingsConfigDict(env_prefix="FLEETGATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Where the fleet lives: redis://, rediss://, unix://, or Sentinel and Cluster URLs (redis+sentinel://, redis+cluster://: see Redis URLs)."""
    fleet: str = "default"
    """The fleet this replica belongs to: [a-z0-9][a-z0-9_.-]{0,62}."""
    replica_id: str = Field(
        default_factory=default_replica_id, json_schema_extra={"doc_default": "host name-pid"}
    )
    """This replica's id (default: host name + "-" + pid; in Kubernetes the pod name)."""
    host: str = "127.0.0.1"
    """Where the HTTP side (probes, admin, metrics) listens."""
    port: int = Field(default=8000, ge=0, le=65535)
    """The HTTP port (0: any free port, logged at start)."""
    http_header_timeout: float = Field(default=10.0, gt=0, le=3600)
    """Seconds a client of the HTTP side has to send a whole request (line, headers, body) once
    its connection opens or its last response is sent; past that the connection is closed."""
    http_max_connections: int = Field(default=256, ge=1, le=100_000)
    """HTTP connections open at once; one more is answered 503 and closed before it is read."""
    labels: str = ""
    """This replica's labels, "zone=eu-west-1a,version=1.4.2" (Kubernetes label rules): a hold
    with a selector (pause --select) holds this replica only when they match. In the record."""
    labels_file: str | None = None
    """A file of labels read at start, one key="value" a line (a Kubernetes downwardAPI volume of
    metadata.labels); FLEETGATE_LABELS wins for a key in both."""
    handler: str | None = None
    """The work handler, "module:function" naming an `async def handle(item)` (also --handler)."""
    workers: int = Field(default=4, ge=1, le=10_000)
    """Items handled at once."""
    queue_size: int | None = Field(default=None, ge=1, le=100_000)
    """Items a replica holds at once, in flight plus waiting (the prefetch bound; default: workers).
    As many again may be waiting out a retry backoff."""
    item_timeout: float | None = Field(default=None, gt=0)
    """Seconds an item may run before it is cancelled and counts as failed (default: none)."""
    poll_interval: float = Field(default=1.0, gt=0, le=3600)
    """Seconds between reads of the fleet state (the safety net under pub/sub)."""
    heartbeat_interval: float = Field(
        default_factory=lambda: _controller_default("heartbeat_interval"), gt=0, le=3600
    )
    """Seconds between writes of this replica's record."""
    pause_timeout: float = Field(default=30.0, gt=0, le=86_400)
    """Seconds a pause (and the SIGTERM drain) waits for in-flight items."""
    control_loss: ControlLossMode = "keep"
    """What a replica does when it cannot read the fleet state: keep (fail-static: it keeps the
    state it applied; right when Redis is shared and an outage is fleet-wide) or hold (after
    control_loss_after without a read it holds its pool, source control-plane, until it reads
    the state again; right when one replica can be cut off alone while the fleet is paused)."""
    control_loss_after: float | None = Field(
        default=None, gt=0, le=86_400, json_schema_extra={"doc_default": "3 × poll_interval"}
    )
    """Seconds without a read of the fleet state before control_loss=hold holds the pool
    (longer than poll_interval)."""
    fault_fatal_after: float = Field(default=300.0, gt=0, le=86_400)
    """Seconds a controller loop may keep failing on an error it did not expect (the pool held
    by control-plane meanwhile, /readyz saying why) before /healthz fails too, so that the
    orchestrator restarts a replica that cannot recover."""
    admin_token: SecretStr | None = None
    """Bearer token for the admin routes (/pool*); required unless insecure_no_auth."""
    insecure_no_auth: bool = False
    """Serve the admin routes without a token (also --insecure-no-auth). Never in production."""
    ready_when_fleet_paused: bool = False
    """Keep /readyz at 200 while only the fleet's pause holds the pool. A failing readiness
    stalls a Kubernetes rollout (and node drains under a PodDisruptionBudget) for as long as the
    fleet is paused; passing it keeps rollouts moving, at the price of dashboards and load
    balancers counting paused pods as ready (the pause still shows in /pool and the metrics)."""
    max_retries: int = Field(default=3, ge=0, le=1000)
    """Failed runs of an item retried before it goes to the dead-letter stream (runs of the
    handler, on any replica; hand-offs between replicas are not runs)."""
    retry_backoff: float = Field(default=1.0, ge=0, le=3600)
    """Seconds before a failed item runs again; each further retry waits twice as long, up to
    retry_backoff_max, with jitter (between half and all of it). A waiting item is not in
    flight: it does not hold up a pause."""
    retry_backoff_max: float = Field(default=60.0, gt=0, le=86_400)
    """The longest wait before a retry, in seconds."""
    claim_idle: float = Field(default=30.0, gt=0, le=86_400)
    """Seconds an item may sit unrenewed with a silent replica before another one claims it
    (what a replica leaves at a clean stop is marked idle that long already, so the others
    claim it at their next sweep, within half that)."""
    stream: str | None = None
    """The work stream (default: fleetgate:{FLEET}:work)."""
    dead_letter_stream: str | None = None
    """Where items that failed max_retries + 1 times go (default: fleetgate:{FLEET}:dead)."""
    demo_item_seconds: float = Field(default=0.05, ge=0, le=3600)
    """How long replica.demo:sleep (and :flaky) take per item."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING, ERROR or CRITICAL."""

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        # one check for both sides; its message shows the URL with the password redacted
        return check_redis_url(value, REDIS_SCHEMES)

    @field_validator("fleet")
    @classmethod
    def _fleet(cls, value: str) -> str:
        return validate_fleet(value)

    @field_validator("replica_id")
    @classmethod
    def _replica_id(cls, value: str) -> str:
        return validate_replica_id(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: str) -> str:
        return canonical_labels(value)

    @model_validator(mode="after")
    def _labels_file(self) -> ReplicaSettings:
        if self.labels_file:
            self._file_labels = read_labels_file(self.labels_file)
        return self

    @field_validator("handler")
    @classmethod
    def _handler(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return value.strip()

    @field_validator("admin_token", mode="before")
    @classmethod
    def _blank_token(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("stream", "dead_letter_stream")
    @classmethod
    def _stream(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if len(value) > 512 or not value.isprintable() or " " in value:
            raise ValueError("a stream key is 1 to 512 printable characters without spaces")
        return value

    @field_validator("control_loss", mode="before")
    @classmethod
    def _control_loss(cls, value: Any) -> Any:
        mode = value.strip().lower() if isinstance(value, str) else value
        if mode not in CONTROL_LOSS_MODES:
            raise ValueError(f"must be {' or '.join(CONTROL_LOSS_MODES)}")
        return mode

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level

    @model_validator(mode="after")
    def _token_or_insecure(self) -> ReplicaSettings:
        if self.admin_token is None and not self.insecure_no_auth:
            raise ValueError(
                "FLEETGATE_ADMIN_TOKEN is not set: the admin routes need a token "
                "(or start with --insecure-no-auth to serve them without one)"
            )
        return self

    @model_validator(mode="after")
    def _loss_after_poll(self) -> ReplicaSettings:
        after = self.control_loss_after
        if after is not None and after <= self.poll_interval:
            raise ValueError(
                f"FLEETGATE_CONTROL_LOSS_AFTER ({after:g} s) must be longer than "
                f"FLEETGATE_POLL_INTERVAL ({self.poll_interval:g} s): the pool would be held "
                "between two reads of the fleet state"
            )
        return self

    @model_validator(mode="after")
    def _streams_in_the_fleets_slot(self) -> ReplicaSettings:
        # on a cluster the work, dead-letter and runs writes share MULTIs and the fleet's slot
        if parse_redis_url(self.redis_url).topology != "cluster":
            return self
        slot = key_slot(self.keys.state.encode())
        for name, key in (("STREAM", self.stream), ("DEAD_LETTER_STREAM", self.dead_letter_stream)):
            if key is not None and key_slot(key.encode()) != slot:
                raise ValueError(
                    f"FLEETGATE_{name} {key!r} is not in the fleet's hash slot, which a Redis "
                    f"Cluster needs: put {{{self.fleet}}} in its name"
                )
        return self

    # -- derived

    _file_labels: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def label_map(self) -> dict[str, str]:
        """The labels: the file's, then FLEETGATE_LABELS over them."""
        return {**self._file_labels, **parse_labels(self.labels)}

    @property
    def keys(self) -> Keys:
        return Keys(self.fleet)

    @property
    def capacity(self) -> int:
        """Items held at once (in flight plus waiting): queue_size, default workers."""
        return self.queue_size if self.queue_size is not None else self.workers

    @property
    def work_stream(self) -> str:
        return self.stream or self.keys.work

    @property
    def dead_stream(self) -> str:
        return self.dead_letter_stream or self.keys.dead

    @property
    def runs_key(self) -> str:
        """The hash counting each work entry's handler runs."""
        return self.keys.runs

    def token(self) -> str | None:
        return None if self.admin_token is None else self.admin_token.get_secret_value()


class BreakerSettings(BaseSettings):
    """The default circuit breaker (``replica.service.breaker.AsyncCircuitBreaker()``) and how often the
    pool follows a handler's breaker."""

    model_config = SettingsConfigDict(env_prefix="FLEETGATE_BREAKER_", extra="ignore")

    fail_max: int = Field(default=5, ge=1, le=100_000)
    """Consecutive failures that open the breaker."""
    reset_timeout: float = Field(default=30.0, gt=0, le=86_400)
    """Seconds the breaker stays open before it lets one probe call through (half-open)."""
    check_interval: float = Field(default=1.0, gt=0, le=3600)
    """Seconds between the pool's looks at the breaker (follow_breaker's `every`)."""


def describe_error(exc: ValidationError, env_prefix: str = "FLEETGATE_") -> str:
    """The first problem of a ValidationError as one line naming the environment variable."""
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    msg = str(first.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if not loc:
        return msg
    name = env_prefix + loc[0].upper()
    value = first.get("input")
    hidden = (
        "token" in loc[0] or "url" in loc[0] or isinstance(value, dict) or str(value)[:40] in msg
    )  # a URL's error shows it redacted already: never the raw value, password and all
    shown = "" if hidden else f" (got {str(value)[:60]!r})"
    return f"{name}: {msg}{shown}"


def load_settings(overrides: Mapping[str, Any] | None = None) -> ReplicaSettings:
    """Settings from the environment, with ``overrides`` (flags) on top. Raises ``ConfigError``
    with one line for the first bad value."""
    values = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        return ReplicaSettings(**values)
    except ValidationError as exc:
        raise ConfigError(describe_error(exc)) from None


def load_breaker_settings() -> BreakerSettings:
    """Breaker settings from the environment; raises ``ConfigError`` with one line."""
    try:
        return BreakerSettings()
    except ValidationError as exc:
        raise ConfigError(describe_error(exc, "FLEETGATE_BREAKER_")) from None


# ---------------------------------------------------------------------------- docs


def _default_text(info: FieldInfo) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "doc_default" in extra:
        return f"({extra['doc_default']})"
    default = info.get_default(call_default_factory=True, validated_data={})
    if default is None:
        return "(none)"
    if isinstance(default, bool):
        return "true" if default else "false"
    return f"`{default}`"


def settings_table(cls: type[BaseSettings]) -> str:
    """A Markdown table of a settings class: variable, default, meaning (from the field docs)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    docs = field_docs(cls)
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, info in cls.model_fields.items():
        text = (info.description or docs.get(name, "")).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{prefix}{name.upper()}` | {_default_text(info)} | {text} |")
    return "\n".join(rows)


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under each field (``x: int = 1`` then ``\"\"\"doc\"\"\"``)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        if not tree.body or not isinstance(tree.body[0], ast.ClassDef):
            continue
        body = tree.body[0].body
        for node, following in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


__all__ = [
    "BreakerSettings",
    "ReplicaSettings",
    "default_replica_id",
    "describe_error",
    "load_breaker_settings",
    "load_settings",
    "settings_table",
]
