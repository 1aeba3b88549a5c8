"""replica.pool.listeners: the pool's events reach every listener, in order, whatever one does."""

from __future__ import annotations

import pytest

from replica.pool.listeners import Listeners


def test_every_listener_hears_each_event_in_the_order_they_were_added() -> None:
    heard: list[tuple[str, str]] = []
    listeners = Listeners("jobs")
    listeners.add(lambda event: heard.append(("a", event)))
    listeners.add(lambda event: heard.append(("b", event)))
    listeners.emit("paused")
    listeners.emit("quiet")
    assert heard == [("a", "paused"), ("b", "paused"), ("a", "quiet"), ("b", "quiet")]


def test_a_listener_that_raises_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[str] = []

    def broken(event: str) -> None:
        raise RuntimeError("listener broke")

    listeners = Listeners("jobs")
    listeners.add(broken)
    listeners.add(heard.append)
    listeners.emit("resumed")
    assert heard == ["resumed"]
    assert "jobs listener failed on resumed" in caplog.text


def test_a_removed_listener_hears_nothing_and_removing_a_stranger_is_a_no_op() -> None:
    heard: list[str] = []
    listeners = Listeners("jobs")
    listeners.add(heard.append)
    listeners.remove(heard.append)
    listeners.remove(print)
    listeners.emit("drained")
    assert heard == [] and len(listeners) == 0
