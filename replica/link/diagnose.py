"""What a Redis failure means for the one who wrote the URL: ``diagnose`` and ``short``, and the
check that the server runs scripts (``require_scripting``).

redis-py says what went wrong on the wire ("Connection reset by peer", "Timeout connecting to
server", a 300-character HELLO sentence); the operator needs what to change. ``diagnose(target,
exc)`` reads the error and, where it is not clear alone, asks the server one more question (a
plain PING at a port a TLS client timed out on, a TLS handshake at a port that reset a plain
client, ``INFO server`` and ``SENTINEL MASTERS`` at a server that knows no data command). Its
answer is ``certain`` when the URL or the server can never work as they are (exit 2), else a
likely cause added to the error (the server may still be starting, or be something else).

``preflight(target)`` asks both before a process that runs until stopped (``fleetgate serve``,
``fleetgate-replica``) starts. ``require_scripting(redis)`` loads a one-line script: a server without Lua (Valkey 9 can unload
its scripting engine; a Redis whose ``SCRIPT`` is renamed away) is refused at connect time with
``RedisMisconfigured``, not at the first change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from replica.contract.urls import RedisTarget
from replica.errors import RedisMisconfigured
from replica.link.tls import TLSConnection

log = logging.getLogger(__name__)
_SSL_SOURCE: Final = re.compile(r" \(_ssl\.c:\d+\)")

PROBE_TIMEOUT_S: Final = 2.0
"""How long one diagnostic question may take."""
NOAUTH: Final = "Redis requires a password (NOAUTH): give it in the URL as redis://[USER]:PASSWORD@HOST..."
CLIENT_CERTIFICATE: Final = ("the server requires a client certificate (its TLS alert: certificate "
                              "required): give it as ssl_certfile=PATH&ssl_keyfile=PATH")
WRONGPASS: Final = "Redis refused the user name and password (WRONGPASS): check the URL's USER:PASSWORD"


@dataclass(frozen=True)
class Diagnosis:
    """What to tell: ``message`` (one line); ``certain``: it can never work as it is (exit 2)."""

    message: str
    certain: bool


def short(exc: BaseException) -> str:
    """The error as one short line: the long NOAUTH and WRONGPASS answers by their meaning."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    upper = text.upper()
    if "NOAUTH" in upper or "HELLO MUST BE CALLED WITH THE CLIENT ALREADY AUTHENTICATED" in upper \
            or "AUTHENTICATION REQUIRED" in upper:
        return "requires a password (NOAUTH)"
    if "WRONGPASS" in upper or "INVALID USERNAME-PASSWORD PAIR" in upper:
        return "refused the user name and password (WRONGPASS)"
    return text


async def diagnose(target: RedisTarget, exc: BaseException) -> Diagnosis | None:
    """What ``exc`` (raised reaching what ``target`` names) means, or None when it says all."""
    if isinstance(exc, RedisMisconfigured):  # it says what to fix already
        return None
    text = _SSL_SOURCE.sub("", " ".join(str(exc).split())).rstrip(".")
    said = short(exc)
    if said.startswith("requires a password"):
        return Diagnosis(NOAUTH, True)
    if said.startswith("refused the user name"):
        return Diagnosis(WRONGPASS, True)
    if "scripting engine" in text.lower():
        return Diagnosis(_no_scripting(text), True)
    where = _address(target)
    if "CERTIFICATE_REQUIRED" in text:
        return Diagnosis(CLIENT_CERTIFICATE, True)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        if "mismatch" in text or "hostname" in text.lower():
            fix = ("the certificate does not name the host of the URL: use a name it holds, or "
                   "add ssl_check_hostname=false")
        else:
            fix = "give the CA that signed the server's certificate as ssl_ca_certs=PATH"
        return Diagnosis(f"{text}: {fix}", True)
    if where is None:
        return None
    host, port = where
    lowered = text.lower()
    dropped = "reset by peer" in lowered or "closed by server" in lowered
    # a TLS hello at a plain port: no answer (a timeout), or, when its random bytes hold a line
    # end, an error line or a closed connection, which TLS reads as garbage or a reset
    if target.tls and await _speaks_plain(host, port):
        return Diagnosis(f"{host}:{port} answers without TLS: use redis://, not rediss:// "
                         f"(the TLS handshake failed: {text})", True)
    if "unknown command" in lowered:
        masters = await _sentinel_masters(target, host, port)
        if masters is not None:
            known = ", ".join(masters) or "none yet"
            return Diagnosis(
                f"{host}:{port} is a Sentinel, not a Redis server: use "
                f"redis+sentinel://{_bracket(host)}:{port}/SERVICE (rediss+sentinel:// for TLS); "
                f"its services: {known}", True)
        if "'script'" in text.lower():  # SCRIPT renamed away: no scripts
            return Diagnosis(_no_scripting(text), True)
        return None
    if target.topology == "cluster" and "cluster support disabled" in text.lower():
        return Diagnosis(f"{host}:{port} is not a cluster node (cluster support disabled): use "
                         "redis:// for one server", True)
    if dropped:
        if not target.tls and await _speaks_tls(host, port):
            return Diagnosis(f"{host}:{port} speaks TLS: use rediss:// (the server closed the "
                             "plain connection: Connection reset by peer)", True)
        if target.tls and "ssl_certfile" not in dict(target.tls_options):
            if await _wants_client_certificate(host, port):
                return Diagnosis(CLIENT_CERTIFICATE, True)
            return Diagnosis(f"{text} (likely cause: the server requires a client certificate: "
                             "give it as ssl_certfile=PATH&ssl_keyfile=PATH)", False)
    return None


async def require_scripting(redis: Redis) -> None:
    """Raise ``RedisMisconfigured`` when the server cannot run Lua scripts (fleetgate's changes
    are scripts). A user the ACL does not let load scripts passes: the change says so itself."""
    try:
        await redis.execute_command("SCRIPT", "LOAD", "return 1")  # type: ignore[no-untyped-call]
    except ResponseError as exc:
        text = " ".join(str(exc).split())
        if "scripting engine" in text.lower():
            raise RedisMisconfigured(_no_scripting(text)) from None
        if not text.lower().startswith("noperm"):
            raise  # "unknown command" too: diagnose tells a Sentinel from a SCRIPT renamed away


PREFLIGHT_TIMEOUT_S: Final = 15.0
"""The most ``preflight`` may take, its diagnosis included."""


async def preflight(target: RedisTarget, *, scripts: bool = True) -> None:
    """Ask Redis once, before a process that runs until stopped starts, whether it can work:
    ``RedisMisconfigured`` (one line) when it never can as it is (a password it requires, a TLS
    port reached without TLS..., and with ``scripts`` no Lua: the coordinator's changes are
    scripts; a replica runs none, its ACL user may not even load one, so it only PINGs). An
    unreachable or hung Redis passes: the process starts and retries, as it does when Redis
    goes away later."""
    from replica.link.connect import connect  # connect imports this module

    redis = connect(target, decode_responses=True, socket_connect_timeout=PROBE_TIMEOUT_S * 2.5,
                    socket_timeout=PROBE_TIMEOUT_S * 2.5)
    try:
        async with asyncio.timeout(PREFLIGHT_TIMEOUT_S):
            try:
                if scripts:
                    await require_scripting(redis)
                else:
                    await redis.ping()
            except (RedisError, OSError, TimeoutError) as exc:
                if isinstance(exc, RedisMisconfigured):
                    raise RedisMisconfigured(str(exc)) from None
                found = await diagnose(target, exc)
                if found is not None and found.certain:
                    raise RedisMisconfigured(found.message) from None
                log.info("Redis at %s did not answer before the start (%s): starting all the "
                         "same", target.shown, short(exc))
    except TimeoutError:
        log.info("Redis at %s did not answer within %ss before the start: starting all the same",
                 target.shown, PREFLIGHT_TIMEOUT_S)
    finally:
        await asyncio.shield(_close(redis))


async def _close(redis: Redis) -> None:
    try:
        async with asyncio.timeout(1.0):
            await redis.aclose()
    except (RedisError, OSError, TimeoutError):
        pass


def _no_scripting(text: str) -> str:
    return (f"this Redis server cannot run Lua scripts ({text}), and fleetgate's changes are Lua "
            "scripts: use a server with Lua (on Valkey, load its Lua module)")


def _address(target: RedisTarget) -> tuple[str, int] | None:
    if target.topology != "standalone":
        return target.hosts[0] if target.hosts else None
    parts = urlsplit(target.url)
    if parts.scheme.lower() == "unix" or not parts.hostname:
        return None
    try:
        return parts.hostname, parts.port or 6379
    except ValueError:
        return None


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Close a probe's connection and wait (bounded) until its socket is really closed, so no
    transport outlives the probe, whatever the loop does next."""
    writer.close()
    try:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                await writer.wait_closed()
    finally:
        # A TLS close waits for the server's close_notify (up to asyncio's 30 s shutdown
        # timeout) before it closes the socket: one not done by now, or cut short by the
        # caller's own timeout, is aborted, or its socket outlived the probe (and the loop).
        writer.transport.abort()


async def _speaks_plain(host: str, port: int) -> bool:
    """The port answers a plain ``PING`` as Redis does (``+PONG`` or an ``-ERR``/``-NOAUTH``)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"PING\r\n")
                await writer.drain()
                line = await reader.readline()
            finally:
                await _closed(writer)
    except asyncio.CancelledError:
        raise
    except (OSError, TimeoutError):
        return False
    return line[:1] in (b"+", b"-")


async def _speaks_tls(host: str, port: int) -> bool:
    """A TLS handshake (nothing verified: only whether the port speaks TLS) succeeds."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
            await _closed(writer)
    except asyncio.CancelledError:
        raise
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    return True


async def _wants_client_certificate(host: str, port: int) -> bool:
    """A TLS client without a certificate gets the server's "certificate required" alert (TLS
    1.3 sends it after the handshake: it is read with the first answer)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            try:
                writer.write(b"PING\r\n")
                await writer.drain()
                await reader.readline()
            finally:
                await _closed(writer)
    except asyncio.CancelledError:
        raise
    except ssl.SSLError as exc:
        return "CERTIFICATE_REQUIRED" in str(exc) or "certificate required" in str(exc)
    except (OSError, TimeoutError):
        return False
    return False


async def _sentinel_masters(target: RedisTarget, host: str, port: int) -> list[str] | None:
    """The services the server at host:port monitors when it is a Sentinel, else None."""
    options: dict[str, Any] = dict(target.tls_options)
    if target.topology == "standalone":
        client = Redis.from_url(target.url, socket_timeout=PROBE_TIMEOUT_S,
                                socket_connect_timeout=PROBE_TIMEOUT_S, decode_responses=True)
    else:
        client = Redis(host=host, port=port, ssl=target.tls, username=target.username,
                       password=target.password, socket_timeout=PROBE_TIMEOUT_S,
                       socket_connect_timeout=PROBE_TIMEOUT_S, decode_responses=True, **options)
    if target.tls:  # its connections close at once when dropped (see replica.link.tls)
        client.connection_pool.connection_class = TLSConnection
    try:
        info = await client.execute_command("INFO", "server")  # type: ignore[no-untyped-call]
        if not isinstance(info, dict) or info.get("redis_mode") != "sentinel":
            return None
        masters = await client.execute_command("SENTINEL", "MASTERS")  # type: ignore[no-untyped-call]
    except RedisError:
        return None
    finally:
        await client.aclose()
    return sorted(_names(masters))


def _names(masters: Any) -> list[str]:
    if isinstance(masters, dict):  # redis-py's parsed reply: {name: state}
        return [str(name) for name in masters]
    names: list[str] = []
    for entry in masters or ():
        if isinstance(entry, dict):
            names.append(str(entry.get("name", "")))
        elif isinstance(entry, list | tuple):
            pairs = dict(zip(entry[::2], entry[1::2], strict=False))
            names.append(str(pairs.get("name", "")))
    return [n for n in names if n]


__all__ = ["Diagnosis", "diagnose", "preflight", "require_scripting", "short"]
