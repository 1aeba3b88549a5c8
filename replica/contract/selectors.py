"""Replica labels and label selectors, in Kubernetes syntax: one parser for both sides.

A replica carries labels (``FLEETGATE_LABELS="zone=eu-west-1a,version=1.4.2"``, written to its
record as the JSON field ``labels``); a hold may carry a selector (the hold's ``select``), and
then holds only the replicas whose labels match it. The coordinator parses a selector before it
writes it (``pause --select``), every replica parses it again from the state it applies: the
same code, so both sides agree on what matches.

Labels follow Kubernetes' rules: a key is an optional DNS-subdomain prefix and ``/`` (at most
253 characters) and a name of at most 63 characters, ``[A-Za-z0-9]`` at both ends and
``-_.`` allowed inside; a value is empty or of the form of a name.

A selector is requirements joined by ``,`` (all must hold):

=====================  ====================================================================
``key=value``          the label is there with that value (``key==value`` is the same)
``key!=value``         the label is absent or has another value
``key in (a, b)``      the label is there with one of the values
``key notin (a, b)``   the label is absent or has none of the values
``key``                the label is there (any value)
``!key``               the label is absent
=====================  ====================================================================

``parse_selector`` raises ``ContractError`` with one line naming what is wrong; anything it
accepts prints back (``str``) in a canonical form that parses to the same selector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from replica.errors import ContractError

MAX_SELECTOR_LEN: Final = 1000
"""The longest selector accepted (characters)."""
MAX_LABELS: Final = 64
"""The most labels a replica may carry."""

_NAME_RE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_PREFIX_RE: Final = re.compile(
    r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)

EQUALS: Final = "="
NOT_EQUALS: Final = "!="
IN: Final = "in"
NOT_IN: Final = "notin"
EXISTS: Final = "exists"
NOT_EXISTS: Final = "!"


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key, or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or _PREFIX_RE.fullmatch(prefix) is None):
        return f"label key {key[:80]!r}: its prefix must be a DNS subdomain (lowercase)"
    if _NAME_RE.fullmatch(name) is None:
        return (f"label key {key[:80]!r}: a name of 1 to 63 characters, letters, digits and "
                "-_. with a letter or digit at both ends")
    return None


def label_value_error(key: str, value: str) -> str | None:
    """Why ``value`` is not a Kubernetes label value (for ``key``), or None."""
    if value == "" or _NAME_RE.fullmatch(value) is not None:
        return None
    return (f"label {key[:80]}: value {value[:80]!r} must be empty or up to 63 letters, digits "
            "and -_. with a letter or digit at both ends")


def parse_labels(text: str) -> dict[str, str]:
    """``"zone=eu-west-1a,version=1.4.2"`` as a mapping (an empty text: no labels). Raises
    ``ContractError`` with one line for a pair that is not ``key=value``, a key or value that
    breaks the Kubernetes rules, a key given twice or more than ``MAX_LABELS`` labels."""
    labels: dict[str, str] = {}
    if not text.strip():
        return labels
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not eq:
            raise ContractError(f"label {part.strip()[:80]!r} is not key=value")
        why = label_key_error(key) or label_value_error(key, value)
        if why is not None:
            raise ContractError(why)
        if key in labels:
            raise ContractError(f"label {key[:80]} is given twice")
        labels[key] = value
    if len(labels) > MAX_LABELS:
        raise ContractError(f"{len(labels)} labels: at most {MAX_LABELS}")
    return labels


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` checked by the same rules (a mapping read back from a record, a pod's
    labels). Raises ``ContractError``."""
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ContractError("labels must map text to text")
        why = label_key_error(key) or label_value_error(key, value)
        if why is not None:
            raise ContractError(why)
        out[key] = value
    if len(out) > MAX_LABELS:
        raise ContractError(f"{len(out)} labels: at most {MAX_LABELS}")
    return out


def format_labels(labels: Mapping[str, str]) -> str:
    """``zone=eu-west-1a,version=1.4.2`` (sorted by key), the form ``parse_labels`` reads."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a selector: ``key``, an operator and its values (sorted)."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.op
        if op == EXISTS:
            return value is not None
        if op == NOT_EXISTS:
            return value is None
        if op in (EQUALS, IN):
            return value is not None and value in self.values
        return value is None or value not in self.values  # != and notin

    def __str__(self) -> str:
        op = self.op
        if op == EXISTS:
            return self.key
        if op == NOT_EXISTS:
            return "!" + self.key
        if op in (EQUALS, NOT_EQUALS):
            return f"{self.key}{op}{self.values[0]}"
        return f"{self.key} {op} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed label selector: all its requirements must hold."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a replica with ``labels`` is selected."""
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# -- the parser: a lexer of identifiers and symbols, then one requirement per comma

_SYMBOLS: Final = ("==", "!=", "=", "!", "(", ")", ",")
_TOKEN_RE: Final = re.compile(r"\s*(?:(==|!=|=|!|\(|\)|,)|([^\s!=(),]+))")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    end = len(text.rstrip())
    while pos < end:
        m = _TOKEN_RE.match(text, pos)
        if m is None:  # pragma: no cover - the pattern matches any non-blank rest
            raise ContractError(f"selector {text[:80]!r}: unreadable at {pos}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def fail(self, what: str) -> ContractError:
        return ContractError(f"selector {self.text[:120]!r}: {what}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        if token is not None:
            self.pos += 1
        return token

    def identifier(self, what: str) -> str:
        token = self.take()
        if token is None or token in _SYMBOLS:
            raise self.fail(f"expected {what}, found {token or 'the end'}")
        return token

    def key(self) -> str:
        key = self.identifier("a label key")
        why = label_key_error(key)
        if why is not None:
            raise self.fail(why)
        return key

    def value(self, key: str) -> str:
        token = self.peek()
        if token is None or token in (",", ")"):
            return ""  # key= (an empty value)
        value = self.identifier("a value")
        why = label_value_error(key, value)
        if why is not None:
            raise self.fail(why)
        return value

    def values(self, key: str, op: str) -> tuple[str, ...]:
        if self.take() != "(":
            raise self.fail(f"{op} needs a list of values in parentheses after {key}")
        values: set[str] = set()
        while True:
            values.add(self.value(key))
            token = self.take()
            if token == ")":
                break
            if token != ",":
                raise self.fail(f"expected , or ) in the values of {key}, "
                                f"found {token or 'the end'}")
        if values == {""}:
            raise self.fail(f"{op} needs at least one value for {key}")
        return tuple(sorted(values))

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.key(), NOT_EXISTS)
        key = self.key()
        token = self.peek()
        if token is None or token == ",":
            return Requirement(key, EXISTS)
        self.take()
        if token in ("=", "=="):
            return Requirement(key, EQUALS, (self.value(key),))
        if token == "!=":
            return Requirement(key, NOT_EQUALS, (self.value(key),))
        if token in (IN, NOT_IN):
            return Requirement(key, token, self.values(key, token))
        raise self.fail(f"expected =, ==, !=, in or notin after {key}, found {token}")

    def selector(self) -> Selector:
        if not self.tokens:
            raise self.fail("empty: name at least one requirement, such as zone=eu-west-1a")
        requirements = [self.requirement()]
        while self.pos < len(self.tokens):
            token = self.take()
            if token != ",":
                raise self.fail(f"expected , between requirements, found {token}")
            requirements.append(self.requirement())
        return Selector(tuple(requirements))


def parse_selector(text: str) -> Selector:
    """A label selector (Kubernetes syntax) from ``text``. Raises ``ContractError`` with one
    line for anything else (never another exception)."""
    if not isinstance(text, str):
        raise ContractError("a selector is text")
    if len(text) > MAX_SELECTOR_LEN:
        raise ContractError(f"selector of {len(text)} characters: at most {MAX_SELECTOR_LEN}")
    if not text.isprintable():
        raise ContractError(f"selector {text[:80]!r}: control characters")
    return _Parser(text).selector()


def canonical_selector(text: str) -> str:
    """``text`` parsed and printed back: what a hold's ``select`` stores. Raises
    ``ContractError``."""
    return str(parse_selector(text))


__all__ = [
    "EQUALS",
    "EXISTS",
    "IN",
    "MAX_LABELS",
    "MAX_SELECTOR_LEN",
    "NOT_EQUALS",
    "NOT_EXISTS",
    "NOT_IN",
    "Requirement",
    "Selector",
    "canonical_selector",
    "check_labels",
    "format_labels",
    "label_key_error",
    "label_value_error",
    "parse_labels",
    "parse_selector",
]
