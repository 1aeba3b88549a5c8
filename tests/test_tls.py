"""fleetgate over TLS, with certificates the test makes (``trustme``): the CLI pauses and
reads a fleet through a TLS-only port with client certificates, and every TLS form takes
``ssl_check_hostname`` (issue 20 C.15): a certificate that names a DNS host reached at its IP
address works with ``ssl_check_hostname=false`` and still checks the CA.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

from bench.chaos.proxy import BLACKHOLE, LinkProxy
from replica.link.connect import connect
from replica.link.redisio import Link, drop
from replica.link.slots import SlotRedis
from replica.link.tls import TLSConnection
from replica.service.readline import ReadLine
from tests.clikit import one_line, run
from tests.tlskit import TlsFiles, TlsRedis, make_tls_files


@pytest.fixture
def dns_named(tmp_path: Path) -> Iterator[tuple[TlsFiles, TlsRedis]]:
    """A TLS server whose certificate names redis.fleetgate.test only, and its files."""
    files = make_tls_files(tmp_path, server_names=("redis.fleetgate.test",))
    server = TlsRedis(files, auth_clients=True).start()
    try:
        yield files, server
    finally:
        server.stop()


def _client_query(files: TlsFiles) -> str:
    return f"ssl_ca_certs={files.ca}&ssl_certfile={files.client_cert}&ssl_keyfile={files.client_key}"


def test_the_cli_pauses_and_reads_a_fleet_over_tls_with_client_certificates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fleet_name: str
) -> None:
    files = make_tls_files(tmp_path)
    server = TlsRedis(files, auth_clients=True).start()
    try:
        url = f"rediss://127.0.0.1:{server.tls_port}/0?{_client_query(files)}"
        code, out, err = run(capsys, "--redis-url", url, "--fleet", fleet_name, "pause",
                             "--reason", "over TLS", "--by", "t")
        assert code == 0, err
        code, out, err = run(capsys, "--redis-url", url, "--fleet", fleet_name, "status", "--json")
        assert code == 0, err
        assert '"over TLS"' in out
    finally:
        server.stop()


def test_a_certificate_naming_another_host_is_refused_with_the_way_out(
    capsys: pytest.CaptureFixture[str], dns_named: tuple[TlsFiles, TlsRedis]
) -> None:
    files, server = dns_named
    code, _, err = run(capsys, "--redis-url",
                       f"rediss://127.0.0.1:{server.tls_port}/0?{_client_query(files)}", "fleets")
    line = one_line(err)
    assert code == 2 and "IP address mismatch" in line and "ssl_check_hostname=false" in line


def test_ssl_check_hostname_false_reaches_a_server_whose_certificate_names_a_dns_host(
    capsys: pytest.CaptureFixture[str], dns_named: tuple[TlsFiles, TlsRedis]
) -> None:
    files, server = dns_named
    url = f"rediss://127.0.0.1:{server.tls_port}/0?{_client_query(files)}&ssl_check_hostname=false"
    code, _, err = run(capsys, "--redis-url", url, "fleets")
    assert code == 0, err
    # the CA is still checked: another CA's certificate is refused
    (elsewhere := files.ca.parent / "other").mkdir()
    other = make_tls_files(elsewhere).ca
    code, _, err = run(capsys, "--redis-url", url.replace(str(files.ca), str(other)), "fleets")
    assert code == 2 and "certificate verify failed" in one_line(err)


async def test_the_sentinel_and_cluster_tls_forms_take_ssl_check_hostname(tmp_path: Path) -> None:
    ca = make_tls_files(tmp_path).ca
    for url in (f"rediss+cluster://127.0.0.1:1?ssl_ca_certs={ca}&ssl_check_hostname=false",
                f"rediss+sentinel://127.0.0.1:1/svc?ssl_ca_certs={ca}&ssl_check_hostname=false"):
        client = connect(url)
        try:
            conn = client.connection_pool.make_connection()
            assert isinstance(conn, SSLConnection)
            assert conn.ssl_context.check_hostname is False
            assert conn.ssl_context.cert_reqs == ssl.CERT_REQUIRED
        finally:
            await client.aclose()


# -- TLSConnection (replica/link/tls.py): a dropped TLS connection closes its socket at once


@dataclass
class Silent:
    """A TLS server behind a proxy the test can black-hole (the server then never answers a
    close_notify), the URL that reaches it through the proxy, and a client ``connect`` made."""

    url: str
    proxy: LinkProxy
    client: Redis

    def black_hole(self) -> None:
        self.proxy.set_mode(BLACKHOLE)


@pytest.fixture
async def silent(tmp_path: Path) -> AsyncIterator[Silent]:
    files = make_tls_files(tmp_path)
    server = TlsRedis(files, auth_clients=True).start()
    try:
        async with LinkProxy("127.0.0.1", server.tls_port) as proxy:
            url = f"rediss://127.0.0.1:{proxy.port}/0?{_client_query(files)}"
            client = connect(url)
            try:
                yield Silent(url, proxy, client)
            finally:
                proxy.heal()
                await client.aclose()
    finally:
        server.stop()


def _socket_of(writer: Any) -> Any:
    sock = writer.transport.get_extra_info("socket")
    assert sock is not None and sock.fileno() != -1
    return sock


async def _connected(client: Redis) -> tuple[Any, Any]:
    """A new connection of ``client``'s pool, connected, and its socket."""
    conn = client.connection_pool.make_connection()
    await conn.connect()
    return conn, _socket_of(conn._writer)


async def _still_open_after_a_turn(*socks: Any) -> list[Any]:
    """The sockets of ``socks`` still open after one turn of the loop."""
    await asyncio.sleep(0)
    return [sock for sock in socks if sock.fileno() != -1]


async def test_every_tls_client_fleetgate_makes_drops_its_connections_at_once(
    tmp_path: Path,
) -> None:
    ca = make_tls_files(tmp_path).ca
    for url in (f"rediss://127.0.0.1:1/0?ssl_ca_certs={ca}",
                f"rediss+cluster://127.0.0.1:1?ssl_ca_certs={ca}",
                f"rediss+sentinel://127.0.0.1:1/svc?ssl_ca_certs={ca}"):
        client = connect(url)
        try:
            assert isinstance(client.connection_pool.make_connection(), TLSConnection), url
            if isinstance(client, SlotRedis):  # the slot map's own (CLUSTER SLOTS) too
                assert isinstance(client.slot_map.direct("127.0.0.1", 1), TLSConnection)
        finally:
            await client.aclose()
    plain = connect("redis://127.0.0.1:1/0")
    try:
        assert not isinstance(plain.connection_pool.make_connection(), SSLConnection)
    finally:
        await plain.aclose()


async def test_a_dropped_tls_connection_closes_its_socket_within_a_turn_of_the_loop(
    silent: Silent,
) -> None:
    """Without the abort, the socket stays open until the server's close_notify (never, here:
    up to asyncio's 30 s), and a loop that ends meanwhile leaks it."""
    conn, sock = await _connected(silent.client)
    silent.black_hole()
    await conn.disconnect(nowait=True)
    assert await _still_open_after_a_turn(sock) == []


async def test_a_pubsub_closed_over_tls_leaves_no_socket_open(silent: Silent) -> None:
    pubsub = silent.client.pubsub()
    await pubsub.subscribe("fleetgate-test-tls")
    assert pubsub.connection is not None
    sock = _socket_of(pubsub.connection._writer)
    silent.black_hole()
    await pubsub.aclose()  # redis-py drops it (nowait)
    assert await _still_open_after_a_turn(sock) == []


async def test_a_graceful_tls_close_the_server_never_answers_is_aborted_at_its_timeout(
    silent: Silent,
) -> None:
    conn, sock = await _connected(silent.client)
    # a graceful disconnect waits for close_notify at most socket_connect_timeout (set only
    # now: a TLS handshake on a loaded machine can take longer than this)
    conn.socket_connect_timeout = 0.5
    silent.black_hole()
    with pytest.raises(RedisTimeoutError, match="closing"):
        await conn.disconnect()
    assert await _still_open_after_a_turn(sock) == []


async def test_fleetgates_own_connections_drop_at_once_on_a_tls_client_the_application_made(
    silent: Silent,
) -> None:
    """A client made with redis-py's own ``Redis.from_url`` (an ``SSLConnection`` pool): the
    controller's link, closed at its stop, and the work reader's line, whose read a timeout
    cancels (redis-py drops the connection itself), leave no socket open."""
    client = aioredis.Redis.from_url(silent.url)
    try:
        assert client.connection_pool.connection_class is SSLConnection
        link = Link(client)
        await link.call([("PING",)])
        line = ReadLine(client)
        await line.read(("PING",), timeout=5.0)
        socks = [_socket_of(link._conn._writer), _socket_of(line._conn._writer)]
        silent.black_hole()
        await link.close()
        with pytest.raises(TimeoutError):
            await line.read(("BLPOP", "fleetgate-test-tls", 0), timeout=0.2)
        assert await _still_open_after_a_turn(*socks) == []
        await line.close()
    finally:
        await client.aclose()


async def test_drop_closes_a_pooled_connection_of_redis_pys_own_tls_class_at_once(
    silent: Silent,
) -> None:
    """What the trim does with its pooled connection when a step fails."""
    client = aioredis.Redis.from_url(silent.url)
    try:
        conn = await client.connection_pool.get_connection()
        assert type(conn) is SSLConnection
        sock = _socket_of(conn._writer)
        silent.black_hole()
        await drop(conn)
        await client.connection_pool.release(conn)
        assert await _still_open_after_a_turn(sock) == []
    finally:
        await client.aclose()
