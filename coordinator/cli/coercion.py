"""Typer's coercion of option values without pydantic for the plain cases.

Typer (0.29 and later) checks every option value that is not already a ``bool`` through a
pydantic ``TypeAdapter``, built the first time the option is read, even when the option was not
given: ``fleetgate status`` paid pydantic's import (half the start-up of a Redis client) to
learn that its ``--redis-url`` is ``None`` and its ``--interval`` the default ``1.0``.

``LeanCommand`` and ``LeanGroup`` give each of their options a ``LeanCoercion``: it answers
what typer's would answer, without pydantic, for a value not given (``None``), a ``str`` option
given a ``str``, and an ``int`` or ``float`` option given a number or plain decimal digits that
lie within its bounds; anything else (a bad number, one out of bounds, a list, a path, a
choice, a custom parser) goes to typer's own coercion, built on first use, so its messages
and its results stay typer's. ``tests/test_cli_startup.py`` checks each shortcut against
typer's answer. On a typer without pydantic coercion (before 0.29: click's types) the options
have no such hook and the classes change nothing.
"""

from __future__ import annotations

import re
from typing import Any, Final

from typer.core import TyperCommand, TyperGroup

_DIGITS: Final = re.compile(r"[0-9]{1,15}")
_DECIMAL: Final = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")
_UNANSWERED: Final = object()


class LeanCoercion:
    """An option's coercion: the plain cases here, the rest by typer's (``typer._coercion``)."""

    def __init__(self) -> None:
        self._typers: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multiple = bool(param.multiple) or param.nargs == -1
        if value is None:  # as typer's RuntimeParam.coerce answers it
            return () if multiple else None
        if not multiple:
            answer = plain_value(param.type_descriptor, value)
            if answer is not _UNANSWERED:
                return answer
        if self._typers is None:
            from typer._coercion import build_runtime_param

            self._typers = build_runtime_param(param.type_descriptor)
        return self._typers.coerce(value, param=param, ctx=ctx)


def plain_value(descriptor: Any, value: Any) -> Any:
    """``value`` coerced as typer's pydantic adapter would, or ``_UNANSWERED`` for a case left
    to it."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return _UNANSWERED
    annotation = descriptor.annotation
    if annotation is str:
        return value if type(value) is str else _UNANSWERED
    if annotation not in (int, float) or info.clamp:
        return _UNANSWERED
    if type(value) is annotation:
        number = value
    elif type(value) is str and (_DIGITS if annotation is int else _DECIMAL).fullmatch(value):
        number = annotation(value)
    else:
        return _UNANSWERED
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return _UNANSWERED  # typer's message says why
    return number


def lean(params: list[Any]) -> None:
    """Give each typer option of ``params`` a ``LeanCoercion`` (typer >= 0.29 builds its own on
    first use when the slot is empty; older typers have no slot)."""
    for param in params:
        if hasattr(param, "type_descriptor") and getattr(param, "_runtime_param", 0) is None:
            param._runtime_param = LeanCoercion()


class LeanCommand(TyperCommand):
    """A typer command whose options are coerced by ``LeanCoercion``."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # --help's option included
        lean(params)
        return params


class LeanGroup(TyperGroup):
    """The typer app's group (its global options) with ``LeanCoercion``."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # --help's option included
        lean(params)
        return params


__all__ = ["LeanCoercion", "LeanCommand", "LeanGroup", "lean", "plain_value"]
