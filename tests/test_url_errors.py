"""Every wrong Redis URL gets one line naming what to fix, and exit status 2: the CLI, ``serve``
and the replica refuse it before connecting (issue 20 C.12, C.13, C.15).

The URLs point at 127.0.0.1:1, where nothing listens: a URL that got as far as connecting would
end with "cannot reach Redis" and exit 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from replica.contract.urls import parse_redis_url
from replica.errors import ContractError
from tests.clikit import one_line, run
from tests.tlskit import TlsFiles, make_tls_files

BIN = Path(sys.executable).parent
NOWHERE = "127.0.0.1:1"


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"redis://{NOWHERE}/0?socket_timout=1", "'socket_timout' it does not take (did you mean socket_timeout?)"),
        (f"rediss://{NOWHERE}/0?ssl_ca_cert=x", "did you mean ssl_ca_certs?"),
        ("unix:///run/redis.sock?socket_timout=1", "did you mean socket_timeout?"),
        (f"redis://{NOWHERE}/0?bogus=1", "'bogus' it does not take (a redis:// URL takes "),
        (f"redis://{NOWHERE}/0?ssl_ca_certs=/etc/ca.pem", "ssl_ca_certs, which only a rediss URL (TLS) takes"),
        ("unix:///run/redis.sock?ssl_cert_reqs=none", "ssl_cert_reqs, which only a rediss URL"),
        (f"redis://{NOWHERE}/0?sentinel_password=x", "sentinel_password, which only a Sentinel URL takes"),
        (f"rediss://{NOWHERE}/0?ssl_cert_reqs=bogus", "ssl_cert_reqs that is not none, optional, required"),
        (f"rediss://{NOWHERE}/0?ssl_check_hostname=maybe", "ssl_check_hostname that is not true or false"),
        (f"redis://{NOWHERE}/0?socket_timeout=soon", "socket_timeout that is not a positive number"),
        (f"redis://{NOWHERE}/0?db=one", "db that is not a whole number"),
        (f"redis://{NOWHERE}/0?protocol=4", "protocol that is not 2 or 3"),
        (f"redis://{NOWHERE}/0?max_connections=0", "max_connections that is not a whole number from 1"),
        (f"redis://{NOWHERE}/zero", "database that is not a number"),
        (f"redis://{NOWHERE}/0?db=1&db=2", "query parameter 'db' twice"),
        (f"redis+cluster://{NOWHERE}?socket_timout=1", "did you mean socket_timeout?"),
        (f"redis+sentinel://{NOWHERE}/svc?sentinel_pasword=x", "did you mean sentinel_password?"),
    ],
)
def test_a_url_parameter_that_does_not_exist_or_fit_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], url: str, fragment: str
) -> None:
    code, _, err = run(capsys, "--redis-url", url, "status")
    line = one_line(err)
    assert code == 2, err
    assert line.startswith("fleetgate: invalid --redis-url: ") and fragment in line


def test_every_form_takes_the_same_tls_parameters(tls_files: TlsFiles) -> None:
    query = (f"ssl_ca_certs={tls_files.ca}&ssl_certfile={tls_files.client_cert}"
             f"&ssl_keyfile={tls_files.client_key}&ssl_cert_reqs=required&ssl_check_hostname=false")
    for url in (f"rediss://h:6380/0?{query}", f"rediss+sentinel://h:26379/svc?{query}",
                f"rediss+cluster://h:7000?{query}"):
        target = parse_redis_url(url)
        assert dict(target.tls_options) == {
            "ssl_ca_certs": str(tls_files.ca), "ssl_certfile": str(tls_files.client_cert),
            "ssl_keyfile": str(tls_files.client_key), "ssl_cert_reqs": "required",
            "ssl_check_hostname": False,
        }, url


def _tls_file_cases(files: TlsFiles, tmp: Path) -> list[tuple[str, str]]:
    junk = tmp / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = tmp / "missing" / "ca.pem"
    return [
        (f"ssl_ca_certs={missing}", f"ssl_ca_certs='{missing}': no such file"),
        (f"ssl_ca_certs={tmp}", f"ssl_ca_certs='{tmp}', which is not a file"),
        (f"ssl_ca_certs={junk}", f"ssl_ca_certs='{junk}', which holds no PEM certificate"),
        (f"ssl_certfile={missing}&ssl_keyfile={files.client_key}", f"ssl_certfile='{missing}': no such file"),
        (f"ssl_certfile={files.client_cert}&ssl_keyfile={missing}", f"ssl_keyfile='{missing}': no such file"),
        (f"ssl_certfile={files.client_cert}",
         f"ssl_certfile='{files.client_cert}' without ssl_keyfile, and that file holds no private key"),
        (f"ssl_keyfile={files.client_key}", f"ssl_keyfile='{files.client_key}' without ssl_certfile"),
        (f"ssl_certfile={files.client_cert}&ssl_keyfile={files.server_key}",
         "which are not a certificate and its unencrypted key (key values mismatch)"),
    ]


@pytest.mark.parametrize("form", ["rediss://127.0.0.1:1/0", "rediss+sentinel://127.0.0.1:1/svc",
                                  "rediss+cluster://127.0.0.1:1"])
def test_a_tls_file_that_cannot_be_used_is_named_with_its_path_and_exit_2(
    capsys: pytest.CaptureFixture[str], tls_files: TlsFiles, tmp_path: Path, form: str
) -> None:
    for query, fragment in _tls_file_cases(tls_files, tmp_path):
        code, _, err = run(capsys, "--redis-url", f"{form}?{query}", "status")
        line = one_line(err)
        assert code == 2 and fragment in line, (query, line)


def test_a_certificate_file_holding_its_key_needs_no_keyfile(tls_files: TlsFiles) -> None:
    target = parse_redis_url(f"rediss://h/0?ssl_certfile={tls_files.client_both}")
    assert dict(target.tls_options) == {"ssl_certfile": str(tls_files.client_both)}


def test_a_password_holding_a_semicolon_is_parsed_and_redacted_as_one_value() -> None:
    target = parse_redis_url("redis+sentinel://h/svc?sentinel_password=Sen;t=PwBB9zzQ&socket_timeout=2")
    assert target.sentinel_password == "Sen;t=PwBB9zzQ" and target.socket_timeout == 2.0
    assert target.shown == "redis+sentinel://h/svc?sentinel_password=***&socket_timeout=2"
    with pytest.raises(ContractError) as caught:
        parse_redis_url("redis+sentinel://h/svc?sentinel_password=Sen;t=PwBB9zzQ&bogus=1")
    assert "PwBB9zzQ" not in str(caught.value)


# ---------------------------------------------------------------------------- serve, the replica


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update(extra)
    return env


def test_serve_refuses_a_wrong_url_parameter_at_once_with_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [str(BIN / "fleetgate"), "serve", "--port", "0", "--insecure-no-auth"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env=_env(FLEETGATE_REDIS_URL=f"redis://{NOWHERE}/0?socket_timout=1"),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean socket_timeout?" in lines[0], done.stderr


def test_serve_refuses_a_missing_ca_file_at_once_with_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "fleetgate"), "serve", "--port", "0", "--insecure-no-auth"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env=_env(FLEETGATE_REDIS_URL=f"rediss://{NOWHERE}/0?ssl_ca_certs={tmp_path}/ca.pem"),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"ssl_ca_certs='{tmp_path}/ca.pem': no such file" in lines[0]


@pytest.mark.parametrize(
    ("query", "fragment"),
    [("socket_timout=1", "did you mean socket_timeout?"),
     ("ssl_ca_certs=/nonexistent/ca.pem", "ssl_ca_certs='/nonexistent/ca.pem': no such file")],
)
def test_the_replica_refuses_a_wrong_url_parameter_at_once_with_one_line_and_exit_2(
    query: str, fragment: str
) -> None:
    done = subprocess.run(
        [str(BIN / "fleetgate-replica"), "--handler", "replica.demo:sleep"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env=_env(FLEETGATE_REDIS_URL=f"rediss://{NOWHERE}/0?{query}", FLEETGATE_ADMIN_TOKEN="t"),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "FLEETGATE_REDIS_URL" in lines[0] and fragment in lines[0], done.stderr
