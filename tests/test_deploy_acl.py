"""The Redis ACL of the deployment, enforced by a real redis-server.

A private redis-server (free port, temporary directory, no persistence) is started with the
deployment's own redis.conf and the ACL template deploy/k8s/base/redis/users.acl rendered by
the deployment's own render-acl.sh for two fleets (test passwords instead of the Secret's),
exactly as the Kubernetes init container and compose do. Then redis-py connects as each user and
checks what it may and may not do: by hand, command by command, and by running the real code
(``Fleet``, ``FleetController``, ``StreamSource``) as the users it runs as in the deployment.
The shared Redis on 6379 is never touched.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from coordinator.fleet.fleet import Fleet
from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.service.settings import ReplicaSettings
from replica.service.source import StreamSource
from tests.fleetkit import replicas

REPO = Path(__file__).resolve().parent.parent
REDIS_DIR = REPO / "deploy" / "k8s" / "base" / "redis"
ACL_TEMPLATE = REDIS_DIR / "users.acl"
RENDER_ACL = REDIS_DIR / "render-acl.sh"
REDIS_CONF = REDIS_DIR / "redis.conf"

FLEET = "orders.eu-1"
"""The fleet of the ``replica`` fixture (and of every test's ``fleet``)."""
OTHER = "billing"
"""Another fleet served by the same Redis: a replica of FLEET must not reach it."""
FLEETS = (FLEET, OTHER)


def replica_user(fleet: str) -> str:
    """The ACL user of fleet ``fleet``'s replicas."""
    return f"replica-{fleet}"


PASSWORDS = {
    "admin": "test-admin-password-0001",
    "coordinator": "test-coordinator-password-0001",
    replica_user(FLEET): "test-replica-orders-password-0001",
    replica_user(OTHER): "test-replica-billing-password-0001",
}


def password_variable(user: str) -> str:
    """The environment variable render-acl.sh reads the user's password from."""
    if user in {"admin", "coordinator"}:
        return f"REDIS_{user.upper()}_PASSWORD"
    fleet = user.removeprefix("replica-")
    return "REDIS_REPLICA_PASSWORD_" + re.sub(r"[.-]", "_", fleet.upper())


# Generous bounds for a loaded machine; none of them is asserted on, they only stop a hang.
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 30.0
PUBSUB_TIMEOUT_S = 15.0
CLIENT_SOCKET_TIMEOUT_S = 30.0
FLOW_TIMEOUT_S = 60.0

FLEET_NAME = r"[a-z0-9][a-z0-9_.-]{0,62}"


def key(fleet: str, suffix: str) -> str:
    """A fleetgate key: every key of a fleet carries the hash tag {fleet}."""
    return f"fleetgate:{{{fleet}}}:{suffix}"


def _no_retries() -> Retry:
    """redis-py retries connection errors (AuthenticationError is one) with a backoff by default;
    a refused login is final, so fail at once."""
    return Retry(NoBackoff(), 0)


# --- the private server ------------------------------------------------------------------------


def _render_acl(
    destination: Path,
    passwords: dict[str, str] | None = None,
    fleets: tuple[str, ...] = FLEETS,
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for user, value in (PASSWORDS if passwords is None else passwords).items():
        env[password_variable(user)] = value
    return subprocess.run(
        ["sh", str(RENDER_ACL), str(ACL_TEMPLATE), str(destination), *fleets],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    port: int
    workdir: Path

    def client(self, user: str, password: str | None = None, **kwargs: Any) -> redis.Redis:
        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_timeout": CLIENT_SOCKET_TIMEOUT_S,
            "socket_connect_timeout": CLIENT_SOCKET_TIMEOUT_S,
        }
        options.update(kwargs)
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            username=user,
            password=PASSWORDS[user] if password is None else password,
            **options,
        )

    def url(self, user: str) -> str:
        """The FLEETGATE_REDIS_URL of ``user``, as the Deployments build it (database 0)."""
        return f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{self.port}/0"

    def async_client(self, user: str) -> aioredis.Redis:
        return aioredis.Redis.from_url(self.url(user), decode_responses=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)


def _wait_until_up(process: subprocess.Popen[bytes], server: Server) -> bool:
    """True once the admin user gets PONG; False if the process exited (e.g. port taken)."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        client = server.client(
            "admin", socket_timeout=5, socket_connect_timeout=5, retry=_no_retries()
        )
        try:
            if client.ping():
                return True
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            pass
        finally:
            client.close()
        time.sleep(0.05)
    raise AssertionError(f"redis-server did not answer PING within {SERVER_START_TIMEOUT_S}s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.skip("redis-server is not on PATH: cannot start a private Redis for the ACL test")
    for tool in ("sh", "sha256sum", "awk", "sed", "tr", "sort", "uniq"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH: render-acl.sh needs it")
    workdir = tmp_path_factory.mktemp("redis-acl")
    aclfile = workdir / "users.acl"
    rendered = _render_acl(aclfile)
    assert rendered.returncode == 0, rendered.stderr
    log = workdir / "redis.log"
    for _attempt in range(5):
        server = Server(port=_free_port(), workdir=workdir)
        # The deployment's redis.conf; the command line overrides what differs in a test.
        process = subprocess.Popen(
            [
                redis_server,
                str(REDIS_CONF),
                "--port",
                str(server.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(workdir),
                "--aclfile",
                str(aclfile),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                str(log),
                "--maxmemory",
                "64mb",
            ],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            if _wait_until_up(process, server):
                yield server
                return
        finally:
            _stop(process)
    log_text = log.read_text(errors="replace") if log.exists() else "(no log)"
    raise AssertionError(f"redis-server did not start with the deployment's config:\n{log_text}")


@pytest.fixture(scope="module")
def admin(server: Server) -> Iterator[redis.Redis]:
    client = server.client("admin")
    yield client
    client.close()


@pytest.fixture(scope="module")
def coordinator(server: Server) -> Iterator[redis.Redis]:
    client = server.client("coordinator")
    yield client
    client.close()


@pytest.fixture(scope="module")
def replica(server: Server) -> Iterator[redis.Redis]:
    """A replica of FLEET."""
    client = server.client(replica_user(FLEET))
    yield client
    client.close()


@pytest.fixture(scope="module")
def other_replica(server: Server) -> Iterator[redis.Redis]:
    """A replica of OTHER."""
    client = server.client(replica_user(OTHER))
    yield client
    client.close()


@pytest.fixture
def fleet(admin: redis.Redis) -> str:
    """FLEET, on an empty database with an empty ACL LOG (the fleets are fixed by the rendered
    file, so each test starts from a clean server instead of from fresh names)."""
    admin.flushall()
    admin.execute_command("ACL", "LOG", "RESET")
    return FLEET


def _denied(call: Callable[[], object]) -> redis.ResponseError:
    """The call fails because of the ACL (NOPERM, or the ACL error of a command in a script)."""
    with pytest.raises(redis.ResponseError) as caught:
        call()
    error = caught.value
    message = str(error)
    assert isinstance(error, redis.exceptions.NoPermissionError) or re.search(
        r"can't (access|publish|run)|no permissions", message, re.IGNORECASE
    ), f"failed, but not because of the ACL: {message}"
    return error


def _next_message(pubsub: redis.client.PubSub, kind: str) -> dict[str, Any]:
    deadline = time.monotonic() + PUBSUB_TIMEOUT_S
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is not None and message["type"] == kind:
            return dict(message)
    raise AssertionError(f"no {kind} message within {PUBSUB_TIMEOUT_S}s")


def _acl_log(admin: redis.Redis) -> list[dict[str, Any]]:
    """The server's ACL LOG (denied commands, keys, channels and logins), newest first."""
    return [dict(entry) for entry in admin.acl_log()]


# --- the rendered file and the users -----------------------------------------------------------


def test_the_rendered_acl_holds_password_hashes_never_passwords(tmp_path: Path) -> None:
    rendered = tmp_path / "users.acl"
    result = _render_acl(rendered)
    assert result.returncode == 0, result.stderr
    text = rendered.read_text(encoding="utf-8")
    for password in PASSWORDS.values():
        assert password not in text
        assert "#" + hashlib.sha256(password.encode()).hexdigest() in text
    assert "__" not in text
    users = [line.split()[1] for line in text.splitlines()]
    assert users == ["default", "admin", "coordinator", replica_user(FLEET), replica_user(OTHER)]
    assert oct(rendered.stat().st_mode & 0o777) == oct(0o600)


def test_each_fleets_replica_user_is_confined_to_that_fleets_keys_and_channels(
    tmp_path: Path,
) -> None:
    rendered = tmp_path / "users.acl"
    assert _render_acl(rendered).returncode == 0
    lines = {line.split()[1]: line for line in rendered.read_text("utf-8").splitlines()}
    for fleet, other in ((FLEET, OTHER), (OTHER, FLEET)):
        line = lines[replica_user(fleet)]
        patterns = re.findall(r"(?:%R~|~|&)(\S+?)\)?(?=\s|$)", line)
        assert patterns, line
        assert all(p.startswith(f"fleetgate:{{{fleet}}}:") or p == "fleetgate:fleets"
                   for p in patterns), patterns  # the registry of fleets: ZADD only
        assert other not in line
        assert "*}" not in line and "{*" not in line


@pytest.mark.parametrize(
    ("password", "complaint"),
    [
        ("REPLACE_ME_redis_replica_password", "placeholder"),
        ("short-password", "shorter than 16"),
        ("has@an-at-sign-in-it", "may only contain"),
        ("has/a-slash-in-it-0001", "may only contain"),
        ("", "empty or unset"),
    ],
)
def test_rendering_refuses_placeholder_short_or_url_unsafe_passwords(
    tmp_path: Path, password: str, complaint: str
) -> None:
    passwords = dict(PASSWORDS)
    passwords[replica_user(FLEET)] = password
    result = _render_acl(tmp_path / "users.acl", passwords)
    assert result.returncode != 0
    assert complaint in result.stderr
    assert not (tmp_path / "users.acl").exists()


@pytest.mark.parametrize(
    "name",
    [
        "*",
        "orders*",
        "a?",
        "a[b]",
        "a\\b",
        "{a}",
        "a}b",
        "a:b",
        "Orders",
        "a b",
        "a\nb",
        "-a",
        ".a",
        "a" * 64,
        "ordérs",
    ],
)
def test_rendering_refuses_a_fleet_name_that_could_widen_a_glob_or_is_not_a_fleet_name(
    tmp_path: Path, name: str
) -> None:
    passwords = dict(PASSWORDS, **{replica_user(name): "a-replica-password-0001"})
    result = _render_acl(tmp_path / "users.acl", passwords, fleets=(FLEET, name))
    assert result.returncode != 0
    assert "invalid fleet name" in result.stderr
    assert not (tmp_path / "users.acl").exists()


@pytest.mark.parametrize(
    ("fleets", "complaint"),
    [
        ((), "usage"),
        ((FLEET, FLEET), "named twice"),
        (("a.b", "a-b"), "shares the password variable REDIS_REPLICA_PASSWORD_A_B"),
        ((FLEET, "extra"), "REDIS_REPLICA_PASSWORD_EXTRA is empty or unset"),
    ],
)
def test_rendering_refuses_no_fleet_a_repeated_fleet_or_a_fleet_without_its_own_password(
    tmp_path: Path, fleets: tuple[str, ...], complaint: str
) -> None:
    passwords = dict(PASSWORDS, **{replica_user("a.b"): "a-replica-password-0001"})
    result = _render_acl(tmp_path / "users.acl", passwords, fleets=fleets)
    assert result.returncode != 0
    assert complaint in result.stderr
    assert not (tmp_path / "users.acl").exists()


@pytest.mark.parametrize("same_as", [replica_user(OTHER), "coordinator", "admin"])
def test_rendering_refuses_one_password_for_two_users(tmp_path: Path, same_as: str) -> None:
    """Else a replica of one fleet could log in as another fleet's replica (or worse)."""
    passwords = dict(PASSWORDS)
    passwords[replica_user(FLEET)] = PASSWORDS[same_as]
    result = _render_acl(tmp_path / "users.acl", passwords)
    assert result.returncode != 0
    assert "same password" in result.stderr


def test_redis_loads_exactly_the_rendered_users_with_default_off(admin: redis.Redis) -> None:
    users = {line.split()[1]: line for line in admin.execute_command("ACL", "LIST")}
    assert set(users) == {"default", "admin", "coordinator", *map(replica_user, FLEETS)}
    assert " off " in users["default"]
    for user in ("coordinator", *map(replica_user, FLEETS)):
        assert " on " in users[user]


def test_a_client_without_credentials_is_refused(server: Server) -> None:
    with socket.create_connection(
        ("127.0.0.1", server.port), timeout=CLIENT_SOCKET_TIMEOUT_S
    ) as sock:
        sock.sendall(b"PING\r\n")
        reply = sock.recv(256)
    assert reply.startswith(b"-NOAUTH"), reply


@pytest.mark.parametrize("password", ["", "anything"])
def test_the_default_user_is_refused(server: Server, password: str) -> None:
    client = redis.Redis(
        host="127.0.0.1",
        port=server.port,
        username="default",
        password=password,
        socket_timeout=CLIENT_SOCKET_TIMEOUT_S,
        retry=_no_retries(),
    )
    try:
        with pytest.raises(redis.AuthenticationError):
            client.ping()
    finally:
        client.close()


@pytest.mark.parametrize("user", [replica_user(FLEET), "coordinator", "admin"])
def test_a_wrong_password_is_refused(server: Server, user: str) -> None:
    client = server.client(user, password="not-the-password-0001", retry=_no_retries())
    try:
        with pytest.raises(redis.AuthenticationError):
            client.ping()
    finally:
        client.close()


def test_a_replica_cannot_log_in_as_another_fleets_replica_with_its_own_password(
    server: Server,
) -> None:
    client = server.client(
        replica_user(OTHER), password=PASSWORDS[replica_user(FLEET)], retry=_no_retries()
    )
    try:
        with pytest.raises(redis.AuthenticationError):
            client.ping()
    finally:
        client.close()


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("user", ["coordinator", replica_user(FLEET)])
def test_what_redis_py_sends_on_connect_is_never_refused(
    server: Server, admin: redis.Redis, fleet: str, user: str, protocol: int
) -> None:
    """AUTH or HELLO 3 AUTH, CLIENT SETNAME, CLIENT SETINFO (7.2+; on 7.0 it is unknown and
    ignored): nothing of the handshake lands in the ACL LOG."""
    client = server.client(user, protocol=protocol, client_name="fleetgate-acl-test")
    try:
        assert client.ping() is True
        assert client.execute_command("CLIENT", "GETNAME") == "fleetgate-acl-test"
        assert client.hgetall(key(fleet, "state")) == {}
    finally:
        client.close()
    assert _acl_log(admin) == []


# --- the replica: what it may do ---------------------------------------------------------------


def test_the_replica_can_read_the_state_hash(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    coordinator.hset(key(fleet, "state"), mapping={"paused": "1", "version": "7"})
    assert replica.hgetall(key(fleet, "state")) == {"paused": "1", "version": "7"}
    assert replica.hget(key(fleet, "state"), "version") == "7"
    assert replica.hmget(key(fleet, "state"), ["paused", "version"]) == ["1", "7"]
    assert replica.exists(key(fleet, "state")) == 1


def test_the_replica_can_read_the_schedules_but_not_write_them(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    """Every poll reads fleetgate:{F}:schedules (issue 22: a replica that cannot read it holds);
    only coordinators write it."""
    coordinator.hset(key(fleet, "schedules"), "backup", '{"cron": "0 2 * * SUN"}')
    assert replica.hgetall(key(fleet, "schedules")) == {"backup": '{"cron": "0 2 * * SUN"}'}
    assert replica.type(key(fleet, "schedules")) == "hash"
    for write in (lambda: replica.hset(key(fleet, "schedules"), "x", "{}"),
                  lambda: replica.hdel(key(fleet, "schedules"), "backup"),
                  lambda: replica.delete(key(fleet, "schedules"))):
        assert isinstance(_denied(write), redis.exceptions.NoPermissionError)
    assert coordinator.hlen(key(fleet, "schedules")) == 1


def test_the_replica_can_maintain_its_own_record_and_registration(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    record = key(fleet, "replica:pod-abc")
    assert replica.hset(record, mapping={"state": "running", "version": "7"}) == 2
    assert replica.pexpire(record, 30_000) is True
    assert 0 < replica.pttl(record) <= 30_000
    assert replica.zadd(key(fleet, "replicas"), {"pod-abc": 1_700_000_000}) == 1
    assert replica.zscore(key(fleet, "replicas"), "pod-abc") == 1_700_000_000
    assert coordinator.hgetall(record) == {"state": "running", "version": "7"}
    assert coordinator.zrange(key(fleet, "replicas"), 0, -1) == ["pod-abc"]
    assert replica.zrem(key(fleet, "replicas"), "pod-abc") == 1
    assert replica.delete(record) == 1


def test_the_replica_may_note_its_fleet_in_the_registry_and_the_coordinator_lists_it(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    assert replica.zadd("fleetgate:fleets", {fleet: 1_700_000_000}) in (0, 1)
    assert coordinator.zrange("fleetgate:fleets", 0, 0, desc=True) == [fleet]
    assert coordinator.zadd("fleetgate:fleets", {fleet: 1_700_000_001}) == 0
    _denied(lambda: replica.zrange("fleetgate:fleets", 0, -1))
    _denied(lambda: replica.zrem("fleetgate:fleets", fleet))
    _denied(lambda: replica.delete("fleetgate:fleets"))


@pytest.mark.parametrize("transaction", [False, True])
def test_the_replica_poll_pipeline_is_allowed(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str, transaction: bool
) -> None:
    """The poll of replica/control/controller.py: read the state and the live peers, refresh its
    record and registration, acknowledge; as a plain pipeline or inside MULTI/EXEC."""
    coordinator.hset(key(fleet, "state"), mapping={"paused": "0", "version": "3"})
    record = key(fleet, "replica:pod-1")
    pipe = replica.pipeline(transaction=transaction)
    pipe.hgetall(key(fleet, "state"))
    pipe.hgetall(key(fleet, "schedules"))
    pipe.zrangebyscore(key(fleet, "replicas"), 0, "+inf")
    pipe.hset(record, mapping={"applied_version": "3", "state": "running"})
    pipe.pexpire(record, 15_000)
    pipe.zadd(key(fleet, "replicas"), {"pod-1": 1_700_000_000})
    pipe.publish(key(fleet, "acks"), '{"replica": "pod-1", "version": 3}')
    state, schedules, peers, _hset, expired, _zadd, _receivers = pipe.execute()
    assert state == {"paused": "0", "version": "3"}
    assert schedules == {}
    assert peers == []
    assert expired is True
    # Deregistration at shutdown.
    pipe = replica.pipeline(transaction=transaction)
    pipe.delete(record)
    pipe.zrem(key(fleet, "replicas"), "pod-1")
    assert pipe.execute() == [1, 1]


def test_the_replica_sends_its_record_and_ack_behind_client_reply_skip(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    """replica/link/redisio.py probes CLIENT REPLY SKIP (the fast path at a change)."""
    conn = replica.connection_pool.get_connection()
    try:
        conn.send_packed_command(
            conn.pack_commands(
                [
                    ("CLIENT", "REPLY", "SKIP"),
                    ("HSET", key(fleet, "replica:pod-1"), "applied_version", "4"),
                    ("PING", "after"),
                ]
            )
        )
        assert conn.read_response() == "after"
    finally:
        replica.connection_pool.release(conn)
    assert coordinator.hget(key(fleet, "replica:pod-1"), "applied_version") == "4"


def test_the_replica_dead_letters_and_acks_in_one_transaction(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    """replica/service/source.py's dead letter: XADD the dead letter, XACK the work item and
    forget its run count, in one MULTI/EXEC."""
    work = key(fleet, "work")
    replica.xgroup_create(work, "fleetgate", id="0", mkstream=True)
    entry = coordinator.xadd(work, {"item": "not json"})
    replica.xreadgroup("fleetgate", "pod-1", {work: ">"}, count=1)
    assert replica.hincrby(key(fleet, "runs"), entry, 1) == 1
    pipe = replica.pipeline(transaction=True)
    pipe.xadd(key(fleet, "dead"), {"item": "not json", "entry": entry, "error": "malformed"})
    pipe.xack(work, "fleetgate", entry)
    pipe.hdel(key(fleet, "runs"), entry)
    _dead_id, acked, forgotten = pipe.execute()
    assert (acked, forgotten) == (1, 1)
    assert coordinator.xlen(key(fleet, "dead")) == 1
    # Renewing a lease: XPENDING for its own consumer, then XCLAIM JUSTID.
    assert replica.xpending_range(work, "fleetgate", "-", "+", 10, consumername="pod-1") == []
    assert replica.xclaim(work, "fleetgate", "pod-1", 0, [entry], justid=True) == []


def test_the_replica_can_consume_count_runs_and_trim_the_work_stream(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    work = key(fleet, "work")
    # The replica creates the consumer group, even before the stream exists.
    assert replica.xgroup_create(work, "fleetgate", id="0", mkstream=True) is True
    first = coordinator.xadd(work, {"item": "1"})
    second = coordinator.xadd(work, {"item": "2"})
    batch = replica.xreadgroup("fleetgate", "pod-1", {work: ">"}, count=10)
    assert [entry_id for entry_id, _ in batch[0][1]] == [first, second]
    assert replica.hincrby(key(fleet, "runs"), second, 1) == 1
    assert replica.hget(key(fleet, "runs"), second) == "1"
    assert replica.xack(work, "fleetgate", first) == 1
    assert replica.xpending(work, "fleetgate")["pending"] == 1
    # Another replica takes over the item pod-1 never acknowledged.
    claimed = replica.xautoclaim(work, "fleetgate", "pod-2", min_idle_time=0, start_id="0-0")
    assert [entry_id for entry_id, _ in claimed[1]] == [second]
    assert replica.xack(work, "fleetgate", second) == 1
    assert replica.hdel(key(fleet, "runs"), second) == 1
    assert replica.xlen(work) == 2
    assert replica.xinfo_groups(work)[0]["name"] == "fleetgate"
    # Acknowledged entries are trimmed away (up to the oldest one still needed).
    assert replica.xtrim(work, minid=second, approximate=False) == 1
    assert coordinator.xinfo_stream(work)["length"] == 1


def test_the_replica_can_write_dead_letters_and_demo_results(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    replica.xadd(key(fleet, "dead"), {"item": "1-0", "error": "boom"})
    assert replica.hincrby(key(fleet, "demo:done"), "pod-1", 1) == 1
    replica.xadd(key(fleet, "demo:log"), {"item": "1-0", "replica": "pod-1"}, maxlen=1000)
    assert replica.hget(key(fleet, "demo:dependency"), "down") is None
    assert coordinator.xlen(key(fleet, "dead")) == 1
    assert coordinator.hget(key(fleet, "demo:done"), "pod-1") == "1"


def test_the_replica_subscribes_to_control_and_receives_the_coordinators_messages(
    server: Server, coordinator: redis.Redis, fleet: str
) -> None:
    client = server.client(replica_user(fleet))
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key(fleet, "control"))
        assert _next_message(pubsub, "subscribe")["channel"] == key(fleet, "control")
        assert coordinator.publish(key(fleet, "control"), '{"paused": true}') == 1
        assert _next_message(pubsub, "message")["data"] == '{"paused": true}'
    finally:
        pubsub.close()
        client.close()


def _resp(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def test_the_replicas_subscription_connection_logs_in_subscribes_and_pings(
    server: Server, fleet: str
) -> None:
    """What replica/link/subscription.py writes on its own connection, byte for byte."""
    user = replica_user(fleet)
    with socket.create_connection(
        ("127.0.0.1", server.port), timeout=CLIENT_SOCKET_TIMEOUT_S
    ) as sock:
        sock.sendall(
            _resp("AUTH", user, PASSWORDS[user])
            + _resp("SUBSCRIBE", key(fleet, "control"))
            + _resp("PING")
        )
        expected = (
            b"+OK\r\n"
            + b"*3\r\n$9\r\nsubscribe\r\n"
            + b"$%d\r\n%s\r\n:1\r\n" % (len(key(fleet, "control")), key(fleet, "control").encode())
            + b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
        )
        received = b""
        while len(received) < len(expected) and not received.startswith(b"-"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    assert received == expected


def test_the_replica_publishes_acks_and_the_coordinator_receives_them(
    server: Server, replica: redis.Redis, fleet: str
) -> None:
    client = server.client("coordinator")
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key(fleet, "acks"))
        _next_message(pubsub, "subscribe")
        assert replica.publish(key(fleet, "acks"), "pod-1:7") == 1
        assert _next_message(pubsub, "message")["data"] == "pod-1:7"
    finally:
        pubsub.close()
        client.close()


def test_the_replica_may_discover_cluster_slots(replica: redis.Redis) -> None:
    """Allowed by the ACL; this standalone server then answers that cluster mode is off."""
    for subcommand in ("SLOTS", "SHARDS"):
        with pytest.raises(redis.ResponseError, match="cluster support disabled"):
            replica.execute_command("CLUSTER", subcommand)


# --- the replica: what it must not do in its own fleet -----------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("HSET", "{state}", "paused", "0"),
        ("HDEL", "{state}", "paused"),
        ("DEL", "{state}"),
        ("UNLINK", "{state}"),
        ("EXPIRE", "{state}", "1"),
        ("PEXPIRE", "{state}", "1"),
        ("HINCRBY", "{state}", "version", "1"),
        ("RENAME", "{state}", "{record}"),
    ],
)
def test_the_replica_cannot_write_the_state_hash(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str, command: tuple[str, ...]
) -> None:
    coordinator.hset(key(fleet, "state"), mapping={"paused": "1", "version": "4"})
    names = {"{state}": key(fleet, "state"), "{record}": key(fleet, "replica:pod-1")}
    args = [names.get(part, part) for part in command]
    error = _denied(lambda: replica.execute_command(*args))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "4"}
    assert coordinator.ttl(key(fleet, "state")) == -1


def test_the_replica_cannot_write_the_audit_stream(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    audit = key(fleet, "audit")
    coordinator.xadd(audit, {"action": "pause"})
    _denied(lambda: replica.xadd(audit, {"action": "resume", "by": "a replica"}))
    _denied(lambda: replica.xtrim(audit, maxlen=0))
    _denied(lambda: replica.delete(audit))
    assert coordinator.xlen(audit) == 1


def test_the_replica_cannot_publish_on_the_control_channel(
    server: Server, replica: redis.Redis, fleet: str
) -> None:
    listener = server.client("coordinator")
    pubsub = listener.pubsub()
    try:
        pubsub.subscribe(key(fleet, "control"))
        _next_message(pubsub, "subscribe")
        _denied(lambda: replica.publish(key(fleet, "control"), '{"paused": false}'))
        _denied(lambda: replica.execute_command("SPUBLISH", key(fleet, "control"), "x"))
        # Nothing reached the subscriber (the denial is final, so no waiting is needed).
        assert pubsub.get_message(timeout=0.2) is None
    finally:
        pubsub.close()
        listener.close()


@pytest.mark.parametrize("suffix", ["audit", "anything"])
def test_the_replica_cannot_subscribe_to_other_channels(
    server: Server, fleet: str, suffix: str
) -> None:
    client = server.client(replica_user(fleet))
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key(fleet, suffix))
        _denied(lambda: pubsub.get_message(timeout=PUBSUB_TIMEOUT_S))
    finally:
        pubsub.close()
        client.close()


def test_the_replica_consumes_work_but_cannot_enqueue_or_delete_it(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    work = key(fleet, "work")
    coordinator.xadd(work, {"item": "1"})
    _denied(lambda: replica.xadd(work, {"item": "forged"}))
    _denied(lambda: replica.delete(work))
    _denied(lambda: replica.xdel(work, "0-1"))
    _denied(lambda: replica.xgroup_destroy(work, "fleetgate"))
    _denied(lambda: replica.xgroup_setid(work, "fleetgate", "$"))
    assert coordinator.xlen(work) == 1


@pytest.mark.parametrize(
    "target",
    ["fleetgate:{%s}:other", "unrelated-key", "fleetgate:{%s}:replicas:extra", "fleetgate:%s"],
)
def test_the_replica_cannot_write_keys_outside_its_families(
    replica: redis.Redis, fleet: str, target: str
) -> None:
    name = target % fleet if "%s" in target else target
    _denied(lambda: replica.execute_command("HSET", name, "a", "1"))
    _denied(lambda: replica.execute_command("XADD", name, "*", "a", "1"))


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("RANDOMKEY",),
        ("DBSIZE",),
        ("SELECT", "1"),
        ("SELECT", "0"),
        ("CONFIG", "GET", "*"),
        ("ACL", "LIST"),
        ("CLIENT", "LIST"),
        ("CLIENT", "KILL", "ID", "999999"),
        ("CLIENT", "TRACKING", "ON", "BCAST"),
        ("CLIENT", "TRACKING", "ON"),
        ("CLIENT", "CACHING", "YES"),
        ("SWAPDB", "0", "1"),
        ("BGSAVE",),
        ("INFO",),
        ("PUBSUB", "CHANNELS"),
        ("SET", "fleetgate:{x}:replica:y", "1"),
        ("CLUSTER", "RESET"),
        ("PSUBSCRIBE", "fleetgate:*"),
    ],
)
def test_the_replica_is_denied_administrative_keyspace_wide_and_unlisted_commands(
    replica: redis.Redis, command: tuple[str, ...]
) -> None:
    _denied(lambda: replica.execute_command(*command))


BUSY_LOOP = "local t = redis.call('TIME'); while true do end"
"""The issue's reproduction: a Lua loop that holds every client of the server while it runs."""

FUNCTION_LIBRARY = "#!lua name=acltest\nredis.register_function('f', function() return 1 end)"


@pytest.mark.parametrize(
    "command",
    [
        ("EVAL", BUSY_LOOP, "0"),
        ("EVAL", "return 1", "0"),
        ("EVAL", "return redis.call('HGETALL', KEYS[1])", "1", "{state}"),
        ("EVAL_RO", "return redis.call('HGETALL', KEYS[1])", "1", "{state}"),
        ("EVALSHA", "{sha}", "0"),
        ("EVALSHA_RO", "{sha}", "0"),
        ("SCRIPT", "LOAD", "return 1"),
        ("SCRIPT", "EXISTS", "{sha}"),
        ("SCRIPT", "FLUSH"),
        ("SCRIPT", "KILL"),
        ("FUNCTION", "LOAD", FUNCTION_LIBRARY),
        ("FUNCTION", "LIST"),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "DELETE", "acltest"),
        ("FCALL", "f", "0"),
        ("FCALL_RO", "f", "0"),
    ],
)
def test_the_replica_may_run_no_script_and_no_function(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str, command: tuple[str, ...]
) -> None:
    """Not even one that only reads its own fleet's state: under the ACL a state hash Redis
    lost is restored by the coordinator."""
    sha = coordinator.script_load("return 1")
    names = {"{sha}": sha, "{state}": key(fleet, "state")}
    _denied(lambda: replica.execute_command(*[names.get(part, part) for part in command]))
    # Refused before it ran: the server answers the others (a script running would be BUSY).
    assert coordinator.ping() is True


def test_the_codes_restore_state_script_is_denied_to_the_replica_and_runs_for_the_coordinator(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    script = _script("restore_state.lua")
    keys = [key(fleet, s) for s in ("state", "audit", "control")]
    now = "2030-01-01T00:00:00.000Z"
    args = ["3", "1", now, "pod-1", "1000", '{"paused": true}', "paused", "1", "version", "3", "0"]
    # As the controller calls it: redis-py's Script (EVALSHA, then SCRIPT LOAD on NOSCRIPT).
    error = _denied(lambda: replica.register_script(script)(keys=keys, args=args))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert coordinator.exists(key(fleet, "state")) == 0
    assert coordinator.register_script(script)(keys=keys, args=args) == 1
    assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "3",
                                                        "restored_at": now,
                                                        "schedules_version": now}


# --- a replica and another fleet ---------------------------------------------------------------


def _seed_other_fleet(coordinator: redis.Redis, other_replica: redis.Redis) -> dict[str, Any]:
    """OTHER as its own replicas and coordinator leave it: a state, an entry taken and pending,
    a record, a run count, a dead letter."""
    work = key(OTHER, "work")
    coordinator.hset(key(OTHER, "state"), mapping={"paused": "1", "version": "2"})
    other_replica.xgroup_create(work, WORK_GROUP, id="0", mkstream=True)
    entry = coordinator.xadd(work, {ITEM_FIELD: '{"id": 1}'})
    coordinator.xadd(work, {ITEM_FIELD: '{"id": 2}'})
    other_replica.xreadgroup(WORK_GROUP, "b-1", {work: ">"}, count=1)
    other_replica.hset(key(OTHER, "replica:b-1"), mapping={"applied_version": "2"})
    other_replica.zadd(key(OTHER, "replicas"), {"b-1": 1_700_000_000})
    other_replica.hincrby(key(OTHER, "runs"), entry, 1)
    other_replica.xadd(key(OTHER, "dead"), {"item": "x"})
    return {"entry": entry}


def _other_fleet_snapshot(admin: redis.Redis) -> dict[str, Any]:
    work = key(OTHER, "work")
    return {
        "state": admin.hgetall(key(OTHER, "state")),
        "work": admin.xlen(work),
        "pending": admin.xpending(work, WORK_GROUP),
        "group": admin.xinfo_groups(work),
        "record": admin.hgetall(key(OTHER, "replica:b-1")),
        "replicas": admin.zrange(key(OTHER, "replicas"), 0, -1, withscores=True),
        "runs": admin.hgetall(key(OTHER, "runs")),
        "dead": admin.xlen(key(OTHER, "dead")),
    }


@pytest.mark.parametrize(
    "command",
    [
        ("HGETALL", "{state}"),
        ("HGET", "{state}", "paused"),
        ("EXISTS", "{state}"),
        ("XREADGROUP", "GROUP", WORK_GROUP, "a-1", "STREAMS", "{work}", ">"),
        ("XREADGROUP", "GROUP", WORK_GROUP, "a-1", "STREAMS", "{work}", "0"),
        ("XACK", "{work}", WORK_GROUP, "{entry}"),
        ("XAUTOCLAIM", "{work}", WORK_GROUP, "a-1", "0", "0-0"),
        ("XCLAIM", "{work}", WORK_GROUP, "a-1", "0", "{entry}"),
        ("XPENDING", "{work}", WORK_GROUP),
        ("XINFO", "GROUPS", "{work}"),
        ("XRANGE", "{work}", "-", "+"),
        ("XLEN", "{work}"),
        ("XTRIM", "{work}", "MAXLEN", "0"),
        ("XGROUP", "CREATE", "{work}", "mine", "0"),
        ("XGROUP", "DELCONSUMER", "{work}", WORK_GROUP, "b-1"),
        ("HGETALL", "{record}"),
        ("HSET", "{record}", "applied_version", "9"),
        ("DEL", "{record}"),
        ("ZADD", "{replicas}", "1", "a-1"),
        ("ZREM", "{replicas}", "b-1"),
        ("ZRANGEBYSCORE", "{replicas}", "0", "+inf"),
        ("HINCRBY", "{runs}", "{entry}", "5"),
        ("HDEL", "{runs}", "{entry}"),
        ("XADD", "{dead}", "*", "item", "x"),
        ("XRANGE", "{dead}", "-", "+"),
        ("HINCRBY", "{demo_done}", "x", "1"),
        ("PUBLISH", "{acks}", '{"replica": "b-1", "version": 2, "event": "quiet"}'),
        ("SPUBLISH", "{acks}", "x"),
    ],
)
def test_a_replica_cannot_read_or_take_another_fleets_state_work_records_or_acks(
    replica: redis.Redis,
    other_replica: redis.Redis,
    coordinator: redis.Redis,
    admin: redis.Redis,
    fleet: str,
    command: tuple[str, ...],
) -> None:
    seeded = _seed_other_fleet(coordinator, other_replica)
    before = _other_fleet_snapshot(admin)
    names = {
        "{state}": key(OTHER, "state"),
        "{work}": key(OTHER, "work"),
        "{record}": key(OTHER, "replica:b-1"),
        "{replicas}": key(OTHER, "replicas"),
        "{runs}": key(OTHER, "runs"),
        "{dead}": key(OTHER, "dead"),
        "{demo_done}": key(OTHER, "demo:done"),
        "{acks}": key(OTHER, "acks"),
        "{entry}": seeded["entry"],
    }
    error = _denied(lambda: replica.execute_command(*[names.get(p, p) for p in command]))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert _other_fleet_snapshot(admin) == before


@pytest.mark.parametrize("kind", ["subscribe", "ssubscribe"])
def test_a_replica_cannot_subscribe_to_another_fleets_control_channel(
    server: Server, fleet: str, kind: str
) -> None:
    client = server.client(replica_user(fleet))
    pubsub = client.pubsub()
    try:
        getattr(pubsub, kind)(key(OTHER, "control"))
        _denied(lambda: pubsub.get_message(timeout=PUBSUB_TIMEOUT_S))
    finally:
        pubsub.close()
        client.close()


def test_each_fleets_replica_follows_its_own_fleet_only(
    replica: redis.Redis, other_replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    """Both ways round: OTHER's replica is as confined as FLEET's."""
    coordinator.hset(key(fleet, "state"), "version", "1")
    coordinator.hset(key(OTHER, "state"), "version", "2")
    assert replica.hget(key(fleet, "state"), "version") == "1"
    assert other_replica.hget(key(OTHER, "state"), "version") == "2"
    _denied(lambda: other_replica.hget(key(fleet, "state"), "version"))
    _denied(lambda: other_replica.hset(key(fleet, "replica:b-1"), "state", "running"))
    _denied(lambda: other_replica.publish(key(fleet, "acks"), "x"))


# --- the coordinator ---------------------------------------------------------------------------


def test_the_coordinator_runs_its_scripts_with_script_load_and_evalsha(
    server: Server, coordinator: redis.Redis, fleet: str
) -> None:
    listener = server.client(replica_user(fleet))
    pubsub = listener.pubsub()
    try:
        pubsub.subscribe(key(fleet, "control"))
        _next_message(pubsub, "subscribe")
        change = """
        redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'version', ARGV[2])
        redis.call('XADD', KEYS[2], '*', 'action', 'pause', 'version', ARGV[2])
        return redis.call('PUBLISH', KEYS[3], ARGV[2])
        """
        sha = coordinator.script_load(change)
        assert coordinator.script_exists(sha) == [True]
        keys = [key(fleet, "state"), key(fleet, "audit"), key(fleet, "control")]
        assert coordinator.evalsha(sha, 3, *keys, "1", "1") == 1
        assert _next_message(pubsub, "message")["data"] == "1"
        assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "1"}
        assert coordinator.xlen(key(fleet, "audit")) == 1
    finally:
        pubsub.close()
        listener.close()


@pytest.mark.parametrize(
    ("body", "keys"),
    [
        ("return redis.call('SET', KEYS[1], '1')", ["unrelated-key"]),
        ("return redis.call('FLUSHALL')", []),
        ("return redis.call('SCAN', '0')", []),
        ("return redis.call('KEYS', '*')", []),
        ("return redis.call('HSET', ARGV[1], 'a', '1')", [key("orders.eu-1", "state")]),
    ],
)
def test_any_script_the_coordinator_loads_is_still_held_to_its_acl(
    coordinator: redis.Redis, admin: redis.Redis, fleet: str, body: str, keys: list[str]
) -> None:
    """The ACL cannot limit the coordinator to its own scripts (nothing names a script), but
    every Redis call inside one is checked against the coordinator's rules."""
    admin.set("unrelated-key", "kept")
    sha = coordinator.script_load(body)
    _denied(lambda: coordinator.evalsha(sha, len(keys), *keys, "unrelated-key"))
    assert admin.get("unrelated-key") == "kept"


def test_the_coordinator_can_write_the_state_audit_and_control_directly(
    coordinator: redis.Redis, fleet: str
) -> None:
    assert coordinator.hset(key(fleet, "state"), "paused", "1") == 1
    coordinator.xadd(key(fleet, "audit"), {"action": "pause"}, maxlen=10_000, approximate=True)
    assert coordinator.publish(key(fleet, "control"), "x") == 0
    assert coordinator.execute_command("SPUBLISH", key(fleet, "control"), "x") == 0
    assert coordinator.delete(key(fleet, "state")) == 1


def test_the_coordinator_can_enqueue_work_inspect_it_and_reap_stale_replicas(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    work = key(fleet, "work")
    coordinator.xadd(work, {"item": "1"})
    coordinator.xgroup_create(work, "fleetgate", id="0")
    assert coordinator.xlen(work) == 1
    assert coordinator.xinfo_groups(work)[0]["name"] == "fleetgate"
    replica.zadd(key(fleet, "replicas"), {"gone-pod": 1})
    replica.hset(key(fleet, "replica:gone-pod"), "state", "running")
    assert coordinator.zrangebyscore(key(fleet, "replicas"), 0, 10) == ["gone-pod"]
    assert coordinator.zrem(key(fleet, "replicas"), "gone-pod") == 1
    assert coordinator.delete(key(fleet, "replica:gone-pod")) == 1
    assert coordinator.exists(work, key(fleet, "replicas"), key(fleet, "replica:gone-pod")) == 1


@pytest.mark.parametrize(
    "command",
    [
        ("SET", "unrelated-key", "1"),
        ("GET", "unrelated-key"),
        ("SCAN", "0"),
        ("SCAN", "0", "MATCH", "fleetgate:*"),
        ("KEYS", "fleetgate:*"),
        ("RANDOMKEY",),
        ("DBSIZE",),
        ("SELECT", "1"),
        ("SELECT", "0"),
        ("SWAPDB", "0", "1"),
        ("MOVE", "fleetgate:{x}:state", "1"),
        ("EVAL", BUSY_LOOP, "0"),
        ("EVAL", "return 1", "0"),
        ("EVAL_RO", "return 1", "0"),
        ("EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
        ("SCRIPT", "FLUSH"),
        ("SCRIPT", "KILL"),
        ("FUNCTION", "LOAD", FUNCTION_LIBRARY),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "LIST"),
        ("FUNCTION", "DELETE", "acltest"),
        ("FCALL", "f", "0"),
        ("CLIENT", "TRACKING", "ON", "BCAST"),
        ("CLIENT", "TRACKING", "ON"),
        ("CLIENT", "CACHING", "YES"),
        ("CLIENT", "LIST"),
        ("CLIENT", "KILL", "ID", "999999"),
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("CONFIG", "GET", "*"),
        ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
        ("INFO",),
        ("ACL", "SETUSER", replica_user(FLEET), "+@all"),
        ("ACL", "LOG"),
        ("BGSAVE",),
        ("SLOWLOG", "GET"),
        ("PUBSUB", "CHANNELS"),
        ("SORT", "fleetgate:{x}:replicas"),
        ("OBJECT", "ENCODING", "fleetgate:{x}:state"),
        ("PUBLISH", "unrelated-channel", "x"),
    ],
)
def test_the_coordinator_is_confined_to_fleetgate_keys_and_the_commands_it_needs(
    coordinator: redis.Redis, admin: redis.Redis, fleet: str, command: tuple[str, ...]
) -> None:
    admin.hset("fleetgate:{x}:state", "paused", "1")
    _denied(lambda: coordinator.execute_command(*command))
    assert admin.hgetall("fleetgate:{x}:state") == {"paused": "1"}


@pytest.mark.parametrize(
    "command",
    [("SHUTDOWN", "NOSAVE"), ("MONITOR",), ("REPLICAOF", "a", "1"), ("DEBUG", "SLEEP", "0")],
)
def test_neither_the_coordinator_nor_a_replica_may_stop_debug_or_watch_the_server(
    admin: redis.Redis, command: tuple[str, ...]
) -> None:
    """Checked with ACL DRYRUN: run for real, a wrong answer would take the server down (and
    DEBUG is refused by enable-debug-command before the ACL is asked)."""
    for user in ("coordinator", *map(replica_user, FLEETS)):
        verdict = admin.execute_command("ACL", "DRYRUN", user, *command)
        assert verdict != "OK", f"{user}: {' '.join(command)}"


# --- the real code, as the users it runs as ----------------------------------------------------


def _script(name: str) -> str:
    return (REPO / "replica" / "contract" / name).read_text(encoding="utf-8")


def test_the_codes_set_state_script_runs_for_the_coordinator_only(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    script = _script("set_state.lua")
    keys = [key(fleet, s) for s in ("state", "audit", "control", "replicas")]
    now = "2030-01-01T00:00:00.000Z"
    args = ["pause", "deploy", "test", now, "", "", "0", fleet, "1000", "1", "1"]
    _denied(lambda: replica.register_script(script)(keys=keys, args=args))
    assert coordinator.exists(key(fleet, "state")) == 0
    result = coordinator.register_script(script)(keys=keys, args=args)
    assert result[0] == "ok", result
    assert coordinator.hget(key(fleet, "state"), "paused") == "1"
    assert coordinator.xlen(key(fleet, "audit")) == 1


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait for a condition held in Redis or in a running component, bounded."""
    deadline = time.monotonic() + FLOW_TIMEOUT_S
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {FLOW_TIMEOUT_S}s: {what}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def fleet_of_coordinator(server: Server, fleet: str) -> AsyncIterator[Fleet]:
    """The real ``Fleet`` on a client logged in as the coordinator."""
    client = server.async_client("coordinator")
    try:
        async with Fleet(client, fleet, wait_poll_interval=0.2) as handle:
            yield handle
    finally:
        await client.aclose()


async def test_a_real_pause_and_resume_reach_real_replicas_with_nothing_refused(
    server: Server, admin: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    fleet = fleet_of_coordinator
    async with replicas(server.url(replica_user(fleet.name)), fleet.name, 2) as kit:
        # for_wait: the replicas set read in the change's MULTI/EXEC, under the ACL too
        state = await fleet.pause("acl test", by="tester", for_wait=True)
        report = await fleet.wait(state.version, timeout=FLOW_TIMEOUT_S)
        assert report.ok, report
        state = await fleet.resume(by="tester", reason="acl test done")
        report = await fleet.wait(state.version, timeout=FLOW_TIMEOUT_S)
        assert report.ok, report
        assert [event.action for event in await fleet.history()] == ["resume", "pause"]
        assert sorted(r.id for r in await fleet.replicas()) == sorted(kit.ids)
        assert await fleet.enqueue([{"id": 1}]) != []
        for member in kit.replicas:
            stats = member.controller.stats()
            assert (stats.write_failures, stats.poll_failures) == (0, 0), stats
            assert stats.applied_version == state.version
    assert _acl_log(admin) == []


async def test_a_lost_state_is_restored_by_the_coordinator_since_replicas_may_not(
    server: Server, admin: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    fleet = fleet_of_coordinator
    async with replicas(server.url(replica_user(fleet.name)), fleet.name, 1) as kit:
        paused = await fleet.pause("acl test", by="tester")
        assert (await fleet.wait(paused.version, timeout=FLOW_TIMEOUT_S)).ok
        admin.delete(key(fleet.name, "state"))  # Redis forgot it
        controller = kit.replicas[0].controller

        async def refused() -> bool:
            return controller.stats().restore_failures > 0

        await _until(refused, "the replica tried to restore the state and was refused")
        assert admin.exists(key(fleet.name, "state")) == 0
        assert await fleet.restore_if_missing() is True
        restored = await fleet.state()
        assert (restored.paused, restored.version) == (True, paused.version)
        assert controller.applied_version == paused.version
    denials = {(entry["username"], entry["object"]) for entry in _acl_log(admin)}
    assert denials == {(replica_user(fleet.name), "evalsha")}


async def test_the_real_work_source_runs_retries_and_dead_letters_with_nothing_refused(
    server: Server, admin: redis.Redis, coordinator: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    fleet = fleet_of_coordinator
    name = fleet.name
    failures = {"flaky": 1}
    done: list[str] = []

    async def handler(item: Any) -> None:
        if item["id"] == "poison":
            raise RuntimeError("fails every time")
        if failures.get(item["id"], 0) > 0:
            failures[item["id"]] -= 1
            raise RuntimeError("fails once")
        done.append(item["id"])

    settings = ReplicaSettings(
        redis_url=server.url(replica_user(name)),
        fleet=name,
        replica_id="r1",
        insecure_no_auth=True,
        workers=2,
        max_retries=1,
    )
    await fleet.enqueue([{"id": "a"}, {"id": "flaky"}, {"id": "poison"}])
    coordinator.xadd(key(name, "work"), {ITEM_FIELD: "not json"})
    client = server.async_client(replica_user(name))
    source = StreamSource(client, settings, handler)
    try:
        await source.pool.start()
        await source.start()

        async def settled() -> bool:
            pending = admin.xpending(key(name, "work"), WORK_GROUP)["pending"]
            return (
                sorted(done) == ["a", "flaky"]
                and admin.xlen(key(name, "dead")) == 2
                and (pending == 0)
            )

        await _until(settled, "two items done, two dead-lettered, nothing pending")
    finally:
        await source.stop(timeout=5.0)
        await client.aclose()
    assert source.stats().redis_errors == 0
    assert _acl_log(admin) == []


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(name=st.from_regex(FLEET_NAME, fullmatch=True))
def test_for_every_valid_fleet_name_the_rendered_replica_user_reaches_that_fleet_alone(
    admin: redis.Redis, name: str
) -> None:
    """Loaded with ACL SETUSER (the same rules as the file), checked with ACL DRYRUN against
    that fleet's keys and those of its nearest neighbours."""
    with tempfile.TemporaryDirectory() as directory:
        rendered = Path(directory) / "users.acl"
        passwords = dict(PASSWORDS)
        passwords[replica_user(name)] = "a-replica-password-0001"
        result = _render_acl(rendered, passwords, fleets=(name,))
        assert result.returncode == 0, result.stderr
        line = next(
            line
            for line in rendered.read_text("utf-8").splitlines()
            if line.split()[1] == replica_user(name)
        )
    user = f"hypothesis-{replica_user(name)}"
    admin.execute_command("ACL", "SETUSER", user, *line.split()[2:])
    try:

        def allowed(*command: str) -> bool:
            return admin.execute_command("ACL", "DRYRUN", user, *command) == "OK"

        assert allowed("HGETALL", key(name, "state"))
        assert allowed("HSET", key(name, "replica:pod-1"), "state", "running")
        assert allowed("XREADGROUP", "GROUP", WORK_GROUP, "p", "STREAMS", key(name, "work"), ">")
        assert allowed("HINCRBY", key(name, "runs"), "1-0", "1")
        assert allowed("SUBSCRIBE", key(name, "control"))
        assert allowed("PUBLISH", key(name, "acks"), "x")
        assert not allowed("HSET", key(name, "state"), "paused", "0")
        assert not allowed("PUBLISH", key(name, "control"), "x")
        neighbours = {name + "x", "x" + name, name[:-1], name.replace(".", "-")} - {name, ""}
        for other in neighbours:
            assert not allowed("HGETALL", key(other, "state")), other
            assert not allowed("HSET", key(other, "replica:pod-1"), "state", "running"), other
            assert not allowed(
                "XREADGROUP", "GROUP", WORK_GROUP, "p", "STREAMS", key(other, "work"), ">"
            ), other
            assert not allowed("SUBSCRIBE", key(other, "control")), other
            assert not allowed("PUBLISH", key(other, "acks"), "x"), other
    finally:
        admin.execute_command("ACL", "DELUSER", user)


# --- the code's key layout ---------------------------------------------------------------------


def _names(fleet: str) -> dict[str, str]:
    keys = Keys(fleet)
    return {
        "state": keys.state,
        "audit": keys.audit,
        "control": keys.control,
        "acks": keys.acks,
        "replicas": keys.replicas,
        "record": keys.replica("pod-7c9d:worker@node-1"),
        "work": keys.work,
        "dead": keys.dead,
        "demo_done": keys.demo_done,
        "demo_log": keys.demo_log,
        "runs": keys.runs,
    }


@pytest.mark.parametrize(
    ("user", "command", "allowed"),
    [
        ("replica", "HGETALL {state}", True),
        ("replica", "HSET {state} paused 0", False),
        ("replica", "XADD {audit} * action resume", False),
        ("replica", "PUBLISH {control} x", False),
        ("replica", "SUBSCRIBE {control}", True),
        ("replica", "PUBLISH {acks} x", True),
        ("replica", "SUBSCRIBE {acks}", False),
        ("replica", "HSET {record} state running", True),
        ("replica", "PEXPIRE {record} 1000", True),
        ("replica", "ZADD {replicas} 1 pod", True),
        ("replica", "ZRANGEBYSCORE {replicas} 0 +inf", True),
        ("replica", "XREADGROUP GROUP fleetgate pod STREAMS {work} >", True),
        ("replica", "XACK {work} fleetgate 1-0", True),
        ("replica", "XTRIM {work} MINID 1-0", True),
        ("replica", "HINCRBY {runs} 1-0 1", True),
        ("replica", "HDEL {runs} 1-0", True),
        ("replica", "XADD {work} * item x", False),
        ("replica", "XADD {dead} * item x", True),
        ("replica", "HINCRBY {demo_done} item 1", True),
        ("replica", "XADD {demo_log} * item x", True),
        ("replica", "HGETALL {other_state}", False),
        ("replica", "SUBSCRIBE {other_control}", False),
        ("replica", "PUBLISH {other_acks} x", False),
        ("replica", "HSET {other_record} state running", False),
        ("replica", "XREADGROUP GROUP fleetgate pod STREAMS {other_work} >", False),
        ("replica", "XACK {other_work} fleetgate 1-0", False),
        ("replica", "HINCRBY {other_runs} 1-0 1", False),
        ("replica", "XADD {other_dead} * item x", False),
        ("coordinator", "HSET {state} paused 1", True),
        ("coordinator", "XADD {audit} * action pause", True),
        ("coordinator", "PUBLISH {control} x", True),
        ("coordinator", "SUBSCRIBE {acks}", True),
        ("coordinator", "XADD {work} * item x", True),
        ("coordinator", "ZREM {replicas} pod", True),
        ("coordinator", "DEL {record}", True),
        ("coordinator", "HGETALL {other_state}", True),
    ],
)
def test_the_codes_key_layout_gets_the_intended_permissions(
    admin: redis.Redis, user: str, command: str, allowed: bool
) -> None:
    """The keys and channels replica.contract.Keys names (not this file's own key()) are the
    ones the ACL patterns grant or deny; checked with ACL DRYRUN. ``replica`` is FLEET's
    replica user, ``other_*`` are OTHER's keys."""
    names = _names(FLEET) | {f"other_{k}": v for k, v in _names(OTHER).items()}
    args = [names[part[1:-1]] if part.startswith("{") else part for part in command.split()]
    acl_user = replica_user(FLEET) if user == "replica" else user
    verdict = admin.execute_command("ACL", "DRYRUN", acl_user, *args)
    assert (verdict == "OK") is allowed, f"{acl_user}: {' '.join(args)} -> {verdict}"


async def test_the_notifier_reads_the_audit_trail_as_the_coordinator_with_nothing_refused(
    server: Server, admin: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    """``fleetgate serve`` with FLEETGATE_WEBHOOK_URLS: its consumer group reads the audit and
    events streams, delivers, acknowledges, claims, all under the coordinator's rules."""
    from coordinator.notify.consumer import Notifier
    from coordinator.notify.settings import NotifySettings
    from tests.notifykit import SECRET, Hook, verify

    fleet = fleet_of_coordinator
    admin.acl_log_reset()
    client = server.async_client("coordinator")
    try:
        async with Hook() as hook:
            settings = NotifySettings(urls=(hook.url,), secret=SECRET.encode(), block=0.2)
            async with Notifier(client, fleet.name, settings):
                await fleet.pause("acl notify", by="tester")
                await hook.wait_for(1, accepted=True)
            body = hook.requests[0]
            assert verify(SECRET, body.body, body.headers["x-fleetgate-signature"])
            assert body.json()["event"] == "pause"
    finally:
        await client.aclose()
    assert _acl_log(admin) == []


async def test_the_watcher_audits_a_windows_edges_as_the_coordinator_with_nothing_refused(
    server: Server, admin: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    """``fleetgate serve``'s watcher writes window_started/window_ended (HGET, HSET on the
    alerted hash and XADD on the audit stream, in one script) under the coordinator's rules."""
    from datetime import timedelta

    from coordinator.notify.windows import WindowAudit
    from replica.contract import now_utc

    fleet = fleet_of_coordinator
    admin.acl_log_reset()
    client = server.async_client("coordinator")
    try:
        state = await fleet.pause("acl window", by="tester", hold="w",
                                  starts_at=now_utc() + timedelta(hours=1), auto_resume_after=60)
        later = now_utc() + timedelta(hours=2)  # as the watcher would see it once both passed
        assert await WindowAudit(client, fleet.name).check(state, later) == 2
        assert await WindowAudit(client, fleet.name).check(state, later) == 0
        actions = [event.action for event in await fleet.history()]
        assert actions == ["window_ended", "window_started", "hold_scheduled"]
    finally:
        await client.aclose()
    assert _acl_log(admin) == []


async def test_the_watcher_audits_a_schedules_occurrences_as_the_coordinator_with_nothing_refused(
    server: Server, admin: redis.Redis, fleet_of_coordinator: Fleet
) -> None:
    """The occurrences of a schedule: the HMGET of the last one audited (a server that starts)
    and the script that appends only a later one (HGET, HSET and XADD), as the coordinator."""
    from datetime import timedelta

    from coordinator.notify.windows import WindowAudit, schedule_edges

    fleet = fleet_of_coordinator
    admin.acl_log_reset()
    client = server.async_client("coordinator")
    try:
        await fleet.add_schedule("acl", "*/2 * * * * *", 1, "UTC", "acl schedule", by="tester")
        (schedule,) = (await fleet.schedules()).schedules
        assert schedule.created_at is not None
        later = schedule.created_at + timedelta(seconds=10)
        expected = len(schedule_edges([schedule], later))
        assert expected >= 6
        assert await WindowAudit(client, fleet.name).check_schedules([schedule], 1, later) \
            == expected
        assert await WindowAudit(client, fleet.name).check_schedules([schedule], 1, later) == 0
    finally:
        await client.aclose()
    assert _acl_log(admin) == []
