"""Redis URLs as both sides print and check them: ``redact_url`` and ``check_redis_url``.

Every URL that fleetgate prints or logs goes through ``redact_url``: the password (in the
user part or in a ``password=``-like query parameter) becomes ``***``. It never parses the URL
with ``urllib``, which reads a password holding ``#``, ``?`` or ``/`` as the start of a
fragment, query or path and would leave the rest of it in plain sight; it works on text that
is not a valid URL at all (``reddis://user:pw@host``, ``redis://:pw@[::1``), and on the forms
with several hosts (``redis+sentinel://user:pw@h1:1,h2:2/svc``, ``redis+cluster://...``).
When in doubt it hides more, never less.

``check_redis_url`` refuses what cannot work (a scheme it does not know, no host, a port that
is not a number, an unreadable IPv6 address, a password holding ``#``, ``?`` or ``/`` unencoded)
with a ``ValueError`` of one line, whose only copy of the URL is the redacted one.

A leaf: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote, urlsplit

REDIS_SCHEMES: Final = frozenset({"redis", "rediss", "unix"})
"""The schemes a single Redis endpoint takes."""
MASK: Final = "***"

_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(//)?")
_SECRET_KEY: Final = re.compile(r"pass|pwd|secret|token|auth|credential", re.I)
# a query parameter: a separator, a name, "=", then the value up to the next "&name=" (a
# secret value may hold "&", "#" or ";": it runs on to where the next parameter clearly starts)
_PARAM: Final = re.compile(r"([?&#;])([^=?&#;]*)=(.*?)(?=[&;][A-Za-z_][A-Za-z0-9_.\-]*=|$)", re.S)


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
        m = _PARAM.match(text, pos) if char in "?&#;" else None
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


def check_redis_url(url: str, schemes: Iterable[str] = REDIS_SCHEMES) -> str:
    """``url`` without surrounding blanks, when it can name a Redis server; else ``ValueError``
    with one line that shows the URL redacted. Schemes ending in ``+sentinel`` or ``+cluster``
    take a comma-separated list of ``host:port``."""
    value = str(url).strip()
    shown = redact_url(value)
    allowed = sorted(schemes)
    match = _SCHEME.match(value)
    scheme = match.group(1).lower() if match else ""
    if match is None or scheme not in allowed or (scheme != "unix" and not match.group(2)):
        forms = [f"{s}://" for s in allowed]
        listed = ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else forms[0]
        raise ValueError(f"must be a {listed} URL, not {shown!r}")
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # "Invalid IPv6 URL": the message never holds the URL
        raise ValueError(f"cannot be read ({exc}): {shown!r}") from None
    netloc = parts.netloc
    after = value[match.end() + len(netloc):]
    if "@" in after and "@" not in netloc:
        raise ValueError(
            "has an '@' after its host (percent-encode a password's '/', '?' and '#' as "
            f"%2F, %3F and %23): {shown!r}"
        )
    if scheme == "unix":
        if not parts.path:
            raise ValueError(f"has no socket path: {shown!r}")
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
            raise ValueError(f"cannot be read (a bad IPv6 address): {shown!r}")
        port = port[1:]
    else:
        name, _, port = host.partition(":")
    if not name:
        raise ValueError(f"has no host: {shown!r}")
    if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError(f"has a port that is not a number from 0 to 65535: {shown!r}")


__all__ = ["MASK", "REDIS_SCHEMES", "check_redis_url", "redact_url"]
