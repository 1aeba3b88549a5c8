"""What the dashboard tests share: a headless Chromium page and the coordinator in a thread.

``dashboard_page(executable)`` is a page of a fresh headless Chromium (Debian's, through
Playwright's Python API) with a profile of its own; ``Server(settings)`` serves the real app
with uvicorn on a free port in a thread; ``ApiRequests(page)`` counts what the page asks the
API, so a test can hold the requests to the poll ticks the page counts (``<body data-polls>``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import uvicorn

from coordinator.settings import CoordinatorSettings
from coordinator.web.api import create_app
from tests.fleetkit import wait_until

CHROMIUM = "/usr/bin/chromium"
ADMIN = "dashboard-admin-token-0123"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextlib.contextmanager
def dashboard_page(executable: str, height: int | None = None) -> Iterator[Any]:
    """A page of a fresh headless Chromium (a profile of its own, removed afterwards)."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="fleetgate-chromium-")
    viewport = {} if height is None else {"viewport": {"width": 1280, "height": height}}
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=executable, args=ARGS, headless=True, **viewport,
            )
            try:
                yield patient(context.new_page())
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


PATIENCE_MS = 30_000
"""How long a browser step or an ``expect`` may take: a hang guard, not a speed claim (the
page polls every second; on a loaded 2-core machine a 1,000-replica render took over 5 s,
Playwright's default)."""


def patient(page: Any) -> Any:
    """``page`` with Playwright's waits (actions, navigation and ``expect``) at PATIENCE_MS."""
    from playwright.sync_api import expect

    expect.set_options(timeout=PATIENCE_MS)
    page.set_default_timeout(PATIENCE_MS)
    page.set_default_navigation_timeout(PATIENCE_MS)
    return page


def chromium_or_skip() -> str:
    if not os.path.exists(CHROMIUM):
        print(f"SKIP reason: {CHROMIUM} is absent (make test installs it with apt where it can)")
        pytest.skip(f"{CHROMIUM} is absent: apt-get install chromium (make test does it)")
    return CHROMIUM


class Server:
    """uvicorn in a thread; ``url`` once it serves."""

    def __init__(self, settings: CoordinatorSettings) -> None:
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=settings.port, log_config=None, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="coordinator", daemon=True)
        self.url = f"http://127.0.0.1:{settings.port}/"

    def fleet_url(self, fleet: str) -> str:
        """The page of ``fleet`` (``/`` is the overview of every fleet)."""
        return f"{self.url}?fleet={fleet}"

    def __enter__(self) -> Server:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), timeout=30)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class ApiRequests:
    """Every request the page sends to ``/api/``, as (path, query) in order, and the size of
    each answer (its Content-Length)."""

    def __init__(self, page: Any) -> None:
        self.seen: list[tuple[str, dict[str, list[str]]]] = []
        self.sizes: list[tuple[str, int]] = []
        page.on("request", self._on_request)
        page.on("response", self._on_response)

    def _on_request(self, request: Any) -> None:
        url = urlsplit(request.url)
        if url.path.startswith("/api/"):
            self.seen.append((url.path, parse_qs(url.query)))

    def _on_response(self, response: Any) -> None:
        url = urlsplit(response.url)
        if url.path.startswith("/api/"):
            self.sizes.append((response.url, int(response.headers.get("content-length", "-1"))))

    def since(self, start: int) -> list[tuple[str, dict[str, list[str]]]]:
        return self.seen[start:]


def polls(page: Any) -> int:
    """The poll ticks the page has started (``<body data-polls>``)."""
    return int(page.evaluate("document.body.dataset.polls"))


def wait_polls(page: Any, at_least: int, timeout: float = 30.0) -> int:
    """Wait until the page has started ``at_least`` poll ticks (the page's CSP forbids the
    string evaluation ``wait_for_function`` needs). Returns the ticks."""
    deadline = time.monotonic() + timeout
    while (ticks := polls(page)) < at_least:
        assert time.monotonic() < deadline, f"the page polled {ticks} times, not {at_least}"
        page.wait_for_timeout(100)
    return ticks
