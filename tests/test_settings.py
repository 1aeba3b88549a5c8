"""ReplicaSettings and BreakerSettings: names, defaults, validation, one-line errors, docs."""

from __future__ import annotations

import inspect
import os

import pytest

from replica.control.controller import FleetController
from replica.errors import ConfigError
from replica.service.settings import (
    BreakerSettings,
    ReplicaSettings,
    load_breaker_settings,
    load_settings,
    settings_table,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("FLEETGATE_"):
            monkeypatch.delenv(name)


def test_the_defaults_are_the_documented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_ADMIN_TOKEN", "t")
    s = load_settings()
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert (s.fleet, s.host, s.port, s.workers) == ("default", "127.0.0.1", 8000, 4)
    assert s.replica_id.endswith(f"-{os.getpid()}")
    assert s.queue_size is None and s.capacity == 4
    assert s.item_timeout is None and s.poll_interval == 1.0 and s.pause_timeout == 30.0
    heartbeat = inspect.signature(FleetController).parameters["heartbeat_interval"].default
    assert s.heartbeat_interval == heartbeat
    assert s.ready_when_fleet_paused is False and s.insecure_no_auth is False
    assert (s.max_retries, s.claim_idle, s.demo_item_seconds) == (3, 30.0, 0.05)
    assert (s.retry_backoff, s.retry_backoff_max) == (1.0, 60.0)
    assert s.runs_key == "fleetgate:{default}:runs"
    assert s.work_stream == "fleetgate:{default}:work"
    assert s.dead_stream == "fleetgate:{default}:dead"
    assert s.log_level == "INFO"
    assert s.control_loss == "keep" and s.control_loss_after is None


def test_environment_variables_set_every_value(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "REDIS_URL": "rediss://user:pw@redis.example:6380/2",
        "FLEET": "orders",
        "REPLICA_ID": "orders-7d9f-abcde",
        "HOST": "0.0.0.0",
        "PORT": "9000",
        "HANDLER": "replica.demo:sleep",
        "WORKERS": "8",
        "QUEUE_SIZE": "16",
        "ITEM_TIMEOUT": "2.5",
        "POLL_INTERVAL": "0.5",
        "HEARTBEAT_INTERVAL": "3",
        "PAUSE_TIMEOUT": "45",
        "ADMIN_TOKEN": "secret",
        "READY_WHEN_FLEET_PAUSED": "true",
        "MAX_RETRIES": "5",
        "RETRY_BACKOFF": "0.5",
        "RETRY_BACKOFF_MAX": "20",
        "CLAIM_IDLE": "60",
        "STREAM": "jobs",
        "DEAD_LETTER_STREAM": "jobs-dead",
        "DEMO_ITEM_SECONDS": "0.01",
        "LOG_LEVEL": "debug",
    }
    for key, value in env.items():
        monkeypatch.setenv(f"FLEETGATE_{key}", value)
    s = load_settings()
    assert s.fleet == "orders" and s.replica_id == "orders-7d9f-abcde" and s.port == 9000
    assert s.capacity == 16 and s.item_timeout == 2.5 and s.ready_when_fleet_paused is True
    assert s.work_stream == "jobs" and s.dead_stream == "jobs-dead" and s.log_level == "DEBUG"
    assert (s.max_retries, s.retry_backoff, s.retry_backoff_max) == (5, 0.5, 20.0)
    assert s.token() == "secret" and "secret" not in repr(s)


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_WORKERS", "8")
    s = load_settings({"workers": "2", "insecure_no_auth": True, "handler": None})
    assert s.workers == 2 and s.insecure_no_auth is True


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"redis_url": "http://localhost:6379"}, "FLEETGATE_REDIS_URL: must be a redis://"),
        ({"redis_url": "redis://"}, "FLEETGATE_REDIS_URL: has no host"),
        ({"fleet": "Orders!"}, "FLEETGATE_FLEET: invalid fleet name"),
        ({"replica_id": "has space"}, "FLEETGATE_REPLICA_ID: invalid replica id"),
        ({"workers": "0"}, "FLEETGATE_WORKERS"),
        ({"port": "70000"}, "FLEETGATE_PORT"),
        ({"pause_timeout": "-1"}, "FLEETGATE_PAUSE_TIMEOUT"),
        ({"item_timeout": "0"}, "FLEETGATE_ITEM_TIMEOUT"),
        ({"max_retries": "-1"}, "FLEETGATE_MAX_RETRIES"),
        ({"retry_backoff": "-0.5"}, "FLEETGATE_RETRY_BACKOFF"),
        ({"retry_backoff": "nan"}, "FLEETGATE_RETRY_BACKOFF"),
        ({"retry_backoff_max": "0"}, "FLEETGATE_RETRY_BACKOFF_MAX"),
        ({"log_level": "loud"}, "FLEETGATE_LOG_LEVEL: must be one of"),
        ({"stream": "has space"}, "FLEETGATE_STREAM"),
        ({"control_loss": "drop"}, "FLEETGATE_CONTROL_LOSS: must be keep or hold (got 'drop')"),
        ({"control_loss_after": "0"}, "FLEETGATE_CONTROL_LOSS_AFTER"),
        ({"control_loss_after": "soon"}, "FLEETGATE_CONTROL_LOSS_AFTER"),
        ({"control_loss_after": "1"}, "FLEETGATE_CONTROL_LOSS_AFTER (1 s) must be longer than "
                                      "FLEETGATE_POLL_INTERVAL (1 s)"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    overrides: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"insecure_no_auth": True, **overrides})
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("token", [None, "", "   "])
def test_admin_routes_without_a_token_need_the_explicit_insecure_flag(
    monkeypatch: pytest.MonkeyPatch, token: str | None
) -> None:
    if token is not None:
        monkeypatch.setenv("FLEETGATE_ADMIN_TOKEN", token)
    with pytest.raises(ConfigError, match="FLEETGATE_ADMIN_TOKEN is not set"):
        load_settings()
    assert load_settings({"insecure_no_auth": True}).token() is None


def test_a_bad_token_value_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"admin_token": ["hunter2"]})
    assert "FLEETGATE_ADMIN_TOKEN" in str(info.value) and "hunter2" not in str(info.value)


def test_breaker_settings_have_their_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (BreakerSettings().fail_max, BreakerSettings().reset_timeout) == (5, 30.0)
    monkeypatch.setenv("FLEETGATE_BREAKER_CHECK_INTERVAL", "0.25")
    assert load_breaker_settings().check_interval == 0.25
    monkeypatch.setenv("FLEETGATE_BREAKER_FAIL_MAX", "0")
    with pytest.raises(ConfigError, match="FLEETGATE_BREAKER_FAIL_MAX"):
        load_breaker_settings()


def test_the_markdown_table_lists_every_setting_with_its_default() -> None:
    table = settings_table(ReplicaSettings)
    lines = table.splitlines()
    assert lines[0] == "| Variable | Default | Meaning |"
    assert len(lines) == 2 + len(ReplicaSettings.model_fields)
    assert "| `FLEETGATE_WORKERS` | `4` | Items handled at once. |" in lines
    assert any(line.startswith("| `FLEETGATE_REPLICA_ID` | (host name-pid)") for line in lines)


async def test_control_loss_is_read_from_the_environment_and_reaches_the_controller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from replica.service.handlers import load_handler
    from replica.service.service import ReplicaService

    monkeypatch.setenv("FLEETGATE_CONTROL_LOSS", " HOLD ")
    monkeypatch.setenv("FLEETGATE_CONTROL_LOSS_AFTER", "4.5")
    s = load_settings({"insecure_no_auth": True})
    assert (s.control_loss, s.control_loss_after) == ("hold", 4.5)
    service = ReplicaService(s, load_handler("replica.demo:sleep"))
    try:
        controller = service.controller
        assert (controller.control_loss, controller.control_loss_after) == ("hold", 4.5)
    finally:
        await service.redis.aclose()
