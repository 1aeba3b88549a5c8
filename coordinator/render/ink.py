"""Styled text, tables and groups that load rich only to be shown in colour.

``Text``, ``Table`` and ``Group`` take the calls of rich's classes of those names that the
status view makes (``coordinator.render.status``, ``holds``, ``text``) and keep them. Given to
rich (a console, a table cell, ``Live``), each becomes the rich object it stands for
(``__rich__``), built then: a terminal sees what rich draws. ``plain(renderable)`` is the text
rich prints of it on a console that is no terminal (``coordinator.cli.output.console``: width
200, no colour), made here without rich, or None when its layout is not one made here exactly
(a line past the width, a character that is not printable ASCII, an option of a table not
read here): the caller prints it through rich then. ``tests/test_render_plain.py`` holds the
two to the same bytes. So ``fleetgate status`` into a pipe or a file never loads rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from rich.console import Group as RichGroup
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

PLAIN_WIDTH: Final = 200
"""The width of ``coordinator.cli.output.console()`` when it writes to no terminal."""

_TABLE_OPTIONS: Final = {"show_edge": False, "pad_edge": False, "box": None}
_JUSTIFY: Final = ("left", "right")


class Text:
    """rich's ``Text(text, style)`` and ``append(text or Text, style)``."""

    def __init__(self, text: str = "", style: str = "") -> None:
        self._text = text
        self._style = style
        self._parts: list[tuple[str | Text, str]] = []

    def append(self, text: str | Text, style: str = "") -> Text:
        self._parts.append((text, style))
        return self

    @property
    def plain(self) -> str:
        return self._text + "".join(p.plain if isinstance(p, Text) else p for p, _ in self._parts)

    def __str__(self) -> str:
        return self.plain

    def __rich__(self) -> RichText:
        from rich.text import Text as RichText

        out = RichText(self._text, style=self._style)
        for part, style in self._parts:
            out.append(part.__rich__() if isinstance(part, Text) else part, style=style or None)
        return out


class Table:
    """rich's ``Table(**options)``, ``add_column(header, justify=...)`` and ``add_row(*cells)``."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._columns: list[tuple[str, dict[str, Any]]] = []
        self._rows: list[tuple[Any, ...]] = []

    def add_column(self, header: str = "", **options: Any) -> None:
        self._columns.append((header, options))

    def add_row(self, *cells: Any) -> None:
        self._rows.append(cells)

    def __rich__(self) -> RichTable:
        from rich.table import Table as RichTable

        out = RichTable(**self._options)
        for header, options in self._columns:
            out.add_column(header, **options)
        for cells in self._rows:
            out.add_row(*(_rich(c) for c in cells))
        return out


class Group:
    """rich's ``Group(*renderables)``: each below the one before."""

    def __init__(self, *renderables: RenderableType) -> None:
        self.renderables = renderables

    def __rich__(self) -> RichGroup:
        from rich.console import Group as RichGroup

        return RichGroup(*(_rich(r) for r in self.renderables))


RenderableType: TypeAlias = Text | Table | Group


def _rich(value: Any) -> Any:
    return value.__rich__() if isinstance(value, Text | Table | Group) else value


def plain(renderable: Any, width: int = PLAIN_WIDTH) -> str | None:
    """What rich prints of ``renderable`` on a console of ``width`` that is no terminal (a
    newline after each line), or None when it is not made here."""
    lines = _lines(renderable, width)
    return None if lines is None else "".join(line + "\n" for line in lines)


def _lines(renderable: Any, width: int) -> list[str] | None:
    if isinstance(renderable, Group):
        out: list[str] = []
        for part in renderable.renderables:
            lines = _lines(part, width)
            if lines is None:
                return None
            out += lines
        return out
    if isinstance(renderable, Text):
        return _text_lines(renderable.plain, width)
    if isinstance(renderable, Table):
        return _table_lines(renderable, width)
    return None


def _simple(text: str) -> bool:
    """Printable ASCII only (one cell per character, nothing rich would read otherwise)."""
    return text.isascii() and text.isprintable()


def _text_lines(text: str, width: int) -> list[str] | None:
    lines = text.split("\n")
    if not text or any(not _simple(line) or len(line) > width or line.endswith(" ")
                       for line in lines):
        return None  # empty, wrapped, or trailing blanks: rich's rules, not redone here
    return lines


def _table_lines(table: Table, width: int) -> list[str] | None:
    options = dict(table._options)
    options.pop("header_style", None)  # a style: no colour here
    if options != _TABLE_OPTIONS or not table._columns:
        return None
    justify: list[str] = []
    for header, column in table._columns:
        column = dict(column)
        column.pop("style", None)
        column.pop("header_style", None)
        if set(column) - {"justify"} or column.get("justify", "left") not in _JUSTIFY:
            return None
        if not _simple(header):
            return None
        justify.append(column.get("justify", "left"))
    rows: list[list[str]] = [[header for header, _ in table._columns]]
    for cells in table._rows:
        if len(cells) != len(justify) or not all(isinstance(c, Text) for c in cells):
            return None
        texts = [c.plain for c in cells]
        if not all(_simple(t) and t for t in texts):
            return None
        rows.append(texts)
    widths = [max(len(row[i]) for row in rows) for i in range(len(justify))]
    if sum(widths) + 2 * (len(widths) - 1) > width:
        return None  # rich would shrink and wrap columns
    return ["  ".join(t.rjust(w) if j == "right" else t.ljust(w)
                      for t, w, j in zip(row, widths, justify, strict=True)) for row in rows]


__all__ = ["PLAIN_WIDTH", "Group", "RenderableType", "Table", "Text", "plain"]
