"""``coordinator.cli.runner.ERROR_EXITS``: the one table of which error exits how, applied by
``exits`` to a command's Redis work (``run_with_fleet``) and to its checks before it (``schedule
add``'s cron, zone and dates)."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator.cli.exits import (
    EXIT_OUTCOME_UNKNOWN,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
)
from coordinator.cli.lightsettings import CommandSettings, LightSettings
from coordinator.cli.runner import exits
from replica.errors import ContractError, OutcomeUnknown, RedisMisconfigured

SETTINGS = LightSettings(redis_url="redis://:secret@db.example:6390/0", fleet="orders")


def _raised_through_exits(exc: Exception, settings: CommandSettings | None) -> CliError:
    with pytest.raises(CliError) as caught, exits(settings):
        raise exc
    return caught.value


@pytest.mark.parametrize(("exc", "status", "says"), [
    (RedisMisconfigured("NOSCRIPT: no scripting"), EXIT_USAGE,
     "cannot use Redis at redis://:***@db.example:6390/0: NOSCRIPT: no scripting"),
    (OutcomeUnknown("sent"), EXIT_OUTCOME_UNKNOWN, "the outcome is unknown (no answer came)"),
    (RedisConnectionError("Connection refused"), EXIT_UNREACHABLE,
     "cannot reach Redis at redis://:***@db.example:6390/0: Connection refused"),
    (TimeoutError(), EXIT_UNREACHABLE, "cannot reach Redis at redis://:***@db.example:6390/0: TimeoutError"),
    (ContractError("reason must be printable"), EXIT_USAGE, "reason must be printable"),
])
def test_each_error_of_the_table_exits_with_its_status_and_one_line(
    exc: Exception, status: int, says: str
) -> None:
    error = _raised_through_exits(exc, SETTINGS)
    assert error.code == status
    assert str(error).startswith(says) and "\n" not in str(error)
    assert "secret" not in str(error)


def test_a_check_before_any_redis_work_exits_2_without_settings() -> None:
    error = _raised_through_exits(ContractError("invalid cron expression '0 25 * * *'"), None)
    assert (error.code, str(error)) == (EXIT_USAGE, "invalid cron expression '0 25 * * *'")


def test_an_error_the_table_does_not_name_goes_on_as_it_is() -> None:
    with pytest.raises(KeyError), exits(SETTINGS):
        raise KeyError("not ours")


def test_an_outcome_unknown_says_what_cut_it_off() -> None:
    exc = OutcomeUnknown("sent")
    exc.__cause__ = RedisConnectionError("Connection reset by peer")
    error = _raised_through_exits(exc, SETTINGS)
    assert error.code == EXIT_OUTCOME_UNKNOWN
    assert str(error).startswith("the outcome is unknown (Connection reset by peer)")
