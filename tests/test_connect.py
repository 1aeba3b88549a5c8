"""replica.link.connect, the one connection factory, and replica.link.slots, its cluster
client, against real servers: a Sentinel group and a Redis Cluster from ``tests.topology``."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, ResponseError

from coordinator.demo.localredis import free_port
from coordinator.fleet.fleet import Fleet
from replica import FleetController, PausablePool
from replica.contract import Keys, restore_args
from replica.contract.scripts import RESTORE_STATE_LUA
from replica.contract.state import FleetState
from replica.errors import ContractError, OutcomeUnknown
from replica.link.connect import NotServedHere, connect, pool_for, sharded, topology
from replica.link.redisio import Link
from replica.link.slots import SlotRedis, command_key
from replica.link.subscription import Subscription
from tests.clikit import one_line
from tests.cpkit import until
from tests.fleetkit import run_cli
from tests.topology import (  # noqa: F401 (the fixtures)
    Cluster,
    Node,
    SentinelGroup,
    redis_cluster_fixture,
    sentinel_group_fixture,
    shared_cluster_fixture,
)


async def test_each_url_form_gives_a_client_that_knows_its_topology() -> None:
    forms = {
        "redis://127.0.0.1:1/0": "standalone",
        "unix:///tmp/none.sock": "standalone",
        "redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc/2": "sentinel",
        "redis+cluster://127.0.0.1:1,127.0.0.1:2": "cluster",
    }
    for url, expected in forms.items():
        client = connect(url)
        try:
            assert topology(client) == expected
            assert sharded(client) is (expected == "cluster")
        finally:
            await client.aclose()


def test_a_malformed_url_opens_nothing_and_says_what_is_wrong() -> None:
    with pytest.raises(ContractError, match="names no Sentinel service"):
        connect("redis+sentinel://u:s3cret@127.0.0.1:26379")


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (("GET", "k"), "k"),
        (("XGROUP CREATE", "stream", "g", "0"), "stream"),
        (("XINFO", "GROUPS", "stream"), "stream"),
        (("EVALSHA", "sha", 2, "a", "b", "arg"), "a"),
        (("EVALSHA", "sha", 0, "arg"), None),
        (("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "STREAMS", "s", ">"), "s"),
        (("SCRIPT LOAD", "return 1"), None),
        (("PING",), None),
        (("WAIT", 1, 100), None),
    ],
)
def test_a_cluster_command_is_routed_by_its_key(command: tuple[object, ...], key: str | None) -> None:
    assert command_key(command) == key


async def test_a_closed_sentinel_client_leaves_no_connection_on_the_sentinels_or_the_master(
    sentinel_group: SentinelGroup,
) -> None:
    def connections() -> list[int]:
        counts = []
        for node in [*sentinel_group.sentinels, sentinel_group.master()]:
            with node.client() as c:
                counts.append(sum(1 for x in c.client_list() if x["name"] == "leak-check"))
        return counts

    client = connect(sentinel_group.url, decode_responses=True, client_name="leak-check")
    assert topology(client) == "sentinel"
    await client.set("k", "v")
    assert await client.get("k") == "v"
    with sentinel_group.master().client() as master:
        assert master.get("k") == "v"
    assert (await asyncio.to_thread(connections))[-1] >= 1  # the master
    await client.aclose()
    assert await asyncio.to_thread(connections) == [0, 0, 0, 0]


async def test_a_cluster_client_reaches_every_slot_runs_scripts_and_pipelines_where_the_keys_are(
    shared_cluster: Cluster,
) -> None:
    client = connect(shared_cluster.url, decode_responses=True)
    assert isinstance(client, SlotRedis)
    try:
        fleets = [f"f{i}" for i in range(12)]  # spread over the three primaries
        for name in fleets:
            await client.set(f"fleetgate:{{{name}}}:x", name)
        for name in fleets:
            key = f"fleetgate:{{{name}}}:x"
            with shared_cluster.primary_for(key).client() as node:
                assert node.get(key) == name
        script = client.register_script("return redis.call('GET', KEYS[1])")
        assert [await script(keys=[f"fleetgate:{{{n}}}:x"]) for n in fleets] == fleets
        async with client.pipeline(transaction=True) as pipe:
            pipe.hset("fleetgate:{f3}:h", "a", "1").hget("fleetgate:{f3}:h", "a")
            assert await pipe.execute() == [1, "1"]
        await client.zadd("fleetgate:fleets", {"f3": 1})  # a key without a tag: its own slot
        assert await client.zrange("fleetgate:fleets", 0, -1) == ["f3"]
    finally:
        await client.aclose()


async def test_on_a_cluster_the_restore_script_spublishes_to_the_fleets_sharded_subscribers(
    shared_cluster: Cluster,
) -> None:
    keys = Keys("restored")
    client = connect(shared_cluster.url, decode_responses=True)
    sub = Subscription(client, keys.control)
    try:
        assert sub.sharded
        await sub.open()
        assert (await sub.read(10.0))[0] == b"subscribe"
        with shared_cluster.primary_for(keys.control).client() as node:
            assert node.execute_command("PUBSUB", "SHARDNUMSUB", keys.control)[1] == 1
        state = FleetState.from_hash("restored", {"paused": "1", "version": "4", "reason": "r"})
        script = client.register_script(RESTORE_STATE_LUA)
        args = restore_args(state, "pod-1", sharded=True)
        assert await script(keys=[keys.state, keys.audit, keys.control], args=args) == 1
        message = await sub.read(10.0)
        assert message[0] == b"message" and message[1] == keys.control.encode()
        assert FleetState.from_json(message[2].decode(), "restored").version == 4
    finally:
        await sub.close()
        await client.aclose()


async def test_a_key_of_another_slot_on_a_fleets_connection_is_the_callers_error_not_a_reconnect(
    shared_cluster: Cluster,
) -> None:
    keys = Keys("linked")
    client = connect(shared_cluster.url, decode_responses=True)
    link = Link(client, keys.state)
    other = next(k for k in (f"other-{i}" for i in range(100))
                 if shared_cluster.primary_for(k) is not shared_cluster.primary_for(keys.state))
    try:
        assert pool_for(client, keys.state) is pool_for(client, keys.control)
        (first,) = await link.call([("HSET", keys.state, "paused", "0")])
        (moved,) = await link.call([("GET", other)])
        assert isinstance(moved, MovedError) and isinstance(moved, ResponseError)
        (again,) = await link.call([("HGET", keys.state, "paused")])
        assert (first, again) == (1, b"0") and link.generation == 1  # bytes: the reader decodes
    finally:
        await link.close()
        await client.aclose()


async def test_the_urls_credentials_reach_the_sentinels_and_the_master_each_their_own(
    sentinel_group: SentinelGroup,
) -> None:
    with sentinel_group.master().client() as c:
        c.execute_command("ACL", "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all")
    for node in sentinel_group.sentinels:  # the sentinels want a user of their own now
        with node.client() as c:
            c.execute_command("ACL", "SETUSER", "sen", "on", ">s3n-pw", "+@all")
            c.execute_command("ACL", "SETUSER", "default", "off")

    def url(sentinel_password: str) -> str:
        return sentinel_group.sentinel_url(
            user="app", password="app-pw",
            query=f"sentinel_username=sen&sentinel_password={sentinel_password}",
        )

    client = connect(url("s3n-pw"), decode_responses=True)
    try:
        assert await client.acl_whoami() == "app"
    finally:
        await client.aclose()
    wrong = connect(url("nope"), decode_responses=True, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(RedisConnectionError):
            await wrong.ping()
    finally:
        await wrong.aclose()


async def test_a_change_a_demoted_master_refuses_is_reported_unsent_never_as_an_unknown_outcome(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    client = connect(sentinel_group.url, decode_responses=True)
    fleet = Fleet(client, fleet_name, min_replicas_ack=0)
    try:
        assert (await fleet.pause("first", by="t")).version == 1
        conn = client.connection_pool.make_connection()
        await conn.connect()
        master = sentinel_group.master()
        with master.client() as c:  # demoted under its clients: READONLY from now on
            c.execute_command("REPLICAOF", "127.0.0.1", "1")
        await conn.send_command("SET", "k", "v")
        with pytest.raises(NotServedHere):
            await conn.read_response()
        assert not conn.is_connected
        with pytest.raises(RedisConnectionError) as caught:  # sent twice, refused twice
            await fleet.pause("second", by="t")
        assert not isinstance(caught.value, OutcomeUnknown)
        with master.client() as c:
            assert c.hget(f"fleetgate:{{{fleet_name}}}:state", "version") == "1"
    finally:
        await client.aclose()


async def test_the_tls_forms_open_tls_connections_with_the_urls_files() -> None:
    for url in ("rediss+cluster://127.0.0.1:1?ssl_cert_reqs=none",
                "rediss+sentinel://127.0.0.1:1/svc?ssl_cert_reqs=none"):
        client = connect(url)
        try:
            conn = client.connection_pool.make_connection()
            assert isinstance(conn, SSLConnection) and conn.ssl_context.cert_reqs == ssl.CERT_NONE
        finally:
            await client.aclose()


async def test_a_manual_cluster_failover_moves_the_sharded_subscription_and_changes_still_apply_by_push(
    redis_cluster: Cluster,
) -> None:
    keys = Keys("orders")
    client = connect(redis_cluster.url, decode_responses=True, socket_timeout=2)
    fleet = Fleet(client, "orders", min_replicas_ack=0)

    async def handle(item: object) -> None:
        return None

    try:
        async with PausablePool(handle) as pool, FleetController(
            pool, client, fleet="orders", replica_id="pod-1", poll_interval=0.2
        ) as controller:
            old = redis_cluster.primary_for(keys.state)
            new = redis_cluster.replica_of(old)
            assert await fleet.pause("before", by="t") is not None
            await until(lambda: controller.stats().applied_version == 1)
            with new.client() as c:  # a switchover: the old primary stays up, as a replica
                c.execute_command("CLUSTER", "FAILOVER")
            assert await asyncio.to_thread(redis_cluster.wait_for_failover, old, keys.state) is new
            await until(lambda: controller.stats().connected and shard_count(new, keys.control) == 1,
                        timeout=15)
            assert shard_count(old, keys.control) == 0  # it said sunsubscribe, or dropped it
            pushes = controller.stats().pushes
            resumed = await fleet.resume(by="t")  # MOVED on an old connection: sent again
            await until(lambda: controller.stats().applied_version == resumed.version)
            assert controller.stats().pushes == pushes + 1
    finally:
        await client.aclose()


def shard_count(node: Node, channel: str) -> int:
    with node.client() as c:
        return int(c.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1])


@pytest.mark.parametrize(
    ("scheme", "path", "says"),
    [("redis+sentinel", "/svc", "no sentinel names a master for 'svc'"),
     ("redis+cluster", "", "no cluster node answered CLUSTER SLOTS")],
)
def test_the_cli_says_in_one_short_line_why_each_node_gave_nothing(
    scheme: str, path: str, says: str
) -> None:
    ports = [free_port(), free_port()]  # nothing listens there
    url = f"{scheme}://app:s3cret@" + ",".join(f"127.0.0.1:{p}" for p in ports) + path
    done = run_cli("status", "--redis-url", url, fleet="orders", timeout=30)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert says in line and all(f"127.0.0.1:{p}" in line for p in ports)
    assert "s3cret" not in done.stderr and len(line) < 600
    if scheme == "redis+sentinel":  # one reason, said once for the sentinels that gave it
        assert f"127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}: Error 111: connection refused" in line
