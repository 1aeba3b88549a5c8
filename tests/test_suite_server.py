"""The suite on a Redis the user names (FLEETGATE_TEST_REDIS_URL): it refuses one that holds
data, and leaves an empty one empty, whatever its tests wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from coordinator.demo.localredis import LocalRedis

ROOT = Path(__file__).resolve().parent.parent


def _run_suite_part(url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_trim.py"],
        cwd=ROOT,
        env={**env, "FLEETGATE_TEST_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=100,
    )


@pytest.mark.slow
def test_a_named_server_that_holds_data_is_refused_and_left_untouched(
    private_redis: LocalRedis,
) -> None:
    with Redis.from_url(private_redis.url, decode_responses=True) as client:
        client.set("someone-elses", "data")
        done = _run_suite_part(private_redis.url)
        assert done.returncode == 4, done.stdout[-2000:]
        assert "holds 1 keys" in done.stdout + done.stderr
        assert client.get("someone-elses") == "data"
        assert client.dbsize() == 1


@pytest.mark.slow
def test_an_empty_named_server_is_empty_again_after_the_tests_that_wrote_to_it(
    private_redis: LocalRedis,
) -> None:
    done = _run_suite_part(private_redis.url)
    assert done.returncode == 0, done.stdout[-2000:]
    assert " passed" in done.stdout
    with Redis.from_url(private_redis.url) as client:
        assert client.dbsize() == 0
