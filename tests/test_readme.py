"""Every command the README and the reference pages (``docs/``) show is run by a test.

The walkthrough's blocks (README.md) run in ``tests/test_readme_walkthrough.py``. This module
runs the rest: the quick start (``make demo``; ``make test`` is the command running this very
suite, so it is checked by a dry run), the deployment render (docs/deployment.md), the benchmark
command (docs/benchmarks.md), and the Redis contract's ``redis-cli`` recipes (docs/contract.md),
literally, against real controllers. A new ``sh`` block anywhere else in the README or in
``docs/`` fails ``test_every_sh_block_of_the_readme_and_the_docs_is_run_by_a_test`` until a test
runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coordinator.demo.localredis import LocalRedis
from tests.cpkit import Replicas, until

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# The sections whose sh blocks this module (or the walkthrough test) runs.
RUN_HERE = {"quickstart", "contract", "deploy", "bench"}
RUN_ELSEWHERE = {"walkthrough"}  # tests/test_readme_walkthrough.py


def documents() -> dict[Path, str]:
    """The README and every page of the reference site, by path."""
    paths = [README, *sorted(DOCS.glob("*.md"))]
    return {path: path.read_text(encoding="utf-8") for path in paths}


def sections() -> dict[str, str]:
    """Text by section: the ``<!-- section:NAME -->`` blocks of the README and of ``docs/``
    (a name is used once across them), and the README's ``quickstart``."""
    found: dict[str, str] = {}
    for path, text in documents().items():
        for m in re.finditer(r"<!-- section:([a-z]+) -->(.*?)<!-- /section:\1 -->", text, re.S):
            assert m.group(1) not in found, f"section {m.group(1)} twice ({path.name})"
            found[m.group(1)] = m.group(2)
    text = README.read_text(encoding="utf-8")
    start = text.index("## Quick start")
    found["quickstart"] = text[start : text.index("<!--", start)]
    return found


def sh_blocks(section: str) -> list[str]:
    return [
        m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", sections()[section], re.S | re.M)
    ]


def commands(block: str) -> list[str]:
    """The logical commands of a block: continuation lines joined, comments dropped."""
    out: list[str] = []
    current = ""
    for raw in block.splitlines():
        line = raw.split("  #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append((current + line).strip())
        current = ""
    return out


def test_every_sh_block_of_the_readme_and_the_docs_is_run_by_a_test() -> None:
    total = sum(len(re.findall(r"^```sh$", text, re.M)) for text in documents().values())
    covered = sum(len(sh_blocks(name)) for name in RUN_HERE | RUN_ELSEWHERE if name in sections())
    assert covered == total, "an sh block of the README or docs/ is in a section no test runs"
    assert sh_blocks("quickstart") and sh_blocks("contract") and sh_blocks("deploy")


# ---------------------------------------------------------------------------- quick start


def test_the_quick_start_shows_exactly_the_two_commands() -> None:
    assert [c.split()[:2] for c in commands(sh_blocks("quickstart")[0])] == [
        ["make", "demo"],
        ["make", "test"],
    ]


@pytest.mark.slow
def test_make_demo_runs_the_demo_on_its_own_redis_and_every_check_holds() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FLEETGATE_REDIS_URL"}
    done = subprocess.run(
        ["make", "demo"],
        cwd=ROOT,
        env={**env, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "redis: private" in done.stdout
    assert "items started during the hold   0" in done.stdout
    assert "all checks held" in done.stdout


def test_make_test_installs_with_the_test_extra_and_runs_lint_types_and_the_suite() -> None:
    # make test is what runs this suite; a dry run shows what it does without recursing.
    done = subprocess.run(
        ["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    steps = done.stdout
    for needed in ("-m venv", "'.[test]'", "ruff check", "mypy", "mkdocs build --strict", "-m pytest"):
        assert needed in steps, needed
    assert "make test" in (ROOT / ".ci" / "run").read_text()


# ---------------------------------------------------------------------------- exit statuses


def test_the_exit_status_table_lists_every_status_the_cli_exits_with() -> None:
    from coordinator.cli.exits import EXIT_STATUSES

    walkthrough = sections()["walkthrough"]
    table = walkthrough[walkthrough.index("Exit status, for scripts"):]
    rows = re.findall(r"^\| `(\d+)` \| (.+) \|$", table.split("\n\n", 2)[1], re.M)
    assert [int(code) for code, _ in rows] == sorted(EXIT_STATUSES)
    meanings = dict(rows)
    assert "outcome is unknown" in meanings["5"] and "fleetgate status" in meanings["5"]


# ---------------------------------------------------------------------------- deployment


def test_the_deploy_command_renders_the_dev_overlay() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: the render is not checked here")
    for command in commands(sh_blocks("deploy")[0]):
        done = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert "kind: Deployment" in done.stdout and "fleetgate-replica" in done.stdout


# ---------------------------------------------------------------------------- benchmarks


def test_the_bench_section_shows_the_command_that_produced_its_table() -> None:
    blocks = sh_blocks("bench")
    assert blocks, "the benchmark section shows no command"
    assert any(c.startswith("make bench") for b in blocks for c in commands(b))


BENCH_TIMEOUT_S = 480
"""The quick `make bench` takes about a minute here with the suite's other workers beside it,
and several on a machine loaded by a real benchmark: its own deadline is this, and pytest's is
a minute longer, so the test fails by its own deadline (with the bench's output), never by
pytest's timeout in the middle of it."""


@pytest.mark.slow
@pytest.mark.timeout(BENCH_TIMEOUT_S + 60)
def test_make_bench_runs_in_its_quick_mode_and_writes_its_results(tmp_path: Path) -> None:
    results = tmp_path / "latest.json"
    done = subprocess.run(
        ["make", "bench"],
        cwd=ROOT,
        env={**os.environ, "FLEETGATE_BENCH_QUICK": "1", "FLEETGATE_BENCH_RESULTS": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| bench | case |" in done.stdout
    assert json.loads(results.read_text())["rows"]


# ---------------------------------------------------------------------------- contract recipes


async def _bash(script: str, port: int) -> None:
    """Run README commands in bash, with redis-cli pointed at the test's private server."""
    prelude = f'set -euo pipefail\nredis-cli() {{ command redis-cli -p {port} "$@"; }}\n'
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", prelude + script, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (script, out.decode(), err.decode())


@pytest.mark.slow
async def test_the_contract_recipes_pause_and_resume_real_controllers_as_written(
    private_redis: LocalRedis,
) -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not on PATH")
    import redis.asyncio as aioredis

    assignments: list[str] = []
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    seen_paused = False
    try:
        # the recipes name the fleet "orders": a private server makes that safe
        async with Replicas(private_redis.url, "orders", 3, poll_interval=0.2) as fleet:
            for block in sh_blocks("contract"):
                for command in commands(block):
                    if re.match(r"^[A-Z_]+=", command):
                        assignments.append(command)
                        continue
                    await _bash("\n".join([*assignments, command]), private_redis.port)
                    wanted = (await client.hget("fleetgate:{orders}:state", "paused")) == "1"
                    seen_paused |= wanted
                    # every controller follows the hash within a few polls, whatever the recipe
                    await until(
                        lambda w=wanted: fleet.fleet_held() == [w] * len(fleet),
                        timeout=10,
                        what=f"controllers following {command!r}",
                    )
            assert seen_paused, "no recipe paused the fleet"
            assert fleet.fleet_held() == [False] * len(fleet)
            assert all(not r.started_while_held for r in fleet)
    finally:
        await client.aclose()
