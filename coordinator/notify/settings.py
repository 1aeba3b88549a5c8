"""What the notifier needs to know: ``NotifySettings``, from the coordinator's settings.

Four of these are ``FLEETGATE_*`` variables (``FLEETGATE_WEBHOOK_URLS``, ``_FORMAT``,
``_SECRET``, ``_MAX_AGE``); the rest are the notifier's own constants, settable here so tests
can shrink them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from coordinator.settings import CoordinatorSettings

GROUP: Final = "fleetgate-notify"
"""The consumer group of the notifiers on the audit and events streams."""

FORMATS: Final = ("json", "slack")


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """How the notifier reads, delivers and retries."""

    urls: tuple[str, ...]
    format: str = "json"
    """``json`` or ``slack``."""
    secret: bytes | None = field(default=None, repr=False)
    """The HMAC-SHA256 key of ``X-Fleetgate-Signature`` (None: requests go unsigned)."""
    max_age: float = 3600.0
    """Seconds after its event that a notification is still tried; older ones are given up."""
    timeout: float = 10.0
    """Seconds one HTTP attempt may take, connecting included."""
    backoff: float = 1.0
    """Seconds before the first retry; each further one waits twice as long (with jitter)."""
    backoff_max: float = 300.0
    """The longest wait between two attempts."""
    claim_idle: float = 60.0
    """Seconds an entry may sit unrenewed with a silent notifier before another one claims it.
    A notifier renews the entries it holds every third of this."""
    block: float = 2.0
    """Seconds one XREADGROUP waits for new entries."""
    batch: int = 50
    """Entries read at once."""
    max_in_flight: int = 1000
    """Entries held at once (delivering or retrying): past that the notifier reads no more."""
    group: str = GROUP

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}")
        for value in (self.max_age, self.timeout, self.backoff, self.backoff_max,
                      self.claim_idle, self.block):
            if not value > 0:
                raise ValueError("durations must be positive")

    @classmethod
    def from_coordinator(cls, settings: CoordinatorSettings) -> NotifySettings:
        secret = settings.webhook_secret
        return cls(
            urls=tuple(settings.webhook_urls),
            format=settings.webhook_format,
            secret=None if secret is None else secret.get_secret_value().encode(),
            max_age=settings.webhook_max_age,
        )


def receiver_label(url: str) -> str:
    """What logs and metrics say of a receiver: its scheme, host and port, never its path or
    credentials (a chat webhook's path is its secret)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}"


__all__ = ["FORMATS", "GROUP", "NotifySettings", "receiver_label"]
