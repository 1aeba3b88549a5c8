"""The Redis ACL of the deployment, enforced by a real redis-server.

A private redis-server (free port, temporary directory, no persistence) is started with the
deployment's own redis.conf and the ACL template deploy/k8s/base/redis/users.acl rendered by
the deployment's own render-acl.sh (test passwords instead of the Secret's), exactly as the
Kubernetes init container and compose do. Then redis-py connects as each user and checks what it
may and may not do. The shared Redis on 6379 is never touched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

REPO = Path(__file__).resolve().parent.parent
REDIS_DIR = REPO / "deploy" / "k8s" / "base" / "redis"
ACL_TEMPLATE = REDIS_DIR / "users.acl"
RENDER_ACL = REDIS_DIR / "render-acl.sh"
REDIS_CONF = REDIS_DIR / "redis.conf"

PASSWORDS = {
    "admin": "test-admin-password-0001",
    "coordinator": "test-coordinator-password-0001",
    "replica": "test-replica-password-0001",
}
RENDER_ENV_NAMES = {
    "admin": "REDIS_ADMIN_PASSWORD",
    "coordinator": "REDIS_COORDINATOR_PASSWORD",
    "replica": "REDIS_REPLICA_PASSWORD",
}

# Generous bounds for a loaded machine; none of them is asserted on, they only stop a hang.
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 30.0
PUBSUB_TIMEOUT_S = 15.0
CLIENT_SOCKET_TIMEOUT_S = 30.0

FLEET_NAME = r"[a-z0-9][a-z0-9_.-]{0,62}"


def key(fleet: str, suffix: str) -> str:
    """A fleetgate key: every key of a fleet carries the hash tag {fleet}."""
    return f"fleetgate:{{{fleet}}}:{suffix}"


def _no_retries() -> Retry:
    """redis-py retries connection errors (AuthenticationError is one) with a backoff by default;
    a refused login is final, so fail at once."""
    return Retry(NoBackoff(), 0)


# --- the private server ------------------------------------------------------------------------


def _render_acl(destination: Path, passwords: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update({RENDER_ENV_NAMES[user]: value for user, value in passwords.items()})
    return subprocess.run(
        ["sh", str(RENDER_ACL), str(ACL_TEMPLATE), str(destination)],
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
    for tool in ("sh", "sha256sum", "awk", "sed"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH: render-acl.sh needs it")
    workdir = tmp_path_factory.mktemp("redis-acl")
    aclfile = workdir / "users.acl"
    rendered = _render_acl(aclfile, PASSWORDS)
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
    client = server.client("replica")
    yield client
    client.close()


@pytest.fixture
def fleet() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _denied(call: Callable[[], object]) -> redis.ResponseError:
    """The call fails because of the ACL (NOPERM, or the ACL error of a command in a script)."""
    with pytest.raises(redis.ResponseError) as caught:
        call()
    error = caught.value
    message = str(error)
    assert isinstance(error, redis.exceptions.NoPermissionError) or re.search(
        r"can't (access|publish|run)|no permissions", message
    ), f"failed, but not because of the ACL: {message}"
    return error


def _next_message(pubsub: redis.client.PubSub, kind: str) -> dict[str, Any]:
    deadline = time.monotonic() + PUBSUB_TIMEOUT_S
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is not None and message["type"] == kind:
            return dict(message)
    raise AssertionError(f"no {kind} message within {PUBSUB_TIMEOUT_S}s")


# --- the rendered file and the users -----------------------------------------------------------


def test_the_rendered_acl_holds_password_hashes_never_passwords(tmp_path: Path) -> None:
    rendered = tmp_path / "users.acl"
    result = _render_acl(rendered, PASSWORDS)
    assert result.returncode == 0, result.stderr
    text = rendered.read_text(encoding="utf-8")
    for password in PASSWORDS.values():
        assert password not in text
        assert "#" + hashlib.sha256(password.encode()).hexdigest() in text
    assert "__" not in text
    users = [line.split()[1] for line in text.splitlines()]
    assert users == ["default", "admin", "coordinator", "replica"]
    assert oct(rendered.stat().st_mode & 0o777) == oct(0o600)


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
    passwords = dict(PASSWORDS, replica=password)
    result = _render_acl(tmp_path / "users.acl", passwords)
    assert result.returncode != 0
    assert complaint in result.stderr
    assert not (tmp_path / "users.acl").exists()


def test_redis_loads_exactly_the_four_users_with_default_off(admin: redis.Redis) -> None:
    users = {line.split()[1]: line for line in admin.execute_command("ACL", "LIST")}
    assert set(users) == {"default", "admin", "coordinator", "replica"}
    assert " off " in users["default"]
    assert " on " in users["replica"] and " on " in users["coordinator"]


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


@pytest.mark.parametrize("user", ["replica", "coordinator", "admin"])
def test_a_wrong_password_is_refused(server: Server, user: str) -> None:
    client = server.client(user, password="not-the-password-0001", retry=_no_retries())
    try:
        with pytest.raises(redis.AuthenticationError):
            client.ping()
    finally:
        client.close()


# --- the replica: what it may do ---------------------------------------------------------------


def test_the_replica_can_read_the_state_hash(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    coordinator.hset(key(fleet, "state"), mapping={"paused": "1", "version": "7"})
    assert replica.hgetall(key(fleet, "state")) == {"paused": "1", "version": "7"}
    assert replica.hget(key(fleet, "state"), "version") == "7"
    assert replica.hmget(key(fleet, "state"), ["paused", "version"]) == ["1", "7"]
    assert replica.exists(key(fleet, "state")) == 1
    # A read-only script may declare the state key (EVAL_RO's keys are read-only).
    script = "return redis.call('HGET', KEYS[1], 'version')"
    assert replica.eval_ro(script, 1, key(fleet, "state")) == "7"


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


@pytest.mark.parametrize("transaction", [False, True])
def test_the_replica_poll_pipeline_is_allowed(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str, transaction: bool
) -> None:
    """The poll of replica/control/controller.py: read the state and the live peers, refresh its record
    and registration, acknowledge; as a plain pipeline or inside MULTI/EXEC."""
    coordinator.hset(key(fleet, "state"), mapping={"paused": "0", "version": "3"})
    record = key(fleet, "replica:pod-1")
    pipe = replica.pipeline(transaction=transaction)
    pipe.hgetall(key(fleet, "state"))
    pipe.zrangebyscore(key(fleet, "replicas"), 0, "+inf")
    pipe.hset(record, mapping={"applied_version": "3", "state": "running"})
    pipe.pexpire(record, 15_000)
    pipe.zadd(key(fleet, "replicas"), {"pod-1": 1_700_000_000})
    pipe.publish(key(fleet, "acks"), '{"replica": "pod-1", "version": 3}')
    state, peers, _hset, expired, _zadd, _receivers = pipe.execute()
    assert state == {"paused": "0", "version": "3"}
    assert peers == []
    assert expired is True
    # Deregistration at shutdown.
    pipe = replica.pipeline(transaction=transaction)
    pipe.delete(record)
    pipe.zrem(key(fleet, "replicas"), "pod-1")
    assert pipe.execute() == [1, 1]


def test_the_replica_dead_letters_and_acks_in_one_transaction(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    """replica/service/source.py's _move_to_dead: XADD the dead letter and XACK the work item."""
    work = key(fleet, "work")
    replica.xgroup_create(work, "fleetgate", id="0", mkstream=True)
    entry = coordinator.xadd(work, {"item": "not json"})
    replica.xreadgroup("fleetgate", "pod-1", {work: ">"}, count=1)
    pipe = replica.pipeline(transaction=True)
    pipe.xadd(key(fleet, "dead"), {"item": "not json", "entry": entry, "error": "malformed"})
    pipe.xack(work, "fleetgate", entry)
    _dead_id, acked = pipe.execute()
    assert acked == 1
    assert coordinator.xlen(key(fleet, "dead")) == 1
    # Renewing a lease: XPENDING for its own consumer, then XCLAIM JUSTID.
    assert replica.xpending_range(work, "fleetgate", "-", "+", 10, consumername="pod-1") == []
    assert replica.xclaim(work, "fleetgate", "pod-1", 0, [entry], justid=True) == []


def test_the_replica_can_consume_the_work_stream(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    work = key(fleet, "work")
    # The replica creates the consumer group, even before the stream exists.
    assert replica.xgroup_create(work, "fleetgate", id="0", mkstream=True) is True
    first = coordinator.xadd(work, {"item": "1"})
    second = coordinator.xadd(work, {"item": "2"})
    batch = replica.xreadgroup("fleetgate", "pod-1", {work: ">"}, count=10)
    assert [entry_id for entry_id, _ in batch[0][1]] == [first, second]
    assert replica.xack(work, "fleetgate", first) == 1
    assert replica.xpending(work, "fleetgate")["pending"] == 1
    # Another replica takes over the item pod-1 never acknowledged.
    claimed = replica.xautoclaim(work, "fleetgate", "pod-2", min_idle_time=0, start_id="0-0")
    assert [entry_id for entry_id, _ in claimed[1]] == [second]
    assert replica.xack(work, "fleetgate", second) == 1
    assert replica.xlen(work) == 2
    assert replica.xinfo_groups(work)[0]["name"] == "fleetgate"
    assert coordinator.xinfo_stream(work)["length"] == 2


def test_the_replica_can_write_dead_letters_and_demo_results(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    replica.xadd(key(fleet, "dead"), {"item": "1-0", "error": "boom"})
    assert replica.hincrby(key(fleet, "demo:done"), "pod-1", 1) == 1
    replica.xadd(key(fleet, "demo:log"), {"item": "1-0", "replica": "pod-1"}, maxlen=1000)
    assert coordinator.xlen(key(fleet, "dead")) == 1
    assert coordinator.hget(key(fleet, "demo:done"), "pod-1") == "1"


def test_the_replica_subscribes_to_control_and_receives_the_coordinators_messages(
    server: Server, coordinator: redis.Redis, fleet: str
) -> None:
    client = server.client("replica")
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key(fleet, "control"))
        assert _next_message(pubsub, "subscribe")["channel"] == key(fleet, "control")
        assert coordinator.publish(key(fleet, "control"), '{"paused": true}') == 1
        assert _next_message(pubsub, "message")["data"] == '{"paused": true}'
    finally:
        pubsub.close()
        client.close()


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


# --- the replica: what it must not do ----------------------------------------------------------


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
    client = server.client("replica")
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key(fleet, suffix))
        _denied(lambda: pubsub.get_message(timeout=PUBSUB_TIMEOUT_S))
    finally:
        pubsub.close()
        client.close()


def test_the_replica_consumes_work_but_cannot_enqueue_or_destroy_it(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    work = key(fleet, "work")
    coordinator.xadd(work, {"item": "1"})
    _denied(lambda: replica.xadd(work, {"item": "forged"}))
    _denied(lambda: replica.delete(work))
    _denied(lambda: replica.xtrim(work, maxlen=0))
    _denied(lambda: replica.xgroup_destroy(work, "fleetgate"))
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


def test_the_replica_may_discover_cluster_slots(replica: redis.Redis) -> None:
    """Allowed by the ACL; this standalone server then answers that cluster mode is off."""
    for subcommand in ("SLOTS", "SHARDS"):
        with pytest.raises(redis.ResponseError, match="cluster support disabled"):
            replica.execute_command("CLUSTER", subcommand)


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("CONFIG", "GET", "*"),
        ("ACL", "LIST"),
        ("CLIENT", "LIST"),
        ("CLIENT", "KILL", "ID", "999999"),
        ("SCRIPT", "FLUSH"),
        ("SWAPDB", "0", "1"),
        ("BGSAVE",),
        ("INFO",),
        ("SET", "fleetgate:{x}:replica:y", "1"),
        ("CLUSTER", "RESET"),
        ("PSUBSCRIBE", "fleetgate:*"),
    ],
)
def test_the_replica_is_denied_administrative_and_unlisted_commands(
    replica: redis.Redis, command: tuple[str, ...]
) -> None:
    _denied(lambda: replica.execute_command(*command))


def test_a_replica_script_that_writes_the_state_hash_is_denied_with_noperm(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    coordinator.hset(key(fleet, "state"), mapping={"paused": "1", "version": "5"})
    write = "return redis.call('HSET', KEYS[1], 'paused', '0')"
    error = _denied(lambda: replica.eval(write, 1, key(fleet, "state")))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    sha = replica.script_load(write)
    error = _denied(lambda: replica.evalsha(sha, 1, key(fleet, "state")))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    # Declaring only keys it may write and touching the state key anyway fails inside the script.
    sneaky = (
        "redis.call('HSET', KEYS[1], 'x', '1'); return redis.call('HSET', ARGV[1], 'paused', '0')"
    )
    _denied(lambda: replica.eval(sneaky, 1, key(fleet, "replica:pod-1"), key(fleet, "state")))
    # Nor can EVAL_RO write (read-only scripts).
    with pytest.raises(redis.ResponseError):
        replica.eval_ro(write, 1, key(fleet, "state"))
    assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "5"}


def test_a_replica_cannot_eval_a_script_declaring_the_state_key_even_to_read_it(
    replica: redis.Redis, fleet: str
) -> None:
    """EVAL/EVALSHA declare their keys read-write, so the replica must read the state with a
    plain command, a MULTI/EXEC pipeline or EVAL_RO/EVALSHA_RO."""
    read = "return redis.call('HGETALL', KEYS[1])"
    error = _denied(lambda: replica.eval(read, 1, key(fleet, "state")))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert replica.eval_ro(read, 1, key(fleet, "state")) == []


def test_a_replica_restore_state_if_absent_script_is_denied(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    restore = """
    if redis.call('EXISTS', KEYS[1]) == 0 then
      redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'version', ARGV[2])
      redis.call('XADD', KEYS[2], '*', 'action', 'restore')
      redis.call('PUBLISH', KEYS[3], ARGV[1])
      return 1
    end
    return 0
    """
    keys = [key(fleet, "state"), key(fleet, "audit"), key(fleet, "control")]
    error = _denied(lambda: replica.eval(restore, 3, *keys, "1", "9"))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert coordinator.exists(key(fleet, "state"), key(fleet, "audit")) == 0
    # The coordinator is the one that restores.
    assert coordinator.eval(restore, 3, *keys, "1", "9") == 1
    assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "9"}


# --- the coordinator ---------------------------------------------------------------------------


def test_the_coordinator_can_change_state_audit_and_announce_it_atomically(
    server: Server, coordinator: redis.Redis, fleet: str
) -> None:
    listener = server.client("replica")
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
        keys = [key(fleet, "state"), key(fleet, "audit"), key(fleet, "control")]
        assert coordinator.evalsha(sha, 3, *keys, "1", "1") == 1
        assert _next_message(pubsub, "message")["data"] == "1"
        assert coordinator.eval(change, 3, *keys, "0", "2") == 1
        assert coordinator.hgetall(key(fleet, "state")) == {"paused": "0", "version": "2"}
        assert coordinator.xlen(key(fleet, "audit")) == 2
    finally:
        pubsub.close()
        listener.close()


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
    found = list(coordinator.scan_iter(match=f"fleetgate:{{{fleet}}}:*", count=1000))
    assert found == [work]


@pytest.mark.parametrize(
    "command",
    [
        ("SET", "unrelated-key", "1"),
        ("GET", "unrelated-key"),
        ("FLUSHALL",),
        ("KEYS", "fleetgate:*"),
        ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
        ("ACL", "SETUSER", "replica", "+@all"),
        ("SWAPDB", "0", "1"),
        ("BGSAVE",),
        ("PUBLISH", "unrelated-channel", "x"),
    ],
)
def test_the_coordinator_is_confined_to_fleetgate_keys_and_harmless_commands(
    coordinator: redis.Redis, command: tuple[str, ...]
) -> None:
    _denied(lambda: coordinator.execute_command(*command))


# --- the real scripts of the code --------------------------------------------------------------


def _script(name: str) -> str:
    return (REPO / "replica" / "contract" / name).read_text(encoding="utf-8")


def test_the_codes_set_state_script_runs_for_the_coordinator_only(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    script = _script("set_state.lua")
    keys = [key(fleet, s) for s in ("state", "audit", "control", "replicas")]
    now = "2030-01-01T00:00:00.000Z"
    args = ["pause", "deploy", "test", now, "", "", "0", fleet, "1000", "1"]
    _denied(lambda: replica.eval(script, len(keys), *keys, *args))
    assert coordinator.exists(key(fleet, "state")) == 0
    result = coordinator.eval(script, len(keys), *keys, *args)
    assert result[0] == "ok", result
    assert coordinator.hget(key(fleet, "state"), "paused") == "1"
    assert coordinator.xlen(key(fleet, "audit")) == 1


def test_the_codes_restore_state_script_is_denied_to_the_replica(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    script = _script("restore_state.lua")
    keys = [key(fleet, s) for s in ("state", "audit", "control")]
    now = "2030-01-01T00:00:00.000Z"
    args = ["3", "1", now, "pod-1", "1000", '{"paused": true}', "paused", "1", "version", "3"]
    error = _denied(lambda: replica.eval(script, len(keys), *keys, *args))
    assert isinstance(error, redis.exceptions.NoPermissionError)
    assert coordinator.exists(key(fleet, "state")) == 0
    assert coordinator.eval(script, len(keys), *keys, *args) == 1
    assert coordinator.hgetall(key(fleet, "state")) == {"paused": "1", "version": "3"}


def _contract_keys(fleet: str) -> Any:
    try:
        from replica.contract import Keys
    except ImportError as exc:
        pytest.skip(f"replica.contract (the code's key layout) is not importable: {exc}")
    return Keys(fleet)


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
        ("replica", "XADD {work} * item x", False),
        ("replica", "XADD {dead} * item x", True),
        ("replica", "HINCRBY {demo_done} item 1", True),
        ("replica", "XADD {demo_log} * item x", True),
        ("coordinator", "HSET {state} paused 1", True),
        ("coordinator", "XADD {audit} * action pause", True),
        ("coordinator", "PUBLISH {control} x", True),
        ("coordinator", "SUBSCRIBE {acks}", True),
        ("coordinator", "XADD {work} * item x", True),
        ("coordinator", "ZREM {replicas} pod", True),
        ("coordinator", "DEL {record}", True),
    ],
)
def test_the_codes_key_layout_gets_the_intended_permissions(
    admin: redis.Redis, user: str, command: str, allowed: bool
) -> None:
    """The keys and channels replica.contract.Keys names (not this file's own key()) are the
    ones the ACL patterns grant or deny; checked with ACL DRYRUN."""
    keys = _contract_keys("orders.eu-1")
    names = {
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
    }
    args = [names[part[1:-1]] if part.startswith("{") else part for part in command.split()]
    verdict = admin.execute_command("ACL", "DRYRUN", user, *args)
    assert (verdict == "OK") is allowed, f"{user}: {' '.join(args)} -> {verdict}"


# --- every valid fleet name --------------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    name=st.from_regex(FLEET_NAME, fullmatch=True),
    # Replica ids as replica.contract allows them (pod names, host-pid, ...).
    replica_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,80}", fullmatch=True),
)
def test_for_every_valid_fleet_name_the_replica_writes_its_record_but_never_the_state(
    replica: redis.Redis, coordinator: redis.Redis, name: str, replica_id: str
) -> None:
    record = key(name, f"replica:{replica_id}")
    try:
        assert replica.hset(record, "state", "running") in (0, 1)
        assert replica.zadd(key(name, "replicas"), {replica_id: 1}) in (0, 1)
        for target in ("state", "audit"):
            _denied(
                lambda target=target: replica.execute_command("HSET", key(name, target), "a", "1")
            )
        _denied(lambda: replica.publish(key(name, "control"), "x"))
        assert coordinator.hset(key(name, "state"), "paused", "1") in (0, 1)
    finally:
        coordinator.delete(record, key(name, "replicas"), key(name, "state"))
