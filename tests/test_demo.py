"""`fleetgate demo`: a real fleet on one machine, with the checks it prints.

The demo on a Redis of its own is `make demo`, run by tests/test_readme.py.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest
import redis as syncredis

from coordinator.demo.localredis import free_port
from tests.procs import Processes

pytestmark = pytest.mark.slow


def _run_demo(
    processes: Processes, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "coordinator", "demo"]
    proc = processes.start(args, env={**os.environ, **env, "COLUMNS": "100"})
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_the_demo_pauses_a_real_fleet_mid_run_and_loses_nothing(
    redis_url: str, processes: Processes
) -> None:
    done = _run_demo(processes, {"FLEETGATE_REDIS_URL": redis_url})
    out = done.stdout
    assert done.returncode == 0, out[-2000:] + done.stderr[-2000:]
    assert "items started during the hold   0" in out
    assert "fleet paused by holds db, payments" in out
    assert "released hold db: fleet still paused by payments" in out
    assert "held after one hold released    yes" in out
    assert "released hold payments: fleet running" in out
    assert "completed                       600/600" in out
    assert "lost                            0" in out
    assert "all checks held" in out
    for i in (1, 2, 3):
        assert f"replica-{i}" in out
    assert "admin token (shown once)" in out
    # what the demo wrote on the shared Redis is gone with it
    fleet = re.search(r"fleet (demo-[0-9a-f]{6}) \(removed when the demo ends\)", out)
    assert fleet is not None, out[:2000]
    assert f"removed demo fleet {fleet.group(1)}" in out
    with syncredis.Redis.from_url(redis_url, decode_responses=True) as client:
        assert list(client.scan_iter(match=f"fleetgate:{{{fleet.group(1)}}}:*")) == []
        assert client.zscore("fleetgate:fleets", fleet.group(1)) is None


def test_the_demo_exits_one_with_one_line_when_redis_cannot_be_reached(
    processes: Processes,
) -> None:
    url = f"redis://demo:s3cret%23pw@127.0.0.1:{free_port()}/0"
    done = _run_demo(processes, {"FLEETGATE_REDIS_URL": url}, timeout=90)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fleetgate demo:"), done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret" not in done.stderr + done.stdout and "demo:***@" in done.stderr


def test_the_demo_refuses_a_url_that_can_never_work_with_one_line_and_exit_2(
    processes: Processes, redis_url: str
) -> None:
    done = _run_demo(processes, {"FLEETGATE_REDIS_URL": redis_url + "?socket_timout=1"},
                     timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "did you mean socket_timeout?" in lines[0], done.stderr


def test_demo_serve_keeps_the_dashboard_up_until_ctrl_c_then_stops_every_process(
    redis_url: str, processes: Processes
) -> None:
    proc = processes.start(
        [sys.executable, "-m", "coordinator", "demo", "--serve"],
        env={**os.environ, "FLEETGATE_REDIS_URL": redis_url, "COLUMNS": "100"},
        stderr=subprocess.STDOUT,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    try:
        url = fleet = None
        while url is None:
            line = lines.get(timeout=120)  # the demo's own output is the event we wait on
            seen.append(line)
            if m := re.search(r"fleet '([a-z0-9_.-]+)'", line):
                fleet = m.group(1)
            if m := re.search(r"dashboard: (http://\S+)", line):
                url = m.group(1)
        assert fleet is not None and "all checks held" in "".join(seen)
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "fleetgate" in page.text.lower()
        with syncredis.Redis.from_url(redis_url, decode_responses=True) as r:
            assert r.zcard(f"fleetgate:{{{fleet}}}:replicas") == 3
            proc.send_signal(signal.SIGINT)  # Ctrl-C, at its default disposition
            assert proc.wait(timeout=60) == 0, "".join(seen)
            # every replica stopped cleanly: each removed its own record on the way out
            assert r.zcard(f"fleetgate:{{{fleet}}}:replicas") == 0
        with pytest.raises(httpx.HTTPError):
            httpx.get(url, timeout=2)
    finally:
        processes.close()  # the pump reads to the end of the output, then stops
        pumper.join(timeout=10)
