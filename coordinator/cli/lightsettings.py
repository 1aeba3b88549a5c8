"""The settings a reading command uses (``status``, ``history``, ``fleets``), read without
pydantic when nothing in them needs it.

``CoordinatorSettings`` (pydantic-settings) costs a reading command a third of its start-up.
Such a command uses six settings: the Redis URL, the fleet, ``max_pause``, ``slow_ack`` and
the two of ``min_replicas``. ``light_settings`` reads them from the command line and the
environment as ``CoordinatorSettings`` does (``FLEETGATE_`` names in any case, an option over
the environment, the same checks) and answers ``None``, for the caller to use
``CoordinatorSettings`` itself, whenever that could answer otherwise: another coordinator
setting set in the environment (which ``CoordinatorSettings`` would check: a bad one is exit
2), a value it does not accept as it is (``CoordinatorSettings`` then says why, in its own
words), or a variable set twice in different cases. So the settings, the messages and the exit
statuses stay those of ``CoordinatorSettings``; ``tests/test_cli_startup.py`` holds the
defaults and the names to its.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from coordinator.durations import InvalidDuration, parse_duration
from replica.contract.names import validate_fleet
from replica.contract.urls import check_redis_url
from replica.errors import ContractError

PREFIX: Final = "fleetgate_"

COORDINATOR_FIELDS: Final = frozenset({
    "redis_url", "fleet", "admin_token", "admin_name", "view_token", "view_name", "tokens_file",
    "metrics_auth", "max_pause", "slow_ack", "overdue_log_interval", "restore_interval",
    "refresh_interval", "max_wait", "min_replicas_ack", "min_replicas_timeout", "max_body", "host",
    "port", "http_header_timeout", "http_max_connections", "api_docs", "webhook_urls",
    "webhook_format", "webhook_secret", "webhook_max_age",
})
"""Every field of ``CoordinatorSettings`` (the test holds it to ``model_fields``)."""

_DIGITS: Final = re.compile(r"[0-9]{1,3}")


class CommandSettings(Protocol):
    """What a command's Redis work reads of the settings (``CoordinatorSettings`` or
    ``LightSettings``)."""

    @property
    def redis_url(self) -> str: ...
    @property
    def fleet(self) -> str: ...
    @property
    def min_replicas_ack(self) -> int: ...
    @property
    def min_replicas_timeout(self) -> float: ...


@dataclass(frozen=True)
class LightSettings:
    """The settings of a reading command, with ``CoordinatorSettings``'s defaults."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    fleet: str = "default"
    max_pause: float = 1800.0
    slow_ack: float = 1.0
    min_replicas_ack: int = 1
    min_replicas_timeout: float = 1.0


def light_settings(
    overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> LightSettings | None:
    """The settings from ``overrides`` (the options given) over ``environ`` (``os.environ``),
    or None when ``CoordinatorSettings`` must read them."""
    environ = os.environ if environ is None else environ
    given: dict[str, Any] = {}
    for key, value in environ.items():
        lower = key.lower()
        if not lower.startswith(PREFIX):
            continue
        name = lower[len(PREFIX):]
        if name not in COORDINATOR_FIELDS:
            continue  # the replicas' settings share the prefix: ignored, as extra="ignore"
        if name not in _READERS or name in given:
            return None
        given[name] = value
    given.update(overrides)
    values: dict[str, Any] = {}
    for name, value in given.items():
        reader = _READERS.get(name)
        if reader is None or type(value) is not str:
            return None
        try:
            values[name] = reader(value)
        except (ContractError, InvalidDuration, ValueError):
            return None
    return LightSettings(**values)


def _duration(value: str, *, above: float = 0.0, at_most: float | None = None) -> float:
    seconds = parse_duration(value, name="duration", minimum=0.01)
    if seconds <= above or (at_most is not None and seconds > at_most):
        raise ValueError(value)
    return seconds


def _replicas(value: str) -> int:
    if _DIGITS.fullmatch(value) is None or int(value) > 100:
        raise ValueError(value)
    return int(value)


_READERS: Final[dict[str, Callable[[str], Any]]] = {
    "redis_url": check_redis_url,
    "fleet": validate_fleet,
    "max_pause": _duration,
    "slow_ack": _duration,
    "min_replicas_ack": _replicas,
    "min_replicas_timeout": lambda value: _duration(value, at_most=60.0),
}


__all__ = ["COORDINATOR_FIELDS", "CommandSettings", "LightSettings", "light_settings"]
