"""Notifications delivered to real HTTP receivers on loopback, from a real Redis: the body, the
signature, the Slack form, retries with backoff, giving up, the metrics, and a receiver that
hangs while the fleet is paused through the API."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.notify import webhook
from coordinator.notify.lane import group_for
from coordinator.notify.settings import GROUP
from coordinator.web.api import create_app
from coordinator.web.metrics import render_metrics
from tests.apikit import ADMIN, client_for, json_headers, make_settings
from tests.notifykit import SECRET, Hook, hooks, notifier, quick, settle, verify
from tests.tlskit import make_tls_files

FIELDS = ("event", "fleet", "hold", "reason", "by", "version", "at", "text")


@pytest.fixture
async def alone(private_redis: LocalRedis) -> AsyncIterator[tuple[str, aioredis.Redis]]:
    """A Redis of the test's own (URL, client): ``fleetgate serve`` notifies every fleet of the
    registry, and the shared server's registry lists every other test's fleets."""
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        yield private_redis.url, client
    finally:
        await client.aclose()


async def test_a_pause_is_posted_signed_to_every_receiver_with_its_fields_and_sentence(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with hooks([200], [204]) as (a, b), \
            notifier(redis_url, fleet_name, quick(a.url, b.url)) as n:
        state = await fleet.pause("orders-db failover drill", by="alice")
        await a.wait_for(1)
        await b.wait_for(1)
        # each receiver's lane counts and acknowledges its own delivery
        await settle(lambda: n.stats.acked >= 2, n)
    for hook in (a, b):
        (request,) = hook.requests
        assert request.method == "POST" and request.path == "/hook"
        assert request.headers["content-type"] == "application/json"
        assert verify(SECRET, request.body, request.headers["x-fleetgate-signature"])
        body = request.json()
        assert {k: body[k] for k in FIELDS} == {
            "event": "pause", "fleet": fleet_name, "hold": "default",
            "reason": "orders-db failover drill", "by": "alice", "version": state.version,
            "at": body["at"],
            "text": f"Fleet {fleet_name} paused by alice: orders-db failover drill (version 1).",
        }
        assert request.headers["x-fleetgate-event"] == "pause"
        assert request.headers["x-fleetgate-delivery"] == body["id"]
    assert n.stats.delivered == 2 and n.stats.failed == 0
    for hook in (a, b):
        assert await redis.xpending(fleet.keys.audit, group_for(GROUP, hook.url)) == {
            "pending": 0, "min": None, "max": None, "consumers": []}


async def test_a_slack_receiver_gets_text_and_blocks(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook, \
            notifier(redis_url, fleet_name, quick(hook.url, format="slack")):
        await fleet.pause("deploy <4.2>", by="alice")
        await fleet.resume(by="bob")
        await hook.wait_for(2)
    pause, resume = (r.json() for r in hook.requests)
    assert pause["text"] == f"Fleet {fleet_name} paused by alice: deploy &lt;4.2&gt; (version 1)."
    assert pause["blocks"][0]["type"] == "section"
    assert resume["text"] == f"Fleet {fleet_name} resumed by bob (version 2)."
    assert all(verify(SECRET, r.body, r.headers["x-fleetgate-signature"]) for r in hook.requests)


async def test_a_failing_receiver_is_retried_with_backoff_until_it_accepts_and_the_metrics_count_it(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook([500, 503, 200]) as hook, \
            notifier(redis_url, fleet_name, quick(hook.url)) as n:
        await fleet.pause("db maintenance", by="alice")
        await hook.wait_for(1, accepted=True)
        await settle(lambda: n.stats.acked >= 1, n)
        metrics = (await render_metrics(fleet, 1800, n)).decode()
    assert [r.status for r in hook.requests] == [500, 503, 200]
    assert len({r.body for r in hook.requests}) == 1  # the same body, so the same signature
    assert all(verify(SECRET, r.body, r.headers["x-fleetgate-signature"]) for r in hook.requests)
    assert f'fleetgate_webhook_deliveries_total{{fleet="{fleet_name}"}} 1.0' in metrics
    assert f'fleetgate_webhook_failures_total{{fleet="{fleet_name}"}} 2.0' in metrics
    assert f'fleetgate_webhook_given_up_total{{fleet="{fleet_name}"}} 0.0' in metrics
    assert f'fleetgate_webhook_pending{{fleet="{fleet_name}"}} 0.0' in metrics
    assert "_created" not in metrics


async def test_a_receiver_that_keeps_failing_is_given_up_after_max_age_with_a_log_line(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.notify")
    fleet = Fleet(redis, fleet_name)
    async with Hook([500]) as down, Hook() as up, \
            notifier(redis_url, fleet_name, quick(down.url, up.url, max_age=1.0)) as n:
        started = time.monotonic()
        await fleet.pause("db maintenance", by="alice")
        await settle(lambda: n.stats.given_up >= 1, n)
        await settle(lambda: n.stats.acked >= 1, n)
        gave_up_after = time.monotonic() - started
    assert len(up.requests) == 1
    assert len(down.requests) >= 3  # retried, with a growing backoff, then given up
    assert n.stats.failed == len(down.requests)
    assert gave_up_after >= 0.5  # not before its age neared max_age (1 s)
    lines = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert len(lines) == 1
    assert f"http://127.0.0.1:{down.url.split(':')[2].split('/')[0]}" in lines[0]
    assert "HTTP 500" in lines[0] and "/hook" not in lines[0]
    for hook in (down, up):
        assert await redis.xpending(fleet.keys.audit, group_for(GROUP, hook.url)) == {
            "pending": 0, "min": None, "max": None, "consumers": []}


async def test_a_receiver_that_hangs_holds_back_neither_a_pause_nor_another_receiver(
    alone: tuple[str, aioredis.Redis], fleet_name: str
) -> None:
    redis_url, _ = alone
    async with Hook([None]) as hanging, Hook() as fine:
        settings = make_settings(redis_url, fleet_name, webhook_urls=f"{hanging.url} {fine.url}",
                                 webhook_secret=SECRET)
        app = create_app(settings)
        async with client_for(app) as client:
            first = await client.post("/api/fleet/pause", headers=json_headers(ADMIN),
                                      json={"reason": "first"})
            assert first.status_code == 200
            await hanging.wait_for(1)
            await fine.wait_for(1)
            assert hanging.holding == 1  # the notifier is stuck in a request to it ...
            second = await client.post("/api/fleet/pause", headers=json_headers(ADMIN),
                                       json={"reason": "second"})
            assert second.status_code == 200
            assert second.json()["state"]["reason"] == "second"
            # ... and still is: the pause did not wait for it, nor did the other receiver
            assert hanging.holding == 1 and len(hanging.requests) == 1
            await fine.wait_for(2)
            assert [r.json()["reason"] for r in fine.requests] == ["first", "second"]
            hanging.release()
            await hanging.wait_for(2)
        assert [r.json()["reason"] for r in hanging.requests] == ["first", "second"]


async def test_the_metrics_route_shows_the_notifier_counters_when_it_runs(
    alone: tuple[str, aioredis.Redis], fleet_name: str
) -> None:
    redis_url, _ = alone
    async with Hook() as hook:
        app = create_app(make_settings(redis_url, fleet_name, webhook_urls=hook.url,
                                       webhook_secret=SECRET))
        async with client_for(app) as client:
            await client.post("/api/fleet/pause", headers=json_headers(ADMIN),
                              json={"reason": "metrics"})
            await hook.wait_for(1, accepted=True)
            runtime = app.state.runtime
            await settle(lambda: runtime.notifier.stats.delivered >= 1, runtime.notifier)
            text = (await client.get("/metrics")).text
        assert f'fleetgate_webhook_deliveries_total{{fleet="{fleet_name}"}} 1.0' in text
        for name in ("garbage", "errors", "unstated"):  # what it skipped is counted, 0 here
            assert f'fleetgate_webhook_{name}_total{{fleet="{fleet_name}"}} 0.0' in text
    app = create_app(make_settings(redis_url, fleet_name))
    async with client_for(app) as client:
        assert "fleetgate_webhook" not in (await client.get("/metrics")).text
        assert app.state.runtime.notifier is None


async def test_a_receiver_that_hangs_costs_one_attempt_timeout_then_is_retried(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook([None, 200]) as hook, \
            notifier(redis_url, fleet_name, quick(hook.url, timeout=0.3)) as n:
        await fleet.pause("db maintenance", by="alice")
        await hook.wait_for(1, accepted=True)
        await settle(lambda: n.stats.delivered >= 1, n)
        assert [r.status for r in hook.requests] == [None, 200]  # the first one is still held
    assert n.stats.failed == 1


async def test_a_receiver_that_is_not_listening_is_a_failure_not_an_error(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Hook() as gone:
        url = gone.url
    fleet = Fleet(redis, fleet_name)
    async with notifier(redis_url, fleet_name, quick(url, max_age=0.5)) as n:
        await fleet.pause("db maintenance", by="alice")
        await settle(lambda: n.stats.given_up >= 1, n)
    assert n.stats.failed >= 1 and n.stats.delivered == 0


async def test_stopping_the_notifier_leaves_what_it_could_not_deliver_pending(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook([None]) as hook:
        async with notifier(redis_url, fleet_name, quick(hook.url)):
            await fleet.pause("db maintenance", by="alice")
            await hook.wait_for(1)
        pending = await redis.xpending(fleet.keys.audit, group_for(GROUP, hook.url))
    assert pending["pending"] == 1


async def test_notifications_do_not_wait_for_each_other_across_receivers(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook([None]) as stuck, Hook() as fine, \
            notifier(redis_url, fleet_name, quick(stuck.url, fine.url)):
        for i in range(5):
            await fleet.pause(f"reason {i}", by="alice")
        await fine.wait_for(5)
        assert len(stuck.requests) == 1  # in order: the next one waits for this receiver only
        stuck.release()
        await stuck.wait_for(5)
    assert [r.json()["reason"] for r in stuck.requests] == [f"reason {i}" for i in range(5)]


async def test_an_https_receiver_gets_the_same_signed_body_over_verified_tls(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a certificate with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    await asyncio.to_thread(
        subprocess.run,
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    # the notifier's client trusts what the system trusts: here, this certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setattr(webhook, "_ssl_context", None)
    fleet = Fleet(redis, fleet_name)
    async with Hook(tls=server_tls) as hook, \
            notifier(redis_url, fleet_name, quick(hook.url)) as n:
        assert hook.url.startswith("https://")
        await fleet.pause("over tls", by="alice")
        await hook.wait_for(1)
        await settle(lambda: n.stats.delivered >= 1, n)
    (request,) = hook.requests
    assert request.json()["reason"] == "over tls"
    assert verify(SECRET, request.body, request.headers["x-fleetgate-signature"])


async def _slow_to_cancel() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.3)  # a cleanup that takes a while
        raise


async def test_a_cancelled_stop_of_a_receiver_is_cancelled_itself() -> None:
    """Always re-raise CancelledError: a cancellation of the caller of stop() goes through."""
    receiver = webhook.Receiver("http://127.0.0.1:9/hook", quick(), webhook.NotifyStats())
    inner = receiver._task = asyncio.create_task(_slow_to_cancel())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(receiver.stop())
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.wait([inner])


def _answer_and_never_close(listener: socket.socket, tls: ssl.SSLContext, said: list[str]) -> None:
    """A thread: an HTTPS receiver that answers 204, then ignores the client's close_notify
    (no close_notify back, the socket left open) and says when the client's TCP close came."""
    conn, _ = listener.accept()
    with tls.wrap_socket(conn, server_side=True) as wrapped:
        wrapped.settimeout(10)
        while b"\r\n\r\n" not in wrapped.recv(65536):
            pass
        wrapped.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        assert wrapped.recv(65536) == b""  # the client's close_notify (none is sent back)
        raw = socket.socket(fileno=os.dup(wrapped.fileno()))
        raw.settimeout(10)
        try:
            said.append("closed" if raw.recv(65536) == b"" else "data")
        except TimeoutError:
            said.append("still open after 10 s")
        finally:
            raw.close()


async def test_an_https_receiver_that_never_answers_the_close_keeps_no_socket_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """asyncio waits up to 30 s for the receiver's close_notify before it closes the socket:
    ``post`` waits one second for it, then closes the socket itself."""
    files = make_tls_files(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(files.server_cert, files.server_key)
    monkeypatch.setenv("SSL_CERT_FILE", str(files.ca))
    monkeypatch.setattr(webhook, "_ssl_context", None)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        said: list[str] = []
        port = listener.getsockname()[1]
        receiver = asyncio.create_task(
            asyncio.to_thread(_answer_and_never_close, listener, server_tls, said))
        status = await webhook.post(f"https://127.0.0.1:{port}/hook", b"{}", {}, timeout=5.0)
        await receiver
    assert status == 204
    assert said == ["closed"]
