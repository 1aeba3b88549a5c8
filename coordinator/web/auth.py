"""Who is calling the HTTP API: Bearer tokens mapped to named operators with a role.

Tokens come from ``FLEETGATE_ADMIN_TOKEN`` (named ``FLEETGATE_ADMIN_NAME``),
``FLEETGATE_VIEW_TOKEN`` (named ``FLEETGATE_VIEW_NAME``) and ``FLEETGATE_TOKENS_FILE``, a file of
several named operators, either JSON::

    [{"name": "alice", "token": "...", "role": "admin"}, {"name": "grafana", "token": "...", "role": "view"}]

(or ``{"alice": {"token": "...", "role": "admin"}, ...}``), or lines of ``name:token`` (role
admin), ``name:token:role`` or ``name:token:role:fleet,fleet``; blank lines and ``#`` comments
are skipped. An entry's ``fleets`` (a JSON list of fleet names, or the line's fourth field)
limits its token to those fleets (``Operator.may_use``); without it the token may act on every
fleet. The API answers 403 to a token used on a fleet it is not given.

A presented token is compared with every configured token by ``hmac.compare_digest`` (no early
exit, so the time taken does not say which token came close). An admin may read and write; a
viewer may only read. The identity the audit trail records is the token's configured name,
never something the request body says.
"""

from __future__ import annotations

import enum
import hmac
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from coordinator.settings import CoordinatorSettings
from replica.contract import validate_fleet
from replica.contract.reasons import check_by
from replica.errors import ConfigError, ContractError

log = logging.getLogger(__name__)

MIN_TOKEN_LEN: Final = 16
"""Tokens shorter than this work but are logged as weak."""
MAX_TOKEN_LEN: Final = 4096


class Role(enum.StrEnum):
    ADMIN = "admin"
    VIEW = "view"


@dataclass(frozen=True, slots=True)
class Operator:
    """The caller, as the audit trail names it. ``fleets``: the fleets its token is limited
    to (None: every fleet)."""

    name: str
    role: Role
    fleets: frozenset[str] | None = None

    @property
    def can_write(self) -> bool:
        return self.role is Role.ADMIN

    def may_use(self, fleet: str) -> bool:
        """Whether this operator's token may read (and, if admin, change) ``fleet``."""
        return self.fleets is None or fleet in self.fleets


class TokenEntry(NamedTuple):
    """One configured token: who, the token, the role, and the fleets it is limited to."""

    name: str
    token: str
    role: Role
    fleets: frozenset[str] | None = None


ANONYMOUS: Final = Operator("anonymous", Role.ADMIN)
"""Who everyone is under ``--insecure-no-auth``."""


@dataclass(frozen=True, slots=True)
class _Entry:
    operator: Operator
    token: bytes


class TokenStore:
    """The configured tokens. ``authenticate(token)`` returns the operator or None."""

    def __init__(self, entries: Iterable[TokenEntry | tuple[str, str, Role]] = ()) -> None:
        self._entries: list[_Entry] = []
        seen: dict[bytes, str] = {}
        for entry in entries:
            name, token, role, fleets = TokenEntry(*entry)
            raw = _check_token(name, token)
            if raw in seen:
                raise ConfigError(f"operators {seen[raw]!r} and {name!r} have the same token")
            seen[raw] = name
            self._entries.append(_Entry(Operator(_check_name(name), role, fleets), raw))
            if len(raw) < MIN_TOKEN_LEN:
                log.warning(
                    "the token of %s is shorter than %d characters: use a long random one",
                    name, MIN_TOKEN_LEN,
                )

    @classmethod
    def from_settings(cls, settings: CoordinatorSettings) -> TokenStore:
        """Raises ``ConfigError`` for a tokens file that cannot be read or a duplicate token."""
        entries: list[TokenEntry] = []
        admin = settings.secret("admin_token")
        if admin is not None:
            entries.append(TokenEntry(settings.admin_name, admin, Role.ADMIN))
        view = settings.secret("view_token")
        if view is not None:
            entries.append(TokenEntry(settings.view_name, view, Role.VIEW))
        if settings.tokens_file is not None:
            entries.extend(load_tokens_file(settings.tokens_file))
        return cls(entries)

    @property
    def has_admin(self) -> bool:
        return any(e.operator.role is Role.ADMIN for e in self._entries)

    @property
    def operators(self) -> list[Operator]:
        return [e.operator for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str | None) -> Operator | None:
        """The operator whose token this is, or None. Compares against every token."""
        if not token or len(token) > MAX_TOKEN_LEN:
            return None
        presented = token.encode("utf-8", errors="surrogateescape")
        found: Operator | None = None
        for entry in self._entries:
            if hmac.compare_digest(presented, entry.token) and found is None:
                found = entry.operator
        return found


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None if absent or malformed)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def load_tokens_file(path: Path) -> list[TokenEntry]:
    """The entries of a tokens file (JSON or ``name:token[:role[:fleets]]`` lines). Raises
    ``ConfigError`` naming the file (and line) for anything it cannot read."""
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read tokens file {path}: {exc}") from None
    stripped = content.lstrip()
    if stripped.startswith(("[", "{")):
        return _from_json(path, stripped)
    return _from_lines(path, content)


def _from_json(path: Path, content: str) -> list[TokenEntry]:
    try:
        data: Any = json.loads(content)
    except ValueError as exc:
        raise ConfigError(f"tokens file {path} is not valid JSON: {exc}") from None
    items: list[tuple[str, Any]] = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = [(str(i), v) for i, v in enumerate(data)]
    else:
        raise ConfigError(f"tokens file {path}: expected a list or an object")
    out: list[TokenEntry] = []
    for key, value in items:
        if not isinstance(value, dict):
            raise ConfigError(f"tokens file {path}: entry {key} is not an object")
        name = value.get("name", key if isinstance(data, dict) else None)
        token = value.get("token")
        if not isinstance(name, str) or not isinstance(token, str):
            raise ConfigError(f"tokens file {path}: entry {key} needs a string name and token")
        role = _role(path, key, value.get("role", "admin"))
        out.append(TokenEntry(name, token, role, _fleets(path, f"entry {key}", value.get("fleets"))))
    return out


def _from_lines(path: Path, content: str) -> list[TokenEntry]:
    out: list[TokenEntry] = []
    for number, raw in enumerate(content.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        if len(parts) not in (2, 3, 4) or not parts[0].strip() or not parts[1].strip():
            raise ConfigError(
                f"tokens file {path} line {number}: expected name:token[:role[:fleet,fleet]]"
            )
        where = f"line {number}"
        role = _role(path, where, parts[2].strip() if len(parts) >= 3 else "admin")
        fleets = _fleets(path, where, parts[3].split(",")) if len(parts) == 4 else None
        out.append(TokenEntry(parts[0].strip(), parts[1].strip(), role, fleets))
    return out


def _role(path: Path, where: str, value: Any) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ConfigError(f"tokens file {path} {where}: role must be admin or view") from None


def _fleets(path: Path, where: str, value: Any) -> frozenset[str] | None:
    """An entry's ``fleets``: None (absent: every fleet) or a non-empty set of fleet names."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"tokens file {path} {where}: fleets must be a list of fleet names")
    names = frozenset(v.strip() for v in value if v.strip())
    if not names:
        raise ConfigError(
            f"tokens file {path} {where}: fleets is empty (leave it out for every fleet)"
        )
    for name in names:
        try:
            validate_fleet(name)
        except ContractError:
            raise ConfigError(
                f"tokens file {path} {where}: fleets: {name[:70]!r} is not a fleet name"
            ) from None
    return names


def _check_name(name: str) -> str:
    """An operator's name becomes the ``by`` of their changes: the contract's rule for ``by``."""
    try:
        return check_by(name)
    except ContractError as exc:
        raise ConfigError(f"operator name: {exc}") from None


def _check_token(name: str, token: str) -> bytes:
    if not token or len(token) > MAX_TOKEN_LEN or any(c.isspace() for c in token):
        raise ConfigError(f"the token of {name[:40]!r} must be 1 to {MAX_TOKEN_LEN} characters without spaces")
    return token.encode("utf-8", errors="surrogateescape")


__all__ = [
    "ANONYMOUS", "Operator", "Role", "TokenEntry", "TokenStore", "bearer_token", "load_tokens_file",
]
