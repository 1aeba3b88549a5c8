"""``coordinator.demo.localredis``: the ports it hands out."""

from __future__ import annotations

import pytest

from coordinator.demo import localredis
from coordinator.demo.localredis import BROWSER_BLOCKED_PORTS, free_port, use_ports


def test_a_port_browsers_refuse_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker's own range comes back when the test ends
    monkeypatch.setattr(localredis, "_ports", localredis._ports)
    monkeypatch.setattr(localredis, "_span", localredis._span)
    assert 10080 in BROWSER_BLOCKED_PORTS  # Chromium: net::ERR_UNSAFE_PORT
    use_ports(10080, 10081)  # the only candidate is one a browser refuses
    with pytest.raises(RuntimeError, match="no free port"):
        free_port()
    with pytest.raises(RuntimeError, match="no free port pair"):
        free_port(also_free=10000)

