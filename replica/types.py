"""Type aliases shared by the replica modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

Item: TypeAlias = Any
Handler: TypeAlias = Callable[[Any], Awaitable[Any]]
ErrorHook: TypeAlias = Callable[[Any, Exception], "Awaitable[Any] | Any"]
"""``on_error(item, exc)``: the pool passes only ``Exception``s, whatever the handler raised."""
Listener: TypeAlias = Callable[[str], Any]
"""Called synchronously with an event name: "paused", "resumed", "quiet", "drained"."""
