"""TLS for the tests: certificates made by the test (``trustme``) and a private Redis that
speaks TLS on a port of its own (its plain port stays for the fixtures' PING).

``TlsFiles`` holds a CA, a server certificate for 127.0.0.1 and localhost, and a client
certificate, as PEM files under the test's directory; ``tls_redis(files, auth_clients)`` starts
the server (``--tls-auth-clients yes|no``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.demo.localredis import LocalRedis, find_server_binary, free_port


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_both: Path
    """The client certificate and its key in one file."""


def make_tls_files(where: Path, server_names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("client@fleetgate.test")
    files = TlsFiles(*(where / name for name in (
        "ca.pem", "server.pem", "server.key", "client.pem", "client.key", "client-both.pem")))
    ca.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.server_cert))
    server.private_key_pem.write_to_path(str(files.server_key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    client.private_key_and_cert_chain_pem.write_to_path(str(files.client_both))
    return files


class TlsRedis:
    """A private server with a TLS port (``tls_port``) beside its plain one (``port``)."""

    def __init__(self, files: TlsFiles, *, auth_clients: bool, extra_args: list[str] | None = None) -> None:
        if find_server_binary() is None:
            pytest.skip("no redis-server for a private TLS server")
        self.tls_port = free_port()
        self.server = LocalRedis(extra_args=[
            "--tls-port", str(self.tls_port), "--tls-cert-file", str(files.server_cert),
            "--tls-key-file", str(files.server_key), "--tls-ca-cert-file", str(files.ca),
            "--tls-auth-clients", "yes" if auth_clients else "no", *(extra_args or []),
        ])
        self.port = self.server.port

    def start(self) -> TlsRedis:
        try:
            self.server.start()
        except RuntimeError as exc:  # a server built without TLS refuses the options
            pytest.skip(f"redis-server without TLS support: {exc}")
        return self

    def stop(self) -> None:
        self.server.stop()


__all__ = ["TlsFiles", "TlsRedis", "make_tls_files"]
