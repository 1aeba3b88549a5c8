"""Three real ``fleetgate-replica`` processes, one Redis, 300 items of 50 ms (issue 4, part 7).

Judged from what the demo handler recorded in Redis (``demo:log`` start/end times and the
``demo:done`` counts), never from wall-clock speed.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from replica.contract import Keys
from tests.procs import (
    AUTH,
    REPLICA,
    ReplicaProcess,
    base_env,
    demo_log,
    done_counts,
    enqueue,
    now_ms,
    pending,
    replica_processes,
    set_fleet_state,
    wait_done,
)

ITEMS = 300


def logs(procs: list[ReplicaProcess]) -> str:
    return "\n".join(f"--- {rp.id} ---\n{rp.log()[-4000:]}" for rp in procs)


async def pool_states(client: httpx.AsyncClient, procs: list[ReplicaProcess]) -> list[dict[str, Any]]:
    return [(await client.get(rp.url + "/pool", headers=AUTH)).json() for rp in procs]


async def wait_until_all(
    client: httpx.AsyncClient,
    procs: list[ReplicaProcess],
    pred: Any,
    timeout: float = 20.0,
) -> list[dict[str, Any]]:
    """Poll every replica's /pool (other processes: no event) until ``pred`` holds for all."""
    async with asyncio.timeout(timeout):
        while True:
            states = await pool_states(client, procs)
            if all(pred(s) for s in states):
                return states
            await asyncio.sleep(0.05)


async def readyz_once_held(
    client: httpx.AsyncClient, rp: ReplicaProcess, source: str, timeout: float = 20.0
) -> httpx.Response:
    """The first answer of ``rp``'s /readyz whose ``holds`` name ``source`` (a hold that comes
    and goes, like the breaker's, which a half-open breaker lifts for its probe)."""
    async with asyncio.timeout(timeout):
        while True:
            ready = await client.get(rp.url + "/readyz")
            if source in ready.json()["holds"]:
                return ready
            await asyncio.sleep(0.05)


async def wait_some_done(redis: aioredis.Redis, fleet: str, n: int) -> None:
    await wait_done(redis, fleet, n, timeout=60.0)


@pytest.mark.slow
async def test_a_fleet_pause_starts_nothing_during_the_hold_and_loses_nothing(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    env = base_env(redis_url, fleet_name, workers=4, demo_item_seconds=0.05, claim_idle=5)
    async with replica_processes(3, env, tmp_path) as procs, httpx.AsyncClient(timeout=10) as http:
        expected = await enqueue(redis, fleet_name, ITEMS)
        await wait_some_done(redis, fleet_name, 40)

        version = await set_fleet_state(redis, fleet_name, "pause", "db maintenance")
        report = await Fleet(redis, fleet_name).wait(version, timeout=30)
        assert report.ok, report.to_dict()  # every replica acknowledged: applied and quiet
        states = await wait_until_all(
            http, procs, lambda s: "fleet" in s["holds"] and s["in_flight"] == 0
        )
        quiet_ms = now_ms()  # every replica reported quiet by now
        assert all(s["quiet"] and s["holds"]["fleet"] == "db maintenance" for s in states)
        for rp in procs:
            ready = await http.get(rp.url + "/readyz")
            assert ready.status_code == 503, logs(procs)
            assert ready.json()["ready"] is False
            assert "fleet: db maintenance" in ready.json()["reason"]
            assert (await http.get(rp.url + "/healthz")).status_code == 200
        done_at_quiet = len(await done_counts(redis, fleet_name))
        assert done_at_quiet < ITEMS, "the pause came too late to test anything"
        await asyncio.sleep(1.0)  # the hold: a window in which a leaky replica would start items
        resume_ms = now_ms()
        version = await set_fleet_state(redis, fleet_name, "resume")
        assert (await Fleet(redis, fleet_name).wait(version, timeout=30)).ok

        await wait_done(redis, fleet_name, ITEMS)
        await wait_until_all(http, procs, lambda s: not s["paused"] and s["in_flight"] == 0)
        counts = await done_counts(redis, fleet_name)
        records = await demo_log(redis, fleet_name)

    starts_in_hold = [r for r in records
                      if r["event"] == "start" and quiet_ms < int(r["at"]) < resume_ms]
    assert starts_in_hold == [], logs(procs)
    assert sorted(counts) == expected  # none lost
    assert [k for k, v in counts.items() if v != 1] == []  # none twice
    assert await pending(redis, fleet_name) == 0
    assert len({r["replica"] for r in records}) == 3  # the work was shared


@pytest.mark.slow
async def test_kill_9_of_one_replica_hands_its_items_to_the_others(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    env = base_env(redis_url, fleet_name, workers=4, demo_item_seconds=0.05, claim_idle=1.0)
    async with replica_processes(3, env, tmp_path) as procs:
        expected = await enqueue(redis, fleet_name, ITEMS)
        await wait_some_done(redis, fleet_name, 60)
        victim = procs[0]
        victim.kill()
        assert await victim.wait(10) == -signal.SIGKILL
        await wait_done(redis, fleet_name, ITEMS)
        counts = await done_counts(redis, fleet_name)
        records = await demo_log(redis, fleet_name)
        async with asyncio.timeout(30):  # the last acks of the live replicas
            while await pending(redis, fleet_name):  # noqa: ASYNC110 - another process's acks
                await asyncio.sleep(0.05)

    assert sorted(counts) == expected, logs(procs)  # none lost
    # At least once: an item counted twice is one the killed replica had started and whose
    # acknowledgement it never sent; there can be no more of them than it held at once.
    started_by_victim = {r["item"] for r in records
                         if r["replica"] == victim.id and r["event"] == "start"}
    twice = {k for k, v in counts.items() if v > 1}
    assert twice <= started_by_victim
    assert len(twice) <= 4
    assert all(v <= 2 for v in counts.values())
    claimed = {r["item"] for r in records if r["replica"] != victim.id and r["event"] == "start"}
    unfinished_by_victim = started_by_victim - {
        r["item"] for r in records if r["replica"] == victim.id and r["event"] == "end"
    }
    assert unfinished_by_victim <= claimed  # what it was running, the others ran
    print(f"kill -9: {len(unfinished_by_victim)} items cut off and re-run elsewhere, "
          f"{len(twice)} completed twice (finished but not acknowledged)")


@pytest.mark.slow
async def test_sigterm_stops_a_replica_with_status_0_and_loses_nothing(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    env = base_env(redis_url, fleet_name, workers=4, demo_item_seconds=0.05, claim_idle=1.0,
                   pause_timeout=10)
    async with replica_processes(3, env, tmp_path) as procs:
        expected = await enqueue(redis, fleet_name, ITEMS)
        await wait_some_done(redis, fleet_name, 60)
        leaving = procs[1]
        leaving.signal(signal.SIGTERM)
        assert await leaving.wait(20) == 0, leaving.log()  # well within the grace period
        assert await redis.exists(Keys(fleet_name).replica(leaving.id)) == 0
        assert "stopped reading" in leaving.log()
        await wait_done(redis, fleet_name, ITEMS)
        counts = await done_counts(redis, fleet_name)

    assert sorted(counts) == expected, logs(procs)
    assert [k for k, v in counts.items() if v != 1] == []  # a graceful stop duplicates nothing


@pytest.mark.slow
async def test_a_dependency_outage_pauses_the_pools_and_dead_letters_nothing(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    env = base_env(redis_url, fleet_name, handler="replica.demo:flaky", workers=4,
                   demo_item_seconds=0.02, max_retries=1, claim_idle=5)
    env.update({"FLEETGATE_BREAKER_FAIL_MAX": "2", "FLEETGATE_BREAKER_RESET_TIMEOUT": "0.5",
                "FLEETGATE_BREAKER_CHECK_INTERVAL": "0.2"})
    dependency = f"{Keys(fleet_name).prefix}:demo:dependency"
    async with replica_processes(3, env, tmp_path) as procs, httpx.AsyncClient(timeout=10) as http:
        expected = await enqueue(redis, fleet_name, ITEMS)
        await wait_some_done(redis, fleet_name, 30)
        await redis.hset(dependency, "down", "1")
        states = await wait_until_all(http, procs, lambda s: "breaker" in s["holds"])
        assert all(s["paused"] for s in states)
        done_during = len(await done_counts(redis, fleet_name))
        assert done_during < ITEMS
        # the breaker hold is lifted while the breaker is half-open (a probe goes through), so
        # /readyz is read until one answer shows the hold: that answer must be a 503 naming it
        ready = await readyz_once_held(http, procs[0], "breaker")
        assert ready.status_code == 503 and "breaker" in ready.json()["reason"]
        await asyncio.sleep(1.5)  # three reset timeouts: probes fail, the pools stay paused
        assert len(await done_counts(redis, fleet_name)) == done_during
        await redis.hset(dependency, "down", "0")
        await wait_done(redis, fleet_name, ITEMS)
        counts = await done_counts(redis, fleet_name)

    assert await redis.xlen(Keys(fleet_name).dead) == 0, logs(procs)
    assert sorted(counts) == expected
    assert [k for k, v in counts.items() if v != 1] == []


@pytest.mark.slow
async def test_malformed_entries_stop_no_replica_and_go_to_the_dead_letter_stream_whole(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    """Issue 11, A.1: bytes that are not UTF-8 and JSON nested 1,000 deep, among good items."""
    keys = Keys(fleet_name)
    poison = [b'"\xff\xfe"', b"[" * 1000 + b"]" * 1000]
    env = base_env(redis_url, fleet_name, workers=4, demo_item_seconds=0.01, claim_idle=2)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        async with replica_processes(2, env, tmp_path) as procs, \
                httpx.AsyncClient(timeout=10) as http:
            for item in poison:
                await raw.xadd(keys.work, {"item": item})
            expected = await enqueue(redis, fleet_name, 20)
            await wait_done(redis, fleet_name, 20, timeout=60.0)
            async with asyncio.timeout(30):
                while await redis.xlen(keys.dead) < 2:  # noqa: ASYNC110 - other processes write
                    await asyncio.sleep(0.05)
            for rp in procs:
                assert (await http.get(rp.url + "/healthz")).status_code == 200, rp.log()
                assert (await http.get(rp.url + "/readyz")).status_code == 200, rp.log()
            counts = await done_counts(redis, fleet_name)
            letters = [fields for _, fields in await raw.xrange(keys.dead)]
    finally:
        await raw.aclose()
    assert sorted(counts) == expected, logs(procs)
    assert sorted(letter[b"item"] for letter in letters) == sorted(poison)
    assert all(letter[b"error"].startswith(b"malformed entry: ") for letter in letters)


@pytest.mark.slow
async def test_admin_routes_of_a_live_replica_answer_401_or_422_never_500(
    redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    env = base_env(redis_url, fleet_name)
    async with replica_processes(1, env, tmp_path) as (rp,), httpx.AsyncClient(timeout=10) as http:
        bad_tokens: list[dict[str, str]] = [{}, {"Authorization": "Bearer nope"},
                                            {"Authorization": "Basic x"}]
        for headers in bad_tokens:
            for method, path in (("GET", "/pool"), ("POST", "/pool/pause"),
                                 ("POST", "/pool/resume")):
                r = await http.request(method, rp.url + path, headers=headers, json={"reason": "x"})
                assert r.status_code == 401 and r.json()["detail"]
        for body in ({}, {"reason": ""}, {"reason": "x" * 501}, {"reason": "\x00"}, [1]):
            r = await http.post(rp.url + "/pool/pause", headers=AUTH, json=body)
            assert r.status_code == 422 and r.json()["detail"]
        r = await http.post(rp.url + "/pool/pause", headers=AUTH, json={"reason": "checking"})
        assert r.status_code == 200 and r.json()["holds"]["operator"] == "checking"
        assert (await http.get(rp.url + "/readyz")).json()["reason"] == "operator: checking"
        r = await http.post(rp.url + "/pool/resume", headers=AUTH)
        assert r.status_code == 200 and r.json()["paused"] is False
    assert "process-test-token" not in rp.log()


# ---------------------------------------------------------------------------- bad configuration


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"FLEETGATE_REDIS_URL": "http://localhost"}, [], "FLEETGATE_REDIS_URL"),
        ({}, ["--handler", "no_such_module:handle"], "no module named 'no_such_module'"),
        ({}, ["--handler", "replica.demo:nothing"], "has no 'nothing'"),
        ({"FLEETGATE_ADMIN_TOKEN": ""}, [], "FLEETGATE_ADMIN_TOKEN is not set"),
        ({"FLEETGATE_FLEET": "Bad Name"}, [], "FLEETGATE_FLEET"),
        ({"FLEETGATE_WORKERS": "0"}, [], "FLEETGATE_WORKERS"),
        ({"FLEETGATE_BREAKER_FAIL_MAX": "-1"}, [], "FLEETGATE_BREAKER_FAIL_MAX"),
        ({}, ["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_a_configuration_error_exits_2_with_one_line(
    redis_url: str, env: dict[str, str], args: list[str], expected: str
) -> None:
    full = base_env(redis_url, "cfg")
    full.update(env)
    if "--handler" not in args:
        args = ["--handler", "replica.demo:sleep", *args]
    done = subprocess.run([REPLICA, *args], env=full, capture_output=True, timeout=60)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, done.stderr.decode()
    assert len(lines) == 1 and expected in lines[0], lines
    assert lines[0].startswith("fleetgate-replica: ")


def test_a_port_in_use_exits_2_with_one_line(redis_url: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        full = base_env(redis_url, "cfg", port=port)
        done = subprocess.run([REPLICA], env=full, capture_output=True, timeout=60)
    err = [line for line in done.stderr.decode().splitlines()
           if line.startswith("fleetgate-replica: ")]
    assert done.returncode == 2
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{port}" in err[0]


def test_python_dash_m_replica_is_the_same_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "replica", "--config-docs"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0
    assert "`FLEETGATE_REDIS_URL`" in done.stdout.decode()
