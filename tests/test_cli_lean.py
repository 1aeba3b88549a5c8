"""The reading commands start without pydantic, and answer as if they had it.

``coordinator.cli.coercion`` coerces typer's plain option values itself and
``coordinator.cli.lightsettings`` reads a reading command's settings itself: each is held here
to the answer of what it stands in for (typer's pydantic coercion, ``CoordinatorSettings``),
value for value, message for message. ``tests/test_cli_startup.py`` checks that they keep
pydantic out of ``fleetgate status``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError
from typer.main import get_command

from coordinator.cli.app import app
from coordinator.cli.coercion import LeanCoercion
from coordinator.cli.lightsettings import COORDINATOR_FIELDS, LightSettings, light_settings
from coordinator.settings import CoordinatorSettings

typer_coercion = pytest.importorskip("typer._coercion", reason="typer < 0.29 coerces with click")

SAMPLES: tuple[Any, ...] = (
    None, "", "x", "redis://h:1/0", " 1", "1 ", "0", "1", "5", "007", "20", "100", "1000",
    "1001", "65535", "65536", "0.1", "0.05", "0.10", "3600", "3600.0", "3600.5", "1.5", "1e3",
    "-1", "+1", "abc", "2.", ".5", "1_000", "٣", "9" * 16, 1.0, 0.1, 20, 1000, 0, 1, True,
    False, ("a", "b"), ["a"], (),
)


def _outcome(coercion: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        result = coercion.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # typer's BadParameter (or another error): compared as said
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return f"raises {type(exc).__name__}", message
    return type(result).__name__, result


def _every_param() -> list[tuple[str, Any, Any]]:
    from typer._click import Context

    group = get_command(app)
    found = []
    for name, command in [("fleetgate", group), *getattr(group, "commands", {}).items()]:
        ctx = Context(command, info_name=name)
        found += [(f"{name} {p.name}", p, ctx) for p in command.get_params(ctx)]
    return found


def test_every_options_coercion_answers_as_typers_does() -> None:
    params = _every_param()
    status = [p for where, p, _ in params if where.startswith("status ")]
    assert len(params) > 40 and len(status) > 5
    assert all(isinstance(p._runtime_param, LeanCoercion) for p in status)
    differ = []
    for where, param, ctx in params:
        typers = typer_coercion.build_runtime_param(param.type_descriptor)
        for value in SAMPLES:
            lean, expected = _outcome(LeanCoercion(), value, param, ctx), _outcome(typers, value, param, ctx)
            if lean != expected:
                differ.append((where, value, lean, expected))
    assert differ == []


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for key in list(os.environ):
        if key.lower().startswith("fleetgate_"):
            monkeypatch.delenv(key)
    return monkeypatch


def test_the_light_settings_know_every_coordinator_setting_and_its_defaults(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert set(CoordinatorSettings.model_fields) == COORDINATOR_FIELDS
    full, light = CoordinatorSettings(), light_settings({})
    assert light == LightSettings()
    for field in dataclasses.fields(LightSettings):
        assert getattr(light, field.name) == getattr(full, field.name), field.name


# (environment, options given, whether the light reader answers)
CASES: list[tuple[dict[str, str], dict[str, Any], bool]] = [
    ({}, {}, True),
    ({"FLEETGATE_REDIS_URL": "redis://h:7000/2"}, {}, True),
    ({"FLEETGATE_REDIS_URL": "  rediss://:pw@h:7000/2  "}, {}, True),
    ({"FLEETGATE_REDIS_URL": "redis+sentinel://a:26379,b:26379/mymaster"}, {}, True),
    ({"FLEETGATE_REDIS_URL": "redis://h:1/0"}, {"redis_url": "redis://other:2/1"}, True),
    ({"fleetgate_fleet": "orders"}, {}, True),
    ({"FLEETGATE_FLEET": "orders"}, {"fleet": "billing"}, True),
    ({"FLEETGATE_SLOW_ACK": "2s", "FLEETGATE_MAX_PAUSE": "30m"}, {}, True),
    ({"FLEETGATE_SLOW_ACK": "0.5", "FLEETGATE_MAX_PAUSE": "90"}, {}, True),
    ({"FLEETGATE_MIN_REPLICAS_ACK": "0", "FLEETGATE_MIN_REPLICAS_TIMEOUT": "60"}, {}, True),
    ({"FLEETGATE_MIN_REPLICAS_ACK": "100", "FLEETGATE_MIN_REPLICAS_TIMEOUT": "1m"}, {}, True),
    ({"FLEETGATE_POLL_INTERVAL": "not a number", "FLEETGATE_REPLICA_ID": "x"}, {}, True),
    ({"FLEETGATE_ADMIN_TOKEN": "secret"}, {}, False),
    ({"FLEETGATE_PORT": "abc"}, {}, False),
    ({"FLEETGATE_WEBHOOK_URLS": "ftp://x"}, {}, False),
    ({"FLEETGATE_FLEET": "bad name!"}, {}, False),
    ({}, {"fleet": ""}, False),
    ({"FLEETGATE_FLEET": ""}, {}, False),
    ({"FLEETGATE_REDIS_URL": "http://h:1/0"}, {}, False),
    ({"FLEETGATE_REDIS_URL": ""}, {}, False),
    ({}, {"redis_url": "redis://h:notaport/0"}, False),
    ({"FLEETGATE_SLOW_ACK": "0"}, {}, False),
    ({"FLEETGATE_MAX_PAUSE": "soon"}, {}, False),
    ({"FLEETGATE_MIN_REPLICAS_ACK": "101"}, {}, False),
    ({"FLEETGATE_MIN_REPLICAS_ACK": "1.0"}, {}, False),
    ({"FLEETGATE_MIN_REPLICAS_ACK": " 1"}, {}, False),
    ({"FLEETGATE_MIN_REPLICAS_TIMEOUT": "61"}, {}, False),
    ({"FLEETGATE_FLEET": "a", "fleetgate_fleet": "b"}, {}, False),
    ({}, {"port": 8080}, False),
]


@pytest.mark.parametrize(("environ", "given", "answers"), CASES)
def test_the_light_settings_are_the_coordinators_or_none(
    clean_env: pytest.MonkeyPatch, environ: dict[str, str], given: dict[str, Any], answers: bool
) -> None:
    for key, value in environ.items():
        clean_env.setenv(key, value)
    light = light_settings(given)
    assert (light is not None) == answers
    try:
        full: CoordinatorSettings | None = CoordinatorSettings(**given)
    except ValidationError:
        full = None
    if light is not None:
        assert full is not None
        for field in dataclasses.fields(LightSettings):
            assert getattr(light, field.name) == getattr(full, field.name), field.name
