"""Where the CLI writes: the console for the human tables, JSON lines for scripts, one line on
stderr for a failure.

Whatever comes from Redis is printed as text: the tables get it through ``coordinator.render``
(markup escaped, control characters shown as escapes); the JSON keeps it whole but escapes
every character a terminal could act on; a failure line is made printable as a whole.

Rich is loaded by the first table printed, not on import: ``fleetgate --help`` needs none, and
``show`` prints ``fleetgate status`` into a pipe or a file without it.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def plain(message: str) -> str:
    """``message`` on one line (its runs of blanks, newlines included, as one space)."""
    return " ".join(str(message).split())


def console() -> Console:
    """The console of the human output (wide enough not to wrap a table into a pipe)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, soft_wrap=False)


def show(renderable: Any) -> None:
    """Print ``renderable`` (``coordinator.render``'s) as ``console().print`` does: without rich
    when the output is no terminal and nothing asks rich for one (``FORCE_COLOR``,
    ``TTY_COMPATIBLE``) and ``coordinator.render.ink`` makes the same text; else through rich."""
    import os

    from coordinator.render.ink import plain

    if not sys.stdout.isatty() and "FORCE_COLOR" not in os.environ \
            and os.environ.get("TTY_COMPATIBLE", "") in ("", "0"):
        text = plain(renderable)
        if text is not None:
            sys.stdout.write(text)
            return
    console().print(renderable)


def json_text(data: Any, *, compact: bool = False) -> str:
    """``data`` as JSON (UTF-8 kept), with every character a terminal could act on escaped."""
    if compact:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(data, indent=2, ensure_ascii=False)
    if text.replace("\n", "").isprintable():
        return text
    # json.dumps escapes only the C0 controls when it keeps non-ASCII text: escape the rest of
    # what is not printable too (DEL, the C1 controls, U+009B being a one-character CSI on
    # some terminals, bidirectional overrides, lone surrogates). Outside strings the text is
    # ASCII and newlines, so each such character is inside a string, where an escape is valid.
    return "".join(c if c == "\n" or c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def emit_json(data: Any, *, compact: bool = False) -> None:
    sys.stdout.write(json_text(data, compact=compact) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int) -> int:
    """Print ``fleetgate: message`` as one printable line on stderr; returns ``code``."""
    from coordinator.render.text import printable

    sys.stdout.flush()
    sys.stderr.write(f"fleetgate: {printable(plain(message))}\n")
    sys.stderr.flush()
    return code


__all__ = ["console", "emit_json", "fail", "json_text", "plain", "show"]
