"""A change survives the failover it meets (issue 12 section 2): after a pause or resume, the
coordinator sends ``WAIT`` on the script's connection when the primary has replicas connected.

Against a real primary with one real replica (``tests.replication``). The replica is frozen
with SIGSTOP so that it confirms nothing while the primary still counts it as connected
(``CLIENT PAUSE ALL`` on the replica was measured to hold its confirmations too; SIGSTOP is what
a stalled node looks like). Whether ``WAIT`` was sent is read from the primary's ``INFO
commandstats``, never from a clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.durability import Durability, NotConfirmed
from coordinator.fleet.fleet import Fleet
from coordinator.web.api import create_app
from replica.contract import Keys
from replica.errors import ContractError
from tests.apikit import client_for, json_headers, make_settings, strict_json
from tests.clikit import one_line, run
from tests.replication import (
    SHORT,
    Replicated,
    replicated_fixture,  # noqa: F401 (the replicated fixture)
    waits,
)


def state_on(server: LocalRedis, fleet: str) -> dict[str, str]:
    with SyncRedis(host=server.host, port=server.port, decode_responses=True) as r:
        state: dict[str, str] = r.hgetall(Keys(fleet).state)
    return state


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FLEETGATE_MIN_REPLICAS_TIMEOUT", str(SHORT))
    yield


# ---------------------------------------------------------------------------- the library


async def test_a_pause_returns_once_the_replica_has_it(replicated: Replicated, fleet_name: str) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        state = await Fleet(redis, fleet_name).pause("maintenance", by="alice")
    assert state.paused
    # WAIT answered: the replica holds the pause the moment the call returned
    assert state_on(replicated.replica, fleet_name)["version"] == str(state.version)
    assert waits(replicated.url) == 1


async def test_a_pause_the_frozen_replica_cannot_confirm_raises_not_confirmed_carrying_the_state(
    replicated: Replicated, fleet_name: str
) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        replicated.freeze()
        with pytest.raises(NotConfirmed) as caught:
            await fleet.pause("maintenance", by="alice")
        # made and published all the same
        assert (await fleet.state()).paused
    exc = caught.value
    assert exc.state.paused and exc.state.fleet == fleet_name
    assert (exc.acked, exc.wanted, exc.timeout_s) == (0, 1, SHORT)
    assert "not confirmed by a replica" in str(exc)
    replicated.thaw()
    replicated.wait_in_sync()
    assert state_on(replicated.replica, fleet_name)["version"] == str(exc.state.version)


async def test_a_resume_the_frozen_replica_cannot_confirm_is_made_and_not_confirmed(
    replicated: Replicated, fleet_name: str
) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        await fleet.pause("maintenance", by="alice")
        replicated.freeze()
        with pytest.raises(NotConfirmed) as caught:
            await fleet.resume(by="alice")
        assert not (await fleet.state()).paused
    assert not caught.value.state.paused


async def test_min_replicas_ack_0_sends_no_wait(replicated: Replicated, fleet_name: str) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        replicated.freeze()
        state = await Fleet(redis, fleet_name, min_replicas_ack=0).pause("m", by="alice")
    assert state.paused
    assert waits(replicated.url) == 0


async def test_two_replicas_asked_of_a_primary_with_one_are_not_confirmed(
    replicated: Replicated, fleet_name: str
) -> None:
    async with Redis.from_url(replicated.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name, min_replicas_ack=2, min_replicas_timeout=SHORT)
        with pytest.raises(NotConfirmed) as caught:
            await fleet.pause("m", by="alice")
    assert (caught.value.acked, caught.value.wanted) == (1, 2)


async def test_a_standalone_server_without_replicas_is_not_waited_on(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    async with Redis.from_url(private_redis.url, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name)
        await fleet.pause("m", by="alice")
        await fleet.resume(by="alice")
    assert waits(private_redis.url) == 0


async def test_a_server_that_refuses_role_is_waited_on_all_the_same(
    replicated: Replicated, private_redis: LocalRedis, fleet_name: str
) -> None:
    for server in (replicated.primary, private_redis):
        with SyncRedis(host=server.host, port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", "norole", "on", ">pw", "~*", "&*", "+@all",
                                  "-role")
    with_replica = replicated.url.replace("redis://", "redis://norole:pw@")
    without = private_redis.url.replace("redis://", "redis://norole:pw@")
    async with Redis.from_url(with_replica, decode_responses=True) as redis:
        assert (await Fleet(redis, fleet_name).pause("m", by="alice")).paused
    assert waits(replicated.url) == 1
    async with Redis.from_url(without, decode_responses=True) as redis:
        fleet = Fleet(redis, fleet_name, min_replicas_timeout=SHORT)
        with pytest.raises(NotConfirmed) as caught:
            await fleet.pause("m", by="alice")
    assert caught.value.acked == 0
    assert "ROLE refused" in caught.value.doubt and "ROLE refused" in str(caught.value)


def test_the_rule_refuses_a_negative_count_and_a_timeout_that_is_not_positive() -> None:
    with pytest.raises(ContractError):
        Durability(-1)
    with pytest.raises(ContractError):
        Durability(1, 0)
    assert Durability(0).begin() is None


# ---------------------------------------------------------------------------- the CLI


def test_a_confirmed_pause_exits_0(
    replicated: Replicated, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "pause", "--reason", "maintenance", "--redis-url",
                         replicated.url, "--fleet", fleet_name)
    assert (code, err) == (0, "")
    assert "paused" in out
    assert waits(replicated.url) == 1


def test_a_pause_the_frozen_replica_cannot_confirm_exits_4_with_one_line(
    replicated: Replicated, fleet_name: str, capsys: pytest.CaptureFixture[str],
    short_timeout: None,
) -> None:
    replicated.freeze()
    code, out, err = run(capsys, "pause", "--reason", "maintenance", "--redis-url",
                         replicated.url, "--fleet", fleet_name)
    assert code == 4
    line = one_line(err)
    assert "was written to the Redis primary" in line
    assert "not confirmed by a replica" in line
    assert "paused" in out  # the change is reported as made
    assert state_on(replicated.primary, fleet_name)["paused"] == "1"


def test_a_resume_the_frozen_replica_cannot_confirm_exits_4_after_its_wait(
    replicated: Replicated, fleet_name: str, capsys: pytest.CaptureFixture[str],
    short_timeout: None,
) -> None:
    assert run(capsys, "pause", "--reason", "m", "--redis-url", replicated.url,
               "--fleet", fleet_name)[0] == 0
    replicated.freeze()
    code, _out, err = run(capsys, "resume", "--wait", "--timeout", "10s", "--redis-url",
                          replicated.url, "--fleet", fleet_name)
    assert code == 4
    assert "not confirmed by a replica" in one_line(err)


def test_min_replicas_ack_0_skips_the_wait_and_exits_0(
    replicated: Replicated, fleet_name: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETGATE_MIN_REPLICAS_ACK", "0")
    replicated.freeze()
    code, _out, err = run(capsys, "pause", "--reason", "m", "--redis-url", replicated.url,
                          "--fleet", fleet_name)
    assert (code, err) == (0, "")
    assert waits(replicated.url) == 0


def test_a_standalone_server_without_replicas_exits_0_without_waiting(
    private_redis: LocalRedis, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run(capsys, "pause", "--reason", "m", "--redis-url", private_redis.url,
                          "--fleet", fleet_name)
    assert (code, err) == (0, "")
    assert waits(private_redis.url) == 0


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_min_replicas_ack_is_a_usage_error(
    value: str, fleet_name: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETGATE_MIN_REPLICAS_ACK", value)
    code, _out, err = run(capsys, "pause", "--reason", "m", "--fleet", fleet_name)
    assert code == 2
    assert "MIN_REPLICAS_ACK" in one_line(err).upper()


# ---------------------------------------------------------------------------- the API


async def test_the_api_answers_200_to_a_confirmed_pause_and_202_to_one_not_confirmed(
    replicated: Replicated, fleet_name: str
) -> None:
    app = create_app(make_settings(replicated.url, fleet_name, min_replicas_timeout=SHORT))
    async with client_for(app) as client:
        confirmed = await client.post("/api/fleet/pause", headers=json_headers(),
                                      json={"reason": "first"})
        assert confirmed.status_code == 200
        assert "confirmed" not in strict_json(confirmed)
        replicated.freeze()
        response = await client.post("/api/fleet/pause", headers=json_headers(),
                                     json={"reason": "second", "wait": True, "timeout": 10})
    assert response.status_code == 202
    body = strict_json(response)
    assert body["confirmed"] is False
    assert "not confirmed by a replica" in body["detail"]
    assert body["state"]["paused"] is True and body["state"]["reason"] == "second"
    assert body["wait"]["ok"] is True  # no fleetgate replica to wait for here


async def test_the_api_takes_min_replicas_ack_from_the_settings(
    replicated: Replicated, fleet_name: str
) -> None:
    app = create_app(make_settings(replicated.url, fleet_name, min_replicas_ack=0))
    async with client_for(app) as client:
        replicated.freeze()
        response = await client.post("/api/fleet/pause", headers=json_headers(),
                                     json={"reason": "not waited"})
    assert response.status_code == 200
    assert waits(replicated.url) == 0
