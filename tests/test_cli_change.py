"""``fleetgate pause``/``resume`` against a Redis that stops answering (issue 11 C.9).

``--timeout`` bounds the whole command. A private Redis runs ``DEBUG SLEEP 30`` (it answers
nothing meanwhile); each command must end on its own deadline, while Redis still sleeps, and
say what it knows: the change was sent and never answered (exit 5, "the outcome is unknown",
check with ``fleetgate status``), or nothing could be read (exit 1). A change whose connection
drops before its answer (``Fleet`` raises ``OutcomeUnknown``) exits 5 the same way.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from redis import Redis as SyncRedis

from coordinator.demo.localredis import LocalRedis
from tests.clikit import one_line
from tests.fleetkit import FLEETGATE, run_cli
from tests.procs import Processes

SLEEP_S = 30
"""Far longer than any command here may take, so "still asleep" proves it did not wait."""


@dataclass
class HungRedis:
    url: str
    sleeper: socket.socket

    def still_asleep(self) -> bool:
        """True while DEBUG SLEEP has not answered (the server has answered nobody since)."""
        self.sleeper.setblocking(False)
        try:
            self.sleeper.recv(64)  # the reply, or b"" if the server went away
            return False
        except BlockingIOError:
            return True


@pytest.fixture
def hung_redis(debug_redis: LocalRedis) -> Iterator[HungRedis]:
    """A private Redis put to sleep before the test starts its command; killed at the end."""
    sleeper = socket.create_connection((debug_redis.host, debug_redis.port), timeout=10)
    try:
        # Sent before the command under test starts: the server reads it no later than the
        # command's first bytes, and answers no one for SLEEP_S seconds from then.
        sleeper.sendall(f"DEBUG SLEEP {SLEEP_S}\r\n".encode())
        yield HungRedis(debug_redis.url, sleeper)
    finally:
        debug_redis.kill()
        sleeper.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["pause", "--reason", "db failover", "--timeout", "2s"],
        ["pause", "--reason", "db failover", "--wait", "--timeout", "2s"],
        ["pause", "--reason", "db failover", "--wait", "--timeout", "2s", "--json"],
    ],
)
def test_a_change_redis_never_answers_exits_5_within_its_timeout_saying_the_outcome_is_unknown(
    hung_redis: HungRedis, argv: list[str]
) -> None:
    done = run_cli(*argv, redis_url=hung_redis.url, fleet="hung")
    assert hung_redis.still_asleep(), "the command waited for Redis instead of its --timeout"
    assert done.returncode == 5, done.stderr
    line = one_line(done.stderr)
    assert "outcome is unknown" in line and "fleetgate status" in line
    assert done.stdout == ""


def test_resume_wait_against_a_hung_redis_ends_within_its_timeout(hung_redis: HungRedis) -> None:
    done = run_cli("resume", "--wait", "--timeout", "2s", redis_url=hung_redis.url, fleet="hung")
    assert hung_redis.still_asleep(), "the command waited for Redis instead of its --timeout"
    # resume reads the state first: cut off there, nothing was sent
    assert done.returncode == 1, done.stderr
    assert "no answer came within --timeout 2s" in one_line(done.stderr)


def test_a_change_whose_connection_drops_before_its_answer_exits_5_saying_the_outcome_is_unknown(
    private_redis: LocalRedis, processes: Processes
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    with SyncRedis.from_url(private_redis.url, decode_responses=True) as admin:
        admin.execute_command("CLIENT", "PAUSE", "30000", "WRITE")  # the script is held
        proc = processes.start(
            [FLEETGATE, "--redis-url", private_redis.url, "--fleet", "dropped", "pause",
             "--reason", "db failover", "--timeout", "30s"],
            env=env,
        )
        # the pause is on the wire once its EVALSHA waits in the server (another process's
        # state: polled, bounded)
        deadline = time.monotonic() + 30
        while not any(c.get("cmd") == "evalsha" and "b" in c.get("flags", "")
                      for c in admin.client_list()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the pause never reached Redis"
            time.sleep(0.02)
        admin.client_kill_filter(_type="normal", skipme=True)
        _, err = proc.communicate(timeout=30)
        admin.execute_command("CLIENT", "UNPAUSE")
    assert proc.returncode == 5, err
    line = one_line(err)
    assert "outcome is unknown" in line and "fleetgate status" in line
