"""Listeners: who hears the pool's events ("paused", "resumed", "quiet", "drained").

Listeners are called synchronously, in the order they were added, and must not block. One
that raises is logged and the others still hear the event.
"""

from __future__ import annotations

import logging

from replica.types import Listener

log = logging.getLogger(__name__)


class Listeners:
    """The listeners of one pool (``name`` is the pool's, for log lines)."""

    __slots__ = ("_listeners", "name")

    def __init__(self, name: str) -> None:
        self._listeners: list[Listener] = []
        self.name = name

    def __len__(self) -> int:
        return len(self._listeners)

    def add(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove(self, listener: Listener) -> None:
        """Stop calling ``listener``; a no-op for one that was never added."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("%s listener failed on %s", self.name, event)


__all__ = ["Listeners"]
