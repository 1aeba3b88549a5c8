"""Durations: what operators type is read exactly, anything else is refused with a clear line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.durations import MAX_DURATION_S, format_age, parse_duration
from replica.errors import ConfigError, InvalidDuration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        ("4m12s", 252.0),
        ("1500ms", 1.5),
        ("45", 45.0),
        ("2.5m", 150.0),
        (" 10S ", 10.0),
        (60, 60.0),
        (1.5, 1.5),
    ],
)
def test_a_duration_is_read_in_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "m", "1h-5m", "--5", "1e400", "nan", "inf", "s10"])
def test_unreadable_text_raises_invalid_duration_naming_the_option(text: str) -> None:
    with pytest.raises(InvalidDuration, match="--for must be a"):
        parse_duration(text, name="--for")


@pytest.mark.parametrize("value", ["0s", "500ms", "0", -5, "8d", 604801, "2w"])
def test_durations_outside_one_second_to_seven_days_are_refused(value: str | int) -> None:
    with pytest.raises(InvalidDuration, match="between 1s and 7d00h"):
        parse_duration(value)


def test_the_bounds_themselves_are_accepted() -> None:
    assert parse_duration("1s") == 1.0
    assert parse_duration("7d") == MAX_DURATION_S


def test_invalid_duration_is_a_config_error_and_a_value_error() -> None:
    with pytest.raises(ConfigError):
        parse_duration("x")
    with pytest.raises(ValueError):
        parse_duration(True)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (0.25, "0.2s"),
        (12.9, "12s"),
        (252, "4m12s"),
        (3600 + 180, "1h03m"),
        (86400 * 2 + 3600 * 5 + 59, "2d05h"),
        (None, "-"),
        (-1, "-"),
        (float("nan"), "-"),
    ],
)
def test_ages_are_shown_in_at_most_two_units(seconds: float | None, shown: str) -> None:
    assert format_age(seconds) == shown


@given(st.integers(min_value=1, max_value=604800))
def test_a_whole_number_of_seconds_reads_back_from_its_own_age_when_under_an_hour(n: int) -> None:
    if n < 3600:
        assert parse_duration(format_age(n)) == n
    else:
        assert parse_duration(format_age(n)) <= n


@given(st.text(max_size=20))
def test_any_text_either_parses_in_bounds_or_raises_invalid_duration(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except InvalidDuration:
        return
    assert 1.0 <= seconds <= MAX_DURATION_S
