"""The one connection factory: every part of fleetgate that opens Redis calls ``connect``.

``connect(url, **options)`` reads the URL (``replica.contract.urls.parse_redis_url``: a bad one
raises ``ContractError`` with one line, the password redacted) and returns a
``redis.asyncio.Redis`` for the topology it names:

* ``redis://``, ``rediss://``, ``unix://``: ``Redis.from_url``;
* ``redis+sentinel://``: the master of the service, through ``redis.asyncio.sentinel``: each
  new connection asks the sentinels where the master is, and a ``READONLY`` reply (a master
  demoted under it) drops the connection so that the next one asks again (``NotServedHere``:
  nothing was written, sending it again is safe); closing the client closes the sentinel
  connections too;
* ``redis+cluster://``: ``replica.link.slots.SlotRedis``: one pool per slot, each
  connection reaching the slot's primary of the moment.

``options`` are redis-py's (``decode_responses``, the timeouts, ``health_check_interval``...);
the URL's ``socket_timeout`` and ``socket_connect_timeout`` win over them.

``topology(redis)`` tells which it is; ``sharded(redis)``: the control and acknowledgement
channels use sharded pub/sub (``SSUBSCRIBE``/``SPUBLISH``), on a cluster only (on one server or
Sentinel plain ``PUBLISH`` reaches the same subscribers and works on any Redis version);
``pool_for(redis, key)`` is the pool whose connections reach ``key`` (the fleet's slot on a
cluster; the client's pool otherwise), which the raw connections of the controller, the
subscriptions, the work reader and the change script take theirs from.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import Connection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from replica.contract.urls import RedisTarget, Topology, parse_redis_url
from replica.errors import RedisMisconfigured
from replica.link.diagnose import short
from replica.link.slots import NotServedHere, SlotRedis
from replica.link.tls import TLSConnection

log = logging.getLogger(__name__)


class ServiceUnknown(MasterNotFoundError, RedisMisconfigured):
    """Every sentinel answered and none knows the service (or each refused the credentials):
    asking again will not help (exit 2). Still a ``MasterNotFoundError`` for those who retry."""


class _Sentinel(Sentinel):
    """redis-py's ``Sentinel``, whose "no master" error is one short line: why the sentinels
    gave no master, each reason once with the sentinels that gave it (redis-py's lists whole
    client reprs, and the NOAUTH sentence once per sentinel), and the services they do know
    when none knows this one."""

    async def discover_master(self, service_name: str) -> Any:
        why: dict[str, list[str]] = {}
        known: set[str] = set()
        answered = misconfigured = 0
        for number, sentinel in enumerate(self.sentinels):
            kwargs = sentinel.connection_pool.connection_kwargs
            where = f"{kwargs.get('host')}:{kwargs.get('port')}"
            try:
                masters: Any = await sentinel.sentinel_masters()
            except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                said = _without_address(short(exc), kwargs.get("host"), kwargs.get("port"))
                if "unknown command" in said.lower():
                    misconfigured += 1
                    said = "not a Sentinel (no SENTINEL command): use redis:// for one server"
                elif said.startswith(("requires a password", "refused the user name")):
                    misconfigured += 1
                    said += " (the sentinels' own: sentinel_username, sentinel_password)"
                why.setdefault(said, []).append(where)
                continue
            answered += 1
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                ip = self._force_master_ip if self._force_master_ip is not None else state["ip"]
                return ip, state["port"]
            if state:
                why.setdefault(f"no master {service_name!r} in a good state", []).append(where)
            else:
                known.update(str(name) for name in masters)
                why.setdefault(f"knows no service {service_name!r}", []).append(where)
        said = "; ".join(f"{', '.join(sentinels)}: {reason}" for reason, sentinels in why.items())
        message = f"no sentinel names a master for {service_name!r} ({said})"
        unknown = answered > 0 and answered == len(why.get(f"knows no service {service_name!r}", ()))
        if unknown and answered + misconfigured == len(self.sentinels):
            listed = ", ".join(sorted(known)) or "none"
            raise ServiceUnknown(f"{message}: the services they know: {listed}")
        if misconfigured == len(self.sentinels):
            raise ServiceUnknown(message)
        raise MasterNotFoundError(message)


def _without_address(text: str, host: Any, port: Any) -> str:
    """An error without the sentinel's own address, so that sentinels failing alike say it once
    ("Error 111 connecting to h:1. Connect call failed ('h', 1)." -> "Error 111: connection
    refused")."""
    text = re.sub(r"Connect call failed \(.*?\)\.?", "connection refused", text)
    text = text.replace(f" connecting to {host}:{port}.", ":").replace(f" connecting to {host}:{port}", "")
    return " ".join(text.replace(f"{host}:{port}", "").split()).rstrip(".")


class _SentinelConnection(SentinelManagedConnection):
    """A connection to the master the sentinels name; a ``READONLY`` answer (the master was
    demoted under it) drops it and raises ``NotServedHere``: nothing was written."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await Connection.read_response(self, *args, **kwargs)
        except ReadOnlyError as exc:
            await self.disconnect()
            raise NotServedHere(f"the master was demoted ({exc})") from exc


class _SentinelSSLConnection(_SentinelConnection, TLSConnection):
    pass


class _SentinelPool(SentinelConnectionPool):
    """The master's pool; its ``disconnect`` (the client's ``aclose``) closes the sentinel
    connections too, so a closed client leaves nothing open."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.connection_pool.disconnect(inuse_connections)


def connect(url: str | RedisTarget, **options: Any) -> Redis:
    """A client of what ``url`` names (see the module docstring). Opens nothing yet: the
    first command connects."""
    target = url if isinstance(url, RedisTarget) else parse_redis_url(url)
    if target.topology == "standalone":
        standalone = Redis.from_url(target.url, **options)
        if target.tls:  # the URL names SSLConnection: ours drops a connection at once
            standalone.connection_pool.connection_class = TLSConnection
        return standalone
    if target.socket_timeout is not None:
        options["socket_timeout"] = target.socket_timeout
    if target.socket_connect_timeout is not None:
        options["socket_connect_timeout"] = target.socket_connect_timeout
    if target.username is not None:
        options["username"] = target.username
    if target.password is not None:
        options["password"] = target.password
    options.update(target.tls_options)
    if target.topology == "sentinel":
        sentinel_kwargs: dict[str, Any] = {
            k: options[k] for k in ("socket_timeout", "socket_connect_timeout", "client_name")
            if k in options
        }
        if target.sentinel_username is not None:
            sentinel_kwargs["username"] = target.sentinel_username
        if target.sentinel_password is not None:
            sentinel_kwargs["password"] = target.sentinel_password
        if target.tls:
            sentinel_kwargs["ssl"] = True
            sentinel_kwargs.update(target.tls_options)
        # one try per sentinel and discovery: the discovery tries them all, and its caller
        # retries (redis-py's default, ten tries with backoff, took 14 s to say "unreachable")
        sentinel_kwargs["retry"] = Retry(NoBackoff(), 0)
        sentinels = _Sentinel(  # type: ignore[no-untyped-call]
            list(target.hosts), sentinel_kwargs=sentinel_kwargs
        )
        client: Redis = sentinels.master_for(
            target.service, redis_class=Redis, connection_pool_class=_SentinelPool,
            connection_class=_SentinelSSLConnection if target.tls else _SentinelConnection,
            db=target.db, **options,
        )
        return client
    return SlotRedis(target.hosts, ssl=target.tls, **options)


def topology(redis: Redis) -> Topology:
    """standalone, sentinel or cluster: what ``redis`` reaches."""
    if isinstance(redis, SlotRedis):
        return "cluster"
    if isinstance(redis.connection_pool, SentinelConnectionPool):
        return "sentinel"
    return "standalone"


def sharded(redis: Redis) -> bool:
    """The fleet's channels use sharded pub/sub (SSUBSCRIBE/SPUBLISH): on a cluster."""
    return isinstance(redis, SlotRedis)


def pool_for(redis: Redis, key: str | bytes) -> ConnectionPool:
    """The pool whose connections reach ``key``'s node."""
    if isinstance(redis, SlotRedis):
        return redis.pool_for_key(key)
    return redis.connection_pool


__all__ = ["NotServedHere", "ServiceUnknown", "connect", "pool_for", "sharded", "topology"]
