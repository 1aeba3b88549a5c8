"""A Redis Cluster client that is a ``redis.asyncio.Redis``: ``SlotRedis``.

Everything of a fleet lives in one hash slot (``{NAME}``), and fleetgate's hot paths work on
raw connections of a client's pool (``Link``, ``Subscription``, ``ReadLine``, the change
script). redis-py's ``RedisCluster`` has no such pool, and its classic pub/sub stays on a node
that died. So a cluster is reached here through one connection pool per slot in use
(``pool_for_key``): a connection of it asks the slot map which primary serves its slot when it
connects, and connects there. A connection refused, a ``MOVED``/``ASK``, a ``CLUSTERDOWN`` or a
``TRYAGAIN`` reply (a ``MOVED`` of its own slot: one for a key of another slot is the
caller's error, raised as it is) forgets the map and drops the connection (``ConnectionError``), so the next
connect, the client's retry or the caller's reconnect, asks again (``CLUSTER SLOTS`` of the
nodes it knows) and reaches the slot's new primary: after a failover every connection of a
fleet finds it on its own, sharded subscriptions included (``SSUBSCRIBE`` on the new primary).

Commands go to the pool of their key's slot (``execute_command`` and pipelines read the key
from the command; commands without a key go to slot 0's primary), ``SCRIPT LOAD`` to every
primary. A pipeline's commands must share a slot (fleetgate's do: one fleet's keys).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import Connection, ConnectionPool
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from replica.link.tls import TLSConnection

log = logging.getLogger(__name__)

_KEYLESS = frozenset({
    "PING", "INFO", "CLIENT", "CLUSTER", "SCRIPT", "WAIT", "COMMAND", "ECHO", "TIME", "CONFIG",
    "ACL", "DBSIZE", "FLUSHALL", "FLUSHDB", "HELLO", "AUTH", "SELECT", "QUIT", "PUBSUB",
    "FUNCTION", "ROLE", "LASTSAVE", "READONLY", "READWRITE",
})
_KEYS_AFTER_NUMKEYS = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


class NotServedHere(RedisConnectionError):
    """The node refused the command before running it (``MOVED``, ``ASK``, ``CLUSTERDOWN``,
    ``TRYAGAIN``; on Sentinel ``READONLY``): nothing was done, the connection is dropped, and
    sending it again on a new connection reaches the primary of the moment."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def command_key(command: Sequence[Any]) -> Any | None:
    """The key a command is routed by, or None (no key). redis-py spells some names in two
    words in one argument ("XGROUP CREATE", "SCRIPT LOAD")."""
    args = [*_text(command[0]).split(), *command[1:]]
    name = _text(args[0]).upper()
    if name in _KEYS_AFTER_NUMKEYS:
        return args[3] if len(args) > 3 and int(args[2]) > 0 else None
    if name in ("XREAD", "XREADGROUP"):
        words = [_text(a).upper() if isinstance(a, str | bytes) else "" for a in args]
        return args[words.index("STREAMS") + 1] if "STREAMS" in words else None
    if name in ("XINFO", "XGROUP", "OBJECT", "MEMORY"):
        return args[2] if len(args) > 2 else None
    if name in _KEYLESS or len(args) < 2:
        return None
    return args[1]


def slot_of(key: Any) -> int:
    return key_slot(key if isinstance(key, bytes) else str(key).encode())


class SlotMap:
    """Which primary serves which slot, as a cluster node last said (``CLUSTER SLOTS``)."""

    def __init__(self, seeds: Sequence[tuple[str, int]], connection_class: type[Connection],
                 kwargs: dict[str, Any]) -> None:
        self.seeds = list(seeds)
        self.nodes = list(seeds)
        self._class = connection_class
        self._kwargs = {k: v for k, v in kwargs.items()
                        if k not in ("host", "port", "slot_map", "slot")}
        self._ranges: list[tuple[int, int, tuple[str, int]]] = []
        self._lock: asyncio.Lock | None = None
        self.refreshes = 0

    def direct(self, host: str, port: int) -> Connection:
        """A connection to that node, whatever it serves (the caller disconnects it)."""
        return self._class(host=host, port=port, **self._kwargs)

    def forget(self) -> None:
        """The map may be wrong: ask again at the next connect."""
        self._ranges = []

    def primaries(self) -> list[tuple[str, int]]:
        return list(dict.fromkeys(addr for _, _, addr in self._ranges))

    async def owner(self, slot: int) -> tuple[str, int]:
        if not self._ranges:
            await self.refresh()
        for first, last, address in self._ranges:
            if first <= slot <= last:
                return address
        self.forget()
        raise RedisConnectionError(f"no cluster node serves slot {slot} now")

    async def refresh(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._ranges:  # another connect refreshed it meanwhile
                return
            why: list[str] = []
            for host, port in list(dict.fromkeys(self.nodes + self.seeds)):
                conn = self.direct(host, port)
                try:
                    await conn.connect()  # type: ignore[no-untyped-call]
                    await conn.send_command("CLUSTER", "SLOTS")
                    raw = await conn.read_response()
                except (RedisError, OSError) as exc:
                    why.append(f"{host}:{port}: {' '.join(str(exc).split()) or type(exc).__name__}")
                    continue
                finally:
                    await conn.disconnect(nowait=True)
                ranges, nodes = self._parse(raw, host)
                if ranges:
                    self._ranges = ranges
                    self.nodes = nodes or self.nodes
                    self.refreshes += 1
                    return
            raise RedisConnectionError(f"no cluster node answered CLUSTER SLOTS ({'; '.join(why)})")

    @staticmethod
    def _parse(raw: Any, asked: str) -> tuple[list[tuple[int, int, tuple[str, int]]],
                                              list[tuple[str, int]]]:
        ranges: list[tuple[int, int, tuple[str, int]]] = []
        nodes: list[tuple[str, int]] = []
        for entry in raw or []:
            first, last, *served = entry
            for i, node in enumerate(served):
                address = (_text(node[0]) or asked, int(node[1]))
                nodes.append(address)
                if i == 0:
                    ranges.append((int(first), int(last), address))
        return ranges, list(dict.fromkeys(nodes))


class SlotManagedConnection(Connection):
    """A connection to whichever primary serves its slot when it connects."""

    def __init__(self, **kwargs: Any) -> None:
        self.slot_map: SlotMap = kwargs.pop("slot_map")
        self.slot: int = kwargs.pop("slot")
        super().__init__(**kwargs)

    async def connect_check_health(self, check_health: bool = True,
                                   retry_socket_connect: bool = True) -> None:
        if self.is_connected:
            return
        self.host, self.port = await self.slot_map.owner(self.slot)
        try:
            await super().connect_check_health(check_health, retry_socket_connect=False)
        except (RedisError, OSError):
            self.slot_map.forget()
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except (MovedError, AskError) as exc:
            if exc.slot_id != self.slot:  # a key of another slot sent here: the caller's error
                raise
            # the slot moved (a failover): ask again
            self.slot_map.forget()
            await self.disconnect(nowait=True)
            raise NotServedHere(f"slot {self.slot} is not served here now ({exc})") from exc
        except (ClusterDownError, TryAgainError) as exc:
            # the cluster is between owners: ask again
            self.slot_map.forget()
            await self.disconnect(nowait=True)
            raise NotServedHere(f"slot {self.slot} is not served here now ({exc})") from exc


class SlotManagedSSLConnection(SlotManagedConnection, TLSConnection):
    pass


class SlotConnectionPool(ConnectionPool):
    """The connections of one slot."""

    def __init__(self, slot: int, slot_map: SlotMap, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot = slot
        self.slot_map = slot_map
        self.connection_kwargs.update(slot=slot, slot_map=slot_map)

    def __repr__(self) -> str:
        return f"<SlotConnectionPool(slot={self.slot})>"


class _SlotPipeline(Pipeline):
    """A pipeline sent to the pool of its first command's slot."""

    def __init__(self, owner: SlotRedis, transaction: bool) -> None:
        super().__init__(owner.connection_pool, owner.response_callbacks, transaction, None)
        self._owner = weakref.proxy(owner)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.command_stack:
            self.connection_pool = self._owner.pool_for_key(command_key(self.command_stack[0][0]))
        return await super().execute(raise_on_error)


class SlotRedis(Redis):
    """A ``Redis`` over a Redis Cluster, one pool per slot in use (see the module)."""

    def __init__(self, seeds: Sequence[tuple[str, int]], *, ssl: bool = False,
                 **kwargs: Any) -> None:
        self._connection_class = SlotManagedSSLConnection if ssl else SlotManagedConnection
        self._pool_kwargs = dict(kwargs)
        self.slot_map = SlotMap(seeds, TLSConnection if ssl else Connection, kwargs)
        self._pools: dict[int, SlotConnectionPool] = {}
        self._clients: dict[int, Redis] = {}
        super().__init__(connection_pool=self.pool_for_slot(0))

    def pool_for_slot(self, slot: int) -> SlotConnectionPool:
        pool = self._pools.get(slot)
        if pool is None:
            pool = self._pools[slot] = SlotConnectionPool(
                slot, self.slot_map, connection_class=self._connection_class,
                **self._pool_kwargs,
            )
        return pool

    def pool_for_key(self, key: Any | None) -> SlotConnectionPool:
        return self.pool_for_slot(0 if key is None else slot_of(key))

    def _client(self, slot: int) -> Redis:
        client = self._clients.get(slot)
        if client is None:
            client = self._clients[slot] = Redis(connection_pool=self.pool_for_slot(slot))
        return client

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        words = [*_text(args[0]).upper().split(), *args[1:2]]
        if words[0] == "SCRIPT" and len(words) > 1 and _text(words[1]).upper() == "LOAD":
            return await self._script_load(*args, **options)
        key = command_key(args)
        client = self._client(0 if key is None else slot_of(key))
        return await client.execute_command(*args, **options)  # type: ignore[no-untyped-call]

    async def _script_load(self, *args: Any, **options: Any) -> Any:
        """SCRIPT LOAD on every primary: a script runs on whichever its keys live."""
        if not self.slot_map.primaries():
            await self.slot_map.refresh()
        answer: Any = None
        for host, port in self.slot_map.primaries():
            conn = self.slot_map.direct(host, port)
            try:
                await conn.connect()  # type: ignore[no-untyped-call]
                await conn.send_command(*args)
                answer = await conn.read_response()
            finally:
                await conn.disconnect(nowait=True)
        return answer

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _SlotPipeline(self, transaction)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        for client in self._clients.values():
            await client.aclose()
        for pool in self._pools.values():
            await pool.disconnect()
        self._clients.clear()
        await super().aclose(close_connection_pool)


__all__ = ["NotServedHere", "SlotConnectionPool", "SlotManagedConnection", "SlotMap", "SlotRedis",
           "command_key", "slot_of"]
