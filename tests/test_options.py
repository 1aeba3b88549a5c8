"""replica.control.options: a controller's options, their defaults and derived values."""

from __future__ import annotations

import dataclasses
import inspect
import socket

import pytest

from replica import FleetController
from replica.control.options import DEFAULTS, ControllerSettings
from replica.errors import ConfigError


def test_the_controllers_keyword_arguments_default_to_the_settings_defaults() -> None:
    parameters = inspect.signature(FleetController).parameters
    for field in dataclasses.fields(ControllerSettings):
        default = parameters[field.name].default
        if field.name == "labels":  # a mapping given, kept as sorted pairs; None is no labels
            assert default is None and DEFAULTS.labels == (), field.name
            continue
        assert default == getattr(DEFAULTS, field.name), field.name


@pytest.mark.parametrize("name", ["poll_interval", "heartbeat_interval"])
@pytest.mark.parametrize("value", [0, -1.0])
def test_intervals_that_are_not_positive_are_refused(name: str, value: float) -> None:
    with pytest.raises(ConfigError, match=name):
        ControllerSettings(**{name: value})


def test_the_host_and_the_io_timeout_are_derived_when_not_given() -> None:
    assert DEFAULTS.host is None and DEFAULTS.io_timeout is None
    resolved = DEFAULTS.resolved()
    assert resolved.host == socket.gethostname() and resolved.io_timeout == 2.0
    slow = ControllerSettings(poll_interval=3).resolved()
    assert slow.io_timeout == 6.0  # two polls
    assert isinstance(slow.poll_interval, float)
    given = ControllerSettings(host="pod-host", io_timeout=0.5).resolved()
    assert given.host == "pod-host" and given.io_timeout == 0.5
    assert given.resolved() == given


def test_control_loss_defaults_to_keep_after_three_polls() -> None:
    assert DEFAULTS.control_loss == "keep" and DEFAULTS.control_loss_after is None
    assert DEFAULTS.resolved().control_loss_after == 3.0
    assert ControllerSettings(poll_interval=0.5).resolved().control_loss_after == 1.5
    given = ControllerSettings(control_loss="hold", control_loss_after=7).resolved()
    assert given.control_loss == "hold" and given.control_loss_after == 7.0


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"control_loss": "drop"}, "control_loss must be keep or hold"),
        ({"control_loss_after": 0}, "control_loss_after"),
        ({"control_loss_after": 1.0}, "must be longer than poll_interval"),
        ({"poll_interval": 2.0, "control_loss_after": 1.5}, "must be longer than poll_interval"),
    ],
)
def test_a_bad_control_loss_option_is_refused(options: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ControllerSettings(**options)  # type: ignore[arg-type]
