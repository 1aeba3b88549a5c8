"""The query parameters of a Redis URL: which each form takes, of what type, checked before
anything connects (``check_parameters``).

Every form takes ``socket_timeout`` and ``socket_connect_timeout`` (seconds), and its TLS form
(``rediss://``, ``rediss+sentinel://``, ``rediss+cluster://``) the same TLS parameters:
``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` (files, read here: a missing or unreadable
one, a CA file with no certificate, a certificate without its key are named with their path),
``ssl_cert_reqs`` (none, optional, required) and ``ssl_check_hostname`` (true or false). The
single-server forms also take what redis-py reads from such a URL (``db``, ``username``,
``password``, ``client_name``, ``protocol``, ``socket_keepalive``, ``retry_on_timeout``,
``health_check_interval``, ``max_connections``); Sentinel takes ``sentinel_username`` and
``sentinel_password``. Anything else, a parameter given twice or a value of the wrong type is a
``ContractError`` of one line (with the nearest name when it looks like a typo).

The query is split on ``&`` only (``QUERY_SEPARATOR``), by both this parser and the redaction
(``replica.contract.urls.redact_url``), so a password holding ``;`` is one value to both.
"""

from __future__ import annotations

import difflib
import math
import os
import ssl
from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qsl

from replica.errors import ContractError

QUERY_SEPARATOR: Final = "&"
"""What separates two query parameters, for parsing and redaction alike."""
CERT_REQS: Final = ("none", "optional", "required")
TRUE: Final = frozenset({"1", "true", "t", "yes", "y"})
FALSE: Final = frozenset({"0", "false", "f", "no", "n"})
"""The boolean spellings whose meaning redis-py reads the same way."""

Value = str | bool | int | float
Checker = Callable[[str, str], Value]
"""(name, raw value) -> the value, or ValueError with what the value must be."""


def _seconds(name: str, raw: str) -> Value:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError(f"a {name} that is not a positive number of seconds")
    return value


def _count(minimum: int) -> Checker:
    def check(name: str, raw: str) -> Value:
        if not (raw.isascii() and raw.isdigit() and int(raw) >= minimum):
            raise ValueError(f"a {name} that is not a whole number from {minimum}")
        return int(raw)
    return check


def _boolean(name: str, raw: str) -> Value:
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ValueError(f"a {name} that is not true or false")


def _cert_reqs(name: str, raw: str) -> Value:
    if raw not in CERT_REQS:
        raise ValueError(f"an {name} that is not {', '.join(CERT_REQS)}")
    return raw


def _protocol(name: str, raw: str) -> Value:
    if raw not in ("2", "3"):
        raise ValueError(f"a {name} that is not 2 or 3 (RESP2 or RESP3)")
    return int(raw)


def _text(name: str, raw: str) -> Value:
    return raw


COMMON: Final[dict[str, Checker]] = {"socket_timeout": _seconds, "socket_connect_timeout": _seconds}
TLS: Final[dict[str, Checker]] = {
    "ssl_ca_certs": _text, "ssl_certfile": _text, "ssl_keyfile": _text,
    "ssl_cert_reqs": _cert_reqs, "ssl_check_hostname": _boolean,
}
"""The TLS parameters, the same on every ``rediss`` form."""
TLS_FILES: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
SINGLE: Final[dict[str, Checker]] = COMMON | {
    "db": _count(0), "username": _text, "password": _text, "client_name": _text,
    "protocol": _protocol, "socket_keepalive": _boolean, "retry_on_timeout": _boolean,
    "health_check_interval": _count(0), "max_connections": _count(1),
}
SENTINEL: Final[dict[str, Checker]] = COMMON | {"sentinel_username": _text, "sentinel_password": _text}
CLUSTER: Final[dict[str, Checker]] = dict(COMMON)
ALL: Final = frozenset(SINGLE) | frozenset(SENTINEL) | frozenset(TLS)


def taken(topology: str, tls: bool) -> dict[str, Checker]:
    """The parameters of a form: its topology's, and the TLS ones with ``rediss``."""
    own = {"standalone": SINGLE, "sentinel": SENTINEL, "cluster": CLUSTER}[topology]
    return own | TLS if tls else dict(own)


def check_parameters(query: str, topology: str, tls: bool, scheme: str, shown: str) -> dict[str, Value]:
    """The parameters of ``query`` (percent-decoded, typed), or ``ContractError`` naming the
    first that is unknown to the form, given twice or of the wrong type. TLS files are read."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query),
                          separator=QUERY_SEPARATOR)
    except ValueError:
        raise ContractError(f"has a query that cannot be read: {shown!r}") from None
    checkers = taken(topology, tls)
    params: dict[str, Value] = {}
    for name, raw in pairs:
        shown_name = name if name.isprintable() else ascii(name)[1:-1]
        if name not in checkers:
            raise ContractError(f"{_refusal(name, shown_name, topology, tls, scheme, checkers)}: {shown!r}")
        if name in params:
            raise ContractError(f"has the query parameter {shown_name!r} twice: {shown!r}")
        try:
            params[name] = checkers[name](name, raw)
        except ValueError as exc:
            raise ContractError(f"has {exc}: {shown!r}") from None
    _check_tls_files({k: str(v) for k, v in params.items() if k in TLS_FILES}, shown)
    return params


def _refusal(name: str, shown_name: str, topology: str, tls: bool, scheme: str,
             checkers: dict[str, Checker]) -> str:
    if name in TLS and not tls:
        return f"has {name}, which only a rediss URL (TLS) takes, not a {scheme}:// one"
    if name.startswith("sentinel_") and name in SENTINEL:
        return f"has {name}, which only a Sentinel URL takes"
    near = difflib.get_close_matches(name, sorted(checkers), n=1, cutoff=0.75)
    if near:
        hint = f"did you mean {near[0]}?"
    else:
        hint = f"a {scheme}:// URL takes {', '.join(sorted(checkers))}"
    return f"has a query parameter {shown_name!r} it does not take ({hint})"


def _check_tls_files(files: dict[str, str], shown: str) -> None:
    """Each TLS file exists and can be read, the CA file holds certificates, the certificate
    goes with its key: else one line naming the parameter and the path."""
    for name, path in files.items():
        where = f"{name}={path!r}"
        if not path:
            raise ContractError(f"has an empty {name}: {shown!r}")
        if not os.path.exists(path):
            raise ContractError(f"has {where}: no such file: {shown!r}")
        if not os.path.isfile(path):
            raise ContractError(f"has {where}, which is not a file: {shown!r}")
        if not os.access(path, os.R_OK):
            raise ContractError(f"has {where}, which this user cannot read: {shown!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca = files.get("ssl_ca_certs")
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ContractError(f"has ssl_ca_certs={ca!r}, which holds no PEM certificate "
                                f"({_reason(exc)}): {shown!r}") from None
    cert, key = files.get("ssl_certfile"), files.get("ssl_keyfile")
    if key is not None and cert is None:
        raise ContractError(f"has ssl_keyfile={key!r} without ssl_certfile (the client "
                            f"certificate the key goes with): {shown!r}")
    if cert is None:
        return
    try:
        # a key under a passphrase fails here rather than prompting on the terminal
        context.load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, ValueError) as exc:
        if key is None:
            why = (f"has ssl_certfile={cert!r} without ssl_keyfile, and that file holds no "
                   "private key: give the key's file as ssl_keyfile=PATH")
        else:
            why = (f"has ssl_certfile={cert!r} and ssl_keyfile={key!r}, which are not a "
                   f"certificate and its unencrypted key ({_reason(exc)})")
        raise ContractError(f"{why}: {shown!r}") from None


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)  # KEY_VALUES_MISMATCH, NO_CERTIFICATE_OR_CRL_FOUND...
    return str(reason or exc.__class__.__name__).lower().replace("_", " ")


__all__ = [
    "ALL",
    "CERT_REQS",
    "QUERY_SEPARATOR",
    "TLS",
    "TLS_FILES",
    "Value",
    "check_parameters",
    "taken",
]
