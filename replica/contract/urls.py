"""Redis URLs as both sides print and check them: ``redact_url`` and ``check_redis_url``.

Every URL that fleetgate prints or logs goes through ``redact_url``: the password (in the
user part or in a ``password=``-like query parameter) becomes ``***``. It never parses the URL
with ``urllib``, which reads a password holding ``#``, ``?`` or ``/`` as the start of a
fragment, query or path and would leave the rest of it in plain sight; it works on text that
is not a valid URL at all (``reddis://user:pw@host``, ``redis://:pw@[::1``), and on the forms
with several hosts (``redis+sentinel://user:pw@h1:1,h2:2/svc``, ``redis+cluster://...``).
When in doubt it hides more, never less.

``parse_redis_url`` reads every form fleetgate takes into a ``RedisTarget`` (what the
connection factory, ``replica.link.connect``, opens):

* ``redis://``, ``rediss://``, ``unix://``: one server (redis-py reads the URL itself);
* ``redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]`` (``rediss+`` for
  TLS to the sentinels and Redis alike): the master of SERVICE, as the sentinels name it;
* ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+`` for TLS): a Redis
  Cluster, the hosts its seeds.

Every form's query parameters are checked before anything connects
(``replica.contract.urlparams``: which each form takes, of what type; the TLS files are read).
The user part and the parameters are percent-decoded.

``check_redis_url`` refuses what cannot work (a scheme it does not know, no host, a port that
is not a number, an unreadable IPv6 address, a password holding ``#``, ``?`` or ``/`` unencoded,
a Sentinel URL without its service, an unknown or bad parameter, a TLS file that cannot be
read) with a ``ContractError`` (a ``ValueError``) of one line, whose only copy of the URL is
the redacted one.

A leaf: standard library only (and ``urlparams``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

from replica.contract.urlparams import ALL, QUERY_SEPARATOR, TLS, Value, check_parameters
from replica.errors import ContractError

SINGLE_SCHEMES: Final = frozenset({"redis", "rediss", "unix"})
"""The schemes of a single Redis endpoint."""
SENTINEL_SCHEMES: Final = frozenset({"redis+sentinel", "rediss+sentinel"})
CLUSTER_SCHEMES: Final = frozenset({"redis+cluster", "rediss+cluster"})
REDIS_SCHEMES: Final = SINGLE_SCHEMES | SENTINEL_SCHEMES | CLUSTER_SCHEMES
"""Every scheme fleetgate takes."""
Topology = Literal["standalone", "sentinel", "cluster"]
DEFAULT_PORTS: Final = {"sentinel": 26379, "cluster": 6379}
TLS_PARAMETERS: Final = frozenset(TLS)
"""The TLS parameters (every ``rediss`` form takes them)."""
PARAMETERS: Final = ALL
"""Every query parameter some form takes (``replica.contract.urlparams``)."""
MASK: Final = "***"

_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(//)?")
_SECRET_KEY: Final = re.compile(r"pass|pwd|secret|token|auth|credential", re.I)
# a query parameter: a separator, a name, "=", then the value up to the next "&name=" (a
# secret value may hold "&", "#" or ";": it runs on to where the next parameter clearly starts;
# ";" separates nothing, as for the parser: urlparams.QUERY_SEPARATOR)
_PARAM: Final = re.compile(
    rf"([?#{QUERY_SEPARATOR}])([^=?#{QUERY_SEPARATOR}]*)=(.*?)"
    rf"(?={QUERY_SEPARATOR}[A-Za-z_][A-Za-z0-9_.\-]*=|$)", re.S)


def redact_url(url: str) -> str:
    """``url`` with every password replaced by ``***``, as one printable line.

    ``redis://replica:s3cret@redis:6379/0`` gives ``redis://replica:***@redis:6379/0``;
    ``redis://:p#ss@h/0`` gives ``redis://:***@h/0``; ``unix:///run/redis.sock?password=x``
    gives ``unix:///run/redis.sock?password=***``. Characters that are not printable show as
    escapes (``\\x1b``), so the result is safe on a terminal and in a log line.

    Where a URL reads two ways (an "@" after a "/", "?" or "#": a password holding those, or
    an "@" in a query value), what is secret in either reading is hidden.
    """
    text = str(url).strip()
    match = _SCHEME.match(text)
    start = match.end() if match else 0
    secret = [False] * len(text)

    def hide(begin: int, end: int) -> None:
        secret[begin:end] = [True] * (end - begin)

    rest = text[start:]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    # the user part as a URL parser reads it (it ends at the first "/", "?" or "#"), and as a
    # password holding those makes it (it ends at the last "@")
    for userinfo in {authority.rpartition("@")[0], rest.rpartition("@")[0]} - {""}:
        user, colon, _ = userinfo.partition(":")
        if any(c in user for c in "/?#"):
            hide(start, start + len(userinfo))
        elif colon:
            hide(start + len(user) + 1, start + len(userinfo))
    for pos, char in enumerate(text[start:], start):  # every separator: matches may overlap
        m = _PARAM.match(text, pos) if char in "?#" + QUERY_SEPARATOR else None
        if m is not None and _SECRET_KEY.search(unquote(m.group(2))):
            hide(m.start(3), m.end(3))
    out: list[str] = []
    for i, char in enumerate(text):
        if not secret[i]:
            out.append(char)
        elif i == 0 or not secret[i - 1]:
            out.append(MASK)
    return _printable("".join(out))


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True)
class RedisTarget:
    """What a Redis URL names: ``parse_redis_url``'s answer. ``url`` is the URL as given
    (stripped); ``shown`` the same, redacted, for log lines and errors. For ``standalone`` only
    ``url``, ``tls`` and ``shown`` matter (redis-py reads the URL)."""

    topology: Topology
    url: str
    shown: str
    tls: bool = False
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls_options: tuple[tuple[str, Value], ...] = ()
    """``ssl_*`` parameters (``rediss`` forms only), typed, for redis-py."""
    socket_timeout: float | None = None
    socket_connect_timeout: float | None = None

    def __repr__(self) -> str:  # never a password, even in a traceback
        return f"RedisTarget({self.topology}, {self.shown!r})"


def parse_redis_url(url: str, schemes: Iterable[str] = REDIS_SCHEMES) -> RedisTarget:
    """Read ``url`` (see the module docstring); ``ContractError`` with one line naming what is
    wrong, the URL redacted, when it cannot work."""
    value = _check_syntax(url, schemes)
    shown = redact_url(value)
    scheme = value.partition(":")[0].lower()
    tls = scheme.startswith("rediss")
    parts = urlsplit(value)
    if scheme in SINGLE_SCHEMES:
        if scheme != "unix" and parts.path.strip("/"):
            _database(unquote(parts.path.strip("/")), shown)
        single = check_parameters(parts.query, "standalone", tls, scheme, shown)
        return RedisTarget("standalone", value, shown, tls=tls,
                           tls_options=tuple(sorted((k, v) for k, v in single.items() if k in TLS)))
    topology: Topology = "sentinel" if scheme in SENTINEL_SCHEMES else "cluster"
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    hosts = tuple(_host_port(h, DEFAULT_PORTS[topology]) for h in hostlist.split(","))
    segments = [unquote(p) for p in parts.path.split("/")[1:]]
    if segments and segments[-1] == "":
        segments.pop()  # a trailing "/"
    service, db = "", 0
    if topology == "sentinel":
        if not segments or not segments[0]:
            raise ContractError(f"names no Sentinel service (.../SERVICE[/DB]): {shown!r}")
        if len(segments) > 2:
            raise ContractError(f"has more than /SERVICE/DB in its path: {shown!r}")
        service = segments[0]
        if len(segments) == 2:
            db = _database(segments[1], shown)
    elif segments and segments != ["0"]:
        raise ContractError(f"has a path, which a cluster URL does not take (a cluster has "
                            f"database 0 only): {shown!r}")
    params = check_parameters(parts.query, topology, tls, scheme, shown)
    return RedisTarget(
        topology, value, shown, tls=tls, hosts=hosts,
        service=service, db=db,
        username=unquote(user) or None, password=unquote(password) if colon else None,
        sentinel_username=str(params.get("sentinel_username") or "") or None,
        sentinel_password=str(params.get("sentinel_password") or "") or None,
        socket_timeout=_float(params.get("socket_timeout")),
        socket_connect_timeout=_float(params.get("socket_connect_timeout")),
        tls_options=tuple(sorted((k, v) for k, v in params.items() if k in TLS)),
    )

def _host_port(host: str, default: int) -> tuple[str, int]:
    if host.startswith("["):
        name, _, port = host[1:].partition("]")
        port = port[1:]
    else:
        name, _, port = host.partition(":")
    return (name, int(port) if port else default)


def _database(text: str, shown: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ContractError(f"has a database that is not a number: {shown!r}")
    return int(text)


def _float(value: Value | None) -> float | None:
    return None if value is None else float(value)


def check_redis_url(url: str, schemes: Iterable[str] = REDIS_SCHEMES) -> str:
    """``url`` without surrounding blanks, when it can name a Redis server; else
    ``ContractError`` (a ``ValueError``) with one line that shows the URL redacted. Schemes
    ending in ``+sentinel`` or ``+cluster`` take a comma-separated list of ``host:port``."""
    return parse_redis_url(url, schemes).url


def _check_syntax(url: str, schemes: Iterable[str]) -> str:
    value = str(url).strip()
    shown = redact_url(value)
    allowed = sorted(schemes)
    match = _SCHEME.match(value)
    scheme = match.group(1).lower() if match else ""
    if match is None or scheme not in allowed or (scheme != "unix" and not match.group(2)):
        forms = [f"{s}://" for s in allowed]
        listed = ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else forms[0]
        raise ContractError(f"must be a {listed} URL, not {shown!r}")
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # "Invalid IPv6 URL": the message never holds the URL
        raise ContractError(f"cannot be read ({exc}): {shown!r}") from None
    netloc = parts.netloc
    after = value[match.end() + len(netloc):]
    if "@" in after and "@" not in netloc:
        raise ContractError(
            "has an '@' after its host (percent-encode a password's '/', '?' and '#' as "
            f"%2F, %3F and %23): {shown!r}"
        )
    if scheme == "unix":
        if not parts.path:
            raise ContractError(f"has no socket path: {shown!r}")
        return value
    hosts = netloc.rpartition("@")[2]
    several = scheme.endswith(("+sentinel", "+cluster"))
    for host in hosts.split(",") if several else [hosts]:
        _check_host(host, shown)
    return value


def _check_host(host: str, shown: str) -> None:
    if host.startswith("["):
        name, _, port = host[1:].partition("]")
        if port and not port.startswith(":"):
            raise ContractError(f"cannot be read (a bad IPv6 address): {shown!r}")
        port = port[1:]
    else:
        name, _, port = host.partition(":")
    if not name:
        raise ContractError(f"has no host: {shown!r}")
    if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ContractError(f"has a port that is not a number from 0 to 65535: {shown!r}")


__all__ = [
    "CLUSTER_SCHEMES",
    "MASK",
    "PARAMETERS",
    "REDIS_SCHEMES",
    "SENTINEL_SCHEMES",
    "SINGLE_SCHEMES",
    "TLS_PARAMETERS",
    "RedisTarget",
    "Topology",
    "check_redis_url",
    "parse_redis_url",
    "redact_url",
]
