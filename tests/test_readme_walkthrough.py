"""The README's walkthrough runs as written: every `sh` block of the section, in order, in one
bash, against a real Redis and real ``fleetgate-replica`` processes.

Only what differs on a test machine is rewritten: the Redis URL (the test server), the fleet
name (unique per run) and the coordinator's port (a free one). Each block runs under
``set -euo pipefail`` and ends with a marker, so the test knows every command of every block
succeeded; then it checks what the commands printed and what they did to the fleet.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.demo.localredis import free_port
from tests.fleetkit import ROOT
from tests.procs import Processes

README = ROOT / "README.md"
BEGIN = "<!-- section:walkthrough -->"
END = "<!-- /section:walkthrough -->"
MARK = "@@block-done-"

pytestmark = pytest.mark.slow


def walkthrough_blocks(text: str | None = None) -> list[str]:
    """The ``sh`` blocks between the walkthrough markers, in order."""
    readme = text if text is not None else README.read_text(encoding="utf-8")
    section = readme[readme.index(BEGIN) + len(BEGIN) : readme.index(END)]
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", section, re.S | re.M)]


def script_for(blocks: list[str], redis_url: str, fleet: str, port: int) -> str:
    parts = ["set -euo pipefail"]
    for n, block in enumerate(blocks):
        body = (
            block.replace("redis://127.0.0.1:6379/0", redis_url)
            .replace("FLEETGATE_FLEET=orders", f"FLEETGATE_FLEET={fleet}")
            .replace("8080", str(port))
        )
        parts += [f"echo '@@block-start-{n}'", body, f"echo '{MARK}{n}'"]
    return "\n".join(parts) + "\n"


def test_the_walkthrough_has_commands_for_the_cli_the_api_and_cleanup() -> None:
    commands = "\n".join(walkthrough_blocks())
    for needed in (
        "fleetgate-replica", "fleetgate enqueue", "fleetgate status", "fleetgate pause",
        "--wait", "fleetgate resume", "fleetgate history", "fleetgate serve",
        "/api/fleet/pause", "/api/fleet/resume", "/metrics", "kill", "--hold", "--at",
        "--auto-resume",
    ):
        assert needed in commands, needed


def json_documents(text: str) -> list[Any]:
    """The JSON documents in ``text`` that start on a line of their own."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while (start := text.find("{", at)) >= 0:
        if start == 0 or text[start - 1] == "\n":
            doc, at = decoder.raw_decode(text, start)
            found.append(doc)
        else:
            at = start + 1
    return found


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def test_every_walkthrough_command_runs_against_real_replicas(
    redis_url: str, fleet_name: str, workdir: Path, processes: Processes
) -> None:
    blocks = walkthrough_blocks()
    script = script_for(blocks, redis_url, fleet_name, free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    # a process group of its own: the fixture kills whatever the script left behind (it ends
    # with `kill $(jobs -p)`)
    proc = processes.start(["bash", "-c", script], cwd=workdir, env=env)
    out, err = proc.communicate(timeout=100)
    logs = "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in workdir.glob("*.log")
    )
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}{logs}"
    for n in range(len(blocks)):
        assert f"{MARK}{n}" in out, f"block {n} did not finish:\n{out}\n{err}"

    def block_output(n: int) -> str:
        return out.split(f"@@block-start-{n}\n", 1)[1].split(f"{MARK}{n}", 1)[0]

    setup, cli_pause, cli_resume, api = (block_output(i) for i in range(4))
    assert "enqueued 3000 items" in setup
    assert setup.count(" running ") >= 3 and "RUNNING" in setup

    assert "paused by" in cli_pause and "'orders-db failover drill'" in cli_pause
    assert cli_pause.count(" yes ") == 3  # each replica's acknowledgement
    assert "PAUSED" in cli_pause and cli_pause.count(" quiet ") >= 3

    assert "resumed by" in cli_resume and "staggered over 3s" in cli_resume
    history = cli_resume[cli_resume.index("action"):]
    assert history.index("resume") < history.index("pause")  # newest first

    documents = json_documents(api)
    assert len(documents) == 3, api
    paused, status, resumed = documents
    assert paused["state"]["paused"] is True and paused["state"]["reason"] == "deploy 4.2"
    assert paused["state"]["by"] == "admin"  # the token's configured name
    assert paused["wait"]["ok"] is True and len(paused["wait"]["replicas"]) == 3
    assert set(status) == {"fleet", "state", "replicas", "summary"}
    assert status["summary"]["quiet"] == 3
    metrics = [line for line in api.splitlines() if line.startswith("fleetgate_fleet_pause")]
    assert any(line.startswith("fleetgate_fleet_pause_overdue{") and line.endswith(" 0.0") for line in metrics)
    assert resumed["state"]["paused"] is False and resumed["state"]["by"] == "admin"

    holds = next(block_output(i) for i, b in enumerate(blocks) if "--hold payments" in b)
    assert "added hold db; fleet" in holds and "still paused by db, payments" in holds
    assert "refused with exit status 2" in holds
    assert "has 2 holds (db, payments)" in err  # the refusal's one line, on stderr
    assert "released hold db; fleet" in holds and "still paused by payments" in holds
    assert "hold payments (active)" in holds and "PAUSED" in holds

    window = next(block_output(i) for i, b in enumerate(blocks) if "--hold flush" in b)
    assert "dbmaint is scheduled" in window and "cancelled scheduled hold dbmaint" in window
    assert "window started: every replica is quiet" in window
    assert "window ended: every replica runs" in window
    history = window[window.index("action"):]
    for action in ("window_ended", "window_started", "hold_scheduled", "hold_cancelled",
                   "resume", "hold_released"):
        assert action in history, action
    assert history.index("window_ended") < history.index("window_started") < history.index(
        "hold_scheduled")  # newest first: the window's edges came after its change
    assert "Traceback" not in err
