"""Stored text as a terminal shows it: ``printable`` (every character that is not printable
as its escape) and ``cell`` (a table cell rich reads no markup in); and ``short_age``, an age
with sub-second precision where it matters.
"""

from __future__ import annotations

from coordinator.durations import format_age
from coordinator.render.ink import Text


def printable(value: object) -> str:
    """``value`` as one printable line: each character that is not printable (controls,
    ESC, format characters such as bidirectional overrides, line separators) as its escape,
    ``\\x1b``, ``\\u202e``. Markup is not touched: see ``cell``."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def cell(value: object, style: str = "") -> Text:
    """Stored text for a table: a ``Text`` (rich reads no markup and no emoji codes in it)."""
    return Text(printable(value), style=style)



def short_age(seconds: float) -> str:
    """Sub-second precision where it matters: ``120ms``, ``1.4s``, ``4m12s``."""
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    return format_age(seconds)


__all__ = ["cell", "printable", "short_age"]
