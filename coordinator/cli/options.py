"""What every command reads from its command line: the global options, the settings they make,
and the checks of what an operator types (--reason, --by, --hold, --at, durations).

A bad value is a usage error: one line, exit status 2.

The options' types are read by typer when it builds the command line (``fleetgate --help``
too), so this module loads only typer at import; the checks load what they use when they run
(the settings load pydantic, the --at parser the contract).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from coordinator.cli.exits import usage
from coordinator.cli.output import plain

if TYPE_CHECKING:
    from datetime import datetime

    from pydantic import ValidationError

    from coordinator.cli.lightsettings import LightSettings
    from coordinator.settings import CoordinatorSettings

OPTION_OF: Final = {"redis_url": "--redis-url", "fleet": "--fleet", "host": "--host", "port": "--port"}
"""The command-line option of a setting (the others are FLEETGATE_* variables only)."""


@dataclass
class Globals:
    """The global options (``fleetgate --redis-url URL --fleet NAME COMMAND``)."""

    redis_url: str | None
    fleet: str | None

    def settings(self, **overrides: Any) -> CoordinatorSettings:
        """The settings: environment, then the global options, then the command's own."""
        from pydantic import ValidationError

        from coordinator.settings import CoordinatorSettings

        values = self._given(overrides)
        try:
            return CoordinatorSettings(**values)
        except ValidationError as exc:
            raise usage(describe(exc)) from None

    def read_settings(self, **overrides: Any) -> LightSettings | CoordinatorSettings:
        """The settings of a command that reads the fleet (``status``, ``history``, ``fleets``):
        the same as ``settings``, without pydantic when nothing given needs it
        (``coordinator.cli.lightsettings``)."""
        from coordinator.cli.lightsettings import light_settings

        light = light_settings(self._given(overrides))
        return light if light is not None else self.settings(**overrides)

    def _given(self, overrides: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        if self.redis_url is not None:
            values["redis_url"] = self.redis_url
        if self.fleet is not None:
            values["fleet"] = self.fleet
        values.update({k: v for k, v in overrides.items() if v is not None})
        return values


def describe(exc: ValidationError) -> str:
    """The first problem of the settings as one line naming the option (or the variable).
    It never shows the value given: a URL's message holds it redacted already."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    field = loc[0] if loc else ""
    where = OPTION_OF.get(field) or (f"FLEETGATE_{field.upper()}" if field else "settings")
    message = plain(str(first.get("msg", "invalid"))).removeprefix("Value error, ")
    return f"invalid {where}: {message}"


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (a stable, documented shape).")]
# The global options are accepted after the command too (without the environment: the global
# option reads it, and the command's own must not override an explicit global one with it).
UrlOption = Annotated[str | None, typer.Option("--redis-url", help="Redis URL (as the global option).")]
FleetOption = Annotated[str | None, typer.Option("--fleet", help="Fleet name (as the global option).")]
# pause and resume: one fleet, several (--fleet repeated) or every one (coordinator.cli.multi)
FleetsOption = Annotated[
    list[str] | None,
    typer.Option("--fleet", help="Fleet name (as the global option); repeat it for several."),
]
AllFleetsOption = Annotated[
    bool, typer.Option("--all-fleets", help="Every fleet on this Redis (asks first, or --yes).")
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (for --all-fleets).")]


def reason_option(value: str) -> str:
    """A checked --reason (the contract's rule, as the library and the API apply it), or a
    usage error (one line, exit 2)."""
    from replica.contract import check_reason

    try:
        return check_reason(value)
    except ValueError as exc:  # "reason must be ...": named as the option
        raise usage(f"--{exc}") from None


HoldOption = Annotated[
    str | None,
    typer.Option("--hold", help="The fleet hold (a name like a fleet's; default: 'default')."),
]


def hold_option(value: str | None) -> str | None:
    """A checked --hold (the rules of a fleet name), or a usage error."""
    if value is None:
        return None
    from replica.contract.holds import validate_hold
    from replica.errors import ContractError

    try:
        return validate_hold(value)
    except ContractError as exc:
        raise usage(f"--hold: {exc}") from None


def at_option(value: str | None) -> datetime | None:
    """The start time of --at (an ISO 8601 time or a duration from now, in the future), or a
    usage error."""
    if value is None:
        return None
    from coordinator.fleet.schedule import InvalidAt, parse_at
    from replica.contract import now_utc

    try:
        return parse_at(value, now_utc())
    except InvalidAt as exc:
        raise usage(str(exc)) from None


def duration_option(value: str | None, option: str, maximum: float | None = None) -> float | None:
    """Seconds in a duration option (None when not given), or a usage error."""
    if value is None:
        return None
    from coordinator.durations import InvalidDuration, parse_duration

    try:
        if maximum is None:
            return parse_duration(value, name=option)
        return parse_duration(value, name=option, maximum=maximum)
    except InvalidDuration as exc:
        raise usage(str(exc)) from None


def operator(by: str | None) -> str:
    """--by, checked, or the OS user."""
    if by is not None:
        from replica.contract import check_by

        try:
            return check_by(by)
        except ValueError as exc:
            raise usage(f"--{exc}") from None
    import getpass  # (and termios): only a change command asks who runs it

    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return f"uid-{os.getuid()}"


__all__ = [
    "AllFleetsOption",
    "FleetOption",
    "FleetsOption",
    "Globals",
    "HoldOption",
    "JsonOption",
    "UrlOption",
    "YesOption",
    "at_option",
    "describe",
    "duration_option",
    "hold_option",
    "operator",
    "reason_option",
]
