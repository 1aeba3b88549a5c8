"""`fleetgate serve` as an orchestrator runs it: up on a port, down on SIGTERM with status 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from coordinator.demo.localredis import free_port
from coordinator.settings import redact
from coordinator.web.server import JsonFormatter

pytestmark = pytest.mark.slow


def _wait_healthy(proc: subprocess.Popen[str], port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # another process's port: no event to wait on
    raise AssertionError("fleetgate serve did not answer /healthz")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_shuts_down_gracefully_on_a_signal_and_exits_zero(redis_url: str, sig: int) -> None:
    port = free_port()
    env = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_ADMIN_TOKEN": "t" * 24}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_healthy(proc, port)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err


def test_a_password_in_the_redis_url_never_reaches_a_log_line() -> None:
    assert redact("redis://replica:s3cret@redis:6379/0") == "redis://replica:***@redis:6379/0"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_json_log_lines_carry_the_extra_fields() -> None:
    import json
    import logging

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "overdue %s", ("orders",), None)
    record.fleet = "orders"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "overdue orders" and line["fleet"] == "orders"
    assert line["level"] == "WARNING"
