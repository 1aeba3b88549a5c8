"""What an operator may write into a fleet's state and audit trail: a ``reason`` and a ``by``.

One rule for every way in (``Fleet.pause``/``resume``, ``fleetgate pause``/``resume``, the
API's bodies and its operator names): the text, stripped of surrounding blanks, is 1 to the
limit printable characters (``str.isprintable``: no control character, no NUL, no tab or
newline, no lone surrogate, no line or paragraph separator). A resume's reason is optional:
absent is ``None``, never an empty string.

The error says what is wrong but never repeats the input: it may be long, or not printable.
"""

from __future__ import annotations

from typing import Final

from replica.errors import ContractError

MAX_REASON: Final = 500
"""The longest ``reason`` (characters, after stripping)."""
MAX_BY: Final = 100
"""The longest ``by``, the operator's name (characters, after stripping)."""


def check_reason(value: object) -> str:
    """``value`` stripped, if it is a reason (1 to 500 printable characters); else
    ``ContractError`` (a ``ValueError``)."""
    return _checked("reason", value, MAX_REASON)


def check_optional_reason(value: object) -> str | None:
    """A resume's reason: ``None`` stays ``None`` (no reason); anything else is
    ``check_reason``'s."""
    return None if value is None else check_reason(value)


def check_by(value: object) -> str:
    """``value`` stripped, if it names an operator (1 to 100 printable characters); else
    ``ContractError`` (a ``ValueError``)."""
    return _checked("by", value, MAX_BY)


def _checked(name: str, value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise ContractError(f"{name} must be text, not {type(value).__name__}")
    stripped = value.strip()
    if not stripped:
        raise ContractError(f"{name} must be 1 to {limit} printable characters, not empty")
    if len(stripped) > limit:
        raise ContractError(
            f"{name} must be 1 to {limit} printable characters, not {len(stripped)}"
        )
    if not stripped.isprintable():
        raise ContractError(
            f"{name} must be 1 to {limit} printable characters: it has a control, "
            "separator or unpaired surrogate character"
        )
    return stripped
