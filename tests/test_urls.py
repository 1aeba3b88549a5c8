"""replica.contract.urls: one redaction for every URL either side prints, and one URL check.

The passwords here hold what breaks a parser-based redaction (``#``, ``?``, ``/``, ``@``), sit
in the query (``?password=``, ``sentinel_password=``) or in URLs that do not parse at all. The
last tests run ``fleetgate-replica`` with such URLs: its one line names the problem and never
the password.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from replica.contract.urls import MASK, check_redis_url, parse_redis_url, redact_url
from replica.errors import ContractError
from tests.tlskit import make_tls_files

REPLICA = str(Path(sys.executable).with_name("fleetgate-replica"))
PASSWORDS = ["s3cret", "s3#cret", "s3?cret", "s3/cret", "s3@cret", "s3:cret", "s#3?c/r@t"]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("redis://replica:{pw}@redis:6379/0", "redis://replica:***@redis:6379/0"),
        ("rediss://:{pw}@redis.example:6380/2", "rediss://:***@redis.example:6380/2"),
        ("redis://redis:6379/0?password={pw}", "redis://redis:6379/0?password=***"),
        ("redis://redis:6379/0?db=1&password={pw}", "redis://redis:6379/0?db=1&password=***"),
        ("unix:///run/redis.sock?password={pw}&db=0", "unix:///run/redis.sock?password=***&db=0"),
        ("reddis://replica:{pw}@host:6379/0", "reddis://replica:***@host:6379/0"),
        ("redis://:{pw}@/0", "redis://:***@/0"),
        ("redis://:{pw}@[::1/0", "redis://:***@[::1/0"),
        ("redis://:{pw}@host:notaport/0", "redis://:***@host:notaport/0"),
        ("redis+sentinel://user:{pw}@h1:1,h2:2/svc", "redis+sentinel://user:***@h1:1,h2:2/svc"),
        (
            "redis+sentinel://h1:1,h2:2/svc?sentinel_password={pw}&socket_timeout=1",
            "redis+sentinel://h1:1,h2:2/svc?sentinel_password=***&socket_timeout=1",
        ),
        ("redis+cluster://user:{pw}@h1:7000,h2:7001", "redis+cluster://user:***@h1:7000,h2:7001"),
    ],
)
def test_redaction_hides_every_password_wherever_the_url_puts_it(
    template: str, expected: str, password: str
) -> None:
    shown = redact_url(template.format(pw=password))
    if "@" in password and "{pw}@" not in template:
        # an "@" after the host: what precedes it is hidden too (see the test below)
        assert password not in shown and shown.startswith(expected.split("//")[0])
    else:
        assert shown == expected


def test_a_url_without_a_password_is_shown_as_it_is() -> None:
    for url in ("redis://127.0.0.1:6379/0", "redis://replica@redis:6379/0", "unix:///run/r.sock?db=1"):
        assert redact_url(url) == url


def test_an_at_sign_after_the_host_hides_what_either_reading_makes_secret() -> None:
    # an "@" in a query reads also as the end of a user part whose password holds "/" or "?"
    assert redact_url("redis://h:6379/0?password=s3cret@x") == "redis://h:***"
    assert redact_url("redis://h/0?password=s3cret@x") == "redis://***"
    assert redact_url("redis://h:6379/0?client_name=a@b") == "redis://h:***@b"
    assert redact_url("redis://u:p#ss@h:6379/0?db=1") == "redis://u:***@h:6379/0?db=1"


def test_the_redacted_url_is_one_printable_line() -> None:
    shown = redact_url("redis://:p\x1bw@ho\x1b[31mst\n:6379/0")
    assert shown == "redis://:***@ho\\x1b[31mst\\n:6379/0"
    assert shown.isprintable()


@given(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1, max_size=40))
def test_no_password_survives_redaction(password: str) -> None:
    for template in ("redis://user:{0}@host:6379/0", "redis://:{0}@[::1/0",
                     "redis://host:6379/0?db=1&password={0}&x=2", "unix:///s.sock?password={0}",
                     "redis+sentinel://u:{0}@h1:1,h2:2/svc?sentinel_password={0}&db=1"):
        assume(password.strip() not in template.format(MASK))
        assert password.strip() not in redact_url(template.format(password))


# ---------------------------------------------------------------------------- check


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("reddis://replica:s3cret@host:6379/0", "must be a redis://, redis+cluster://"),
        ("http://example.com", "must be a redis://"),
        ("redis://:s3cret@/0", "has no host"),
        ("redis://", "has no host"),
        ("redis://:s3cret@[::1/0", "Invalid IPv6 URL"),
        ("redis://:s3cret@host:notaport/0", "port that is not a number"),
        ("redis://:s3cret@host:99999/0", "port that is not a number"),
        ("redis://:s3#cret@host:6379/0", "percent-encode"),
        ("redis://:s3/cret@host:6379/0", "percent-encode"),
        ("unix://", "has no socket path"),
    ],
)
def test_a_url_that_cannot_work_is_refused_with_a_line_that_never_shows_the_password(
    url: str, fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check_redis_url(url)
    message = str(caught.value)
    assert fragment in message
    assert "s3" not in message and "cret" not in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        " redis://replica:s3cret@redis:6379/0 ",
        "redis://:s3@cret@redis:6379/0",  # an "@" in a password parses (the last one counts)
        "rediss://u:p%23w@redis.example:6380/2",
        "redis://[::1]:6379/0",
        "redis://redis",
        "unix:///run/redis.sock?db=1",
    ],
)
def test_a_url_that_can_work_is_kept_stripped(url: str) -> None:
    assert check_redis_url(url) == url.strip()


def test_sentinel_and_cluster_forms_are_checked_host_by_host() -> None:
    schemes = {"redis", "redis+sentinel", "redis+cluster"}
    url = "redis+sentinel://user:pw@h1:26379,h2:26379/svc"
    assert check_redis_url(url, schemes) == url
    assert check_redis_url(url) == url
    with pytest.raises(ValueError, match="must be a"):
        check_redis_url(url, {"redis", "rediss", "unix"})
    with pytest.raises(ValueError, match="port that is not a number"):
        check_redis_url("redis+cluster://user:pw@h1:7000,h2:x", schemes)
    with pytest.raises(ValueError, match="has no host"):
        check_redis_url("redis+cluster://user:pw@h1:7000,:7001", schemes)


# ---------------------------------------------------------------------------- the replica


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("reddis://replica:s3cret@host:6379/0", "must be a redis://"),
        ("redis://:s3cret@/0", "has no host"),
        ("redis://:s3cret@[::1/0", "Invalid IPv6 URL"),
        ("redis://:s3cret@host:notaport/0", "port that is not a number"),
        ("redis://:s3#cret@host:6379/0", "percent-encode"),
        ("redis://:s3?cret@host:6379/0", "percent-encode"),
    ],
)
def test_the_replica_refuses_a_bad_url_with_one_line_that_never_shows_the_password(
    url: str, fragment: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env["FLEETGATE_ADMIN_TOKEN"] = "t"
    done = subprocess.run(
        [REPLICA, "--redis-url", url, "--handler", "replica.demo:sleep"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "FLEETGATE_REDIS_URL" in lines[0] and fragment in lines[0]
    assert "s3" not in done.stderr + done.stdout


# ---------------------------------------------------------------------------- Sentinel, Cluster


def test_a_sentinel_url_names_its_sentinels_service_database_and_credentials() -> None:
    target = parse_redis_url(
        "rediss+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/mymaster/3"
        "?sentinel_username=sen&sentinel_password=s%26pw&socket_timeout=2.5&socket_connect_timeout=1"
    )
    assert target.topology == "sentinel" and target.tls
    assert target.hosts == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (target.service, target.db) == ("mymaster", 3)
    assert (target.username, target.password) == ("app", "p@ss")
    assert (target.sentinel_username, target.sentinel_password) == ("sen", "s&pw")
    assert (target.socket_timeout, target.socket_connect_timeout) == (2.5, 1.0)
    assert "p%40ss" not in repr(target) and "s%26pw" not in repr(target)


def test_a_cluster_url_names_its_seeds() -> None:
    target = parse_redis_url("redis+cluster://u:pw@n1:7000,n2:7001,n3/")
    assert target.topology == "cluster" and not target.tls
    assert target.hosts == (("n1", 7000), ("n2", 7001), ("n3", 6379))
    assert (target.username, target.password) == ("u", "pw")
    assert parse_redis_url("redis://h:6379/0").topology == "standalone"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("redis+sentinel://u:s3cret@h1:26379,h2:26379", "names no Sentinel service"),
        ("redis+sentinel://u:s3cret@h1:26379/svc/zero", "database that is not a number"),
        ("redis+sentinel://u:s3cret@h1:26379/svc/0/x", "more than /SERVICE/DB"),
        ("redis+sentinel://h1/svc?password=s3cret", "query parameter 'password' it does not take"),
        ("redis+sentinel://h1/svc?socket_timeout=soon&sentinel_password=s3cret", "socket_timeout"),
        ("redis+sentinel://h1/svc?socket_connect_timeout=0", "positive number of seconds"),
        ("redis+cluster://u:s3cret@h1:7000/1", "a cluster has database 0 only"),
        ("redis+cluster://h1:7000?sentinel_password=s3cret", "only a Sentinel URL takes"),
        ("redis+cluster://u:s3cret@h1:7000,h2:port", "port that is not a number"),
        ("redis+cluster://u:s3cret@h1:7000,,h2", "has no host"),
        ("redis+sentinal://u:s3cret@h1/svc", "must be a redis://"),
    ],
)
def test_a_malformed_sentinel_or_cluster_url_gets_one_line_naming_the_problem(
    url: str, fragment: str
) -> None:
    with pytest.raises(ContractError) as caught:
        parse_redis_url(url)
    message = str(caught.value)
    assert fragment in message and len(message.splitlines()) == 1
    assert "s3cret" not in message


def test_the_cli_refuses_a_malformed_sentinel_url_with_one_line_and_exit_status_2() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("fleetgate")), "status", "--redis-url",
         "redis+sentinel://u:s3cret@h1:26379/svc?sentinel_password=s3cret&bogus=1"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "query parameter 'bogus'" in lines[0]
    assert "s3cret" not in done.stderr + done.stdout


def test_the_tls_forms_take_the_tls_files_and_the_plain_forms_refuse_them(tmp_path: Path) -> None:
    ca = make_tls_files(tmp_path).ca
    target = parse_redis_url(f"rediss+cluster://n1:7000?ssl_ca_certs={ca}&ssl_cert_reqs=required")
    assert target.tls and dict(target.tls_options) == {
        "ssl_ca_certs": str(ca), "ssl_cert_reqs": "required"}
    with pytest.raises(ContractError, match="only a rediss"):
        parse_redis_url(f"redis+sentinel://h/svc?ssl_ca_certs={ca}")
    with pytest.raises(ContractError, match="ssl_cert_reqs that is not none, optional, required"):
        parse_redis_url("rediss+sentinel://h/svc?ssl_cert_reqs=maybe")
