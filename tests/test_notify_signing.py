"""What a receiver can trust: Standard Webhooks signatures (checked with the
``standardwebhooks`` package's own verifier) that a captured request cannot be replayed with,
and chat bodies in which what an operator typed mentions nobody."""

from __future__ import annotations

import base64
import json
import re
import time

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from coordinator.fleet.fleet import Fleet
from coordinator.notify.events import Event
from coordinator.notify.lane import encode
from coordinator.notify.slack import ZWSP, slack_body
from coordinator.notify.webhook import Delivery, NotifyStats, Receiver
from coordinator.settings import CoordinatorSettings
from tests.notifykit import SECRET, Hook, first_time, notifier, quick, verify, verify_standard

STANDARD_SECRET = "whsec_" + base64.b64encode(b"sixteen byte key, or more").decode()
MENTIONS = "@channel @here @everyone @all <!channel> <!here> <@U024BE7LH> <@&1234> ping @alice"


async def test_a_delivery_verifies_with_the_standard_webhooks_verifier_and_the_old_header(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook, notifier(redis_url, fleet_name, quick(hook.url)):
        await fleet.pause("db maintenance", by="alice")
        await hook.wait_for(1)
    (request,) = hook.requests
    # a secret that is not whsec_: the key is its bytes, as the verifier takes bytes
    assert Webhook(SECRET.encode()).verify(request.body, request.headers)["reason"] == \
        "db maintenance"
    assert verify_standard(SECRET, request.body, request.headers)  # the README's check
    assert request.headers["webhook-id"] == f"{fleet_name}:audit:{request.json()['id']}"
    assert request.headers["webhook-signature"].startswith("v1,")
    assert verify(SECRET, request.body, request.headers["x-fleetgate-signature"])  # kept


async def test_a_whsec_secret_is_the_key_it_encodes(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook, notifier(redis_url, fleet_name, quick(
            hook.url, secret=STANDARD_SECRET.encode())):
        await fleet.pause("db maintenance", by="alice")
        await hook.wait_for(1)
    (request,) = hook.requests
    Webhook(STANDARD_SECRET).verify(request.body, request.headers)
    assert verify_standard(STANDARD_SECRET, request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(STANDARD_SECRET.encode()).verify(request.body, request.headers)


def test_a_captured_request_cannot_be_replayed_later_or_with_another_timestamp() -> None:
    receiver = Receiver("http://127.0.0.1:9/hook", quick(), NotifyStats())
    body = encode(Event.from_entry("orders", "audit", "1-0", {"action": "pause"}), "json")
    delivery = Delivery("1-0", "pause", body, time.time(), lambda: None, webhook_id="orders:audit:1-0")
    verifier = Webhook(SECRET.encode())
    captured = receiver.headers(body, delivery, now=time.time() - 6 * 60)  # six minutes ago
    with pytest.raises(WebhookVerificationError, match="too old"):
        verifier.verify(body, captured)
    assert not verify_standard(SECRET, body, captured)
    fresh = {**captured, "webhook-timestamp": str(int(time.time()))}  # re-stamped by hand
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        verifier.verify(body, fresh)
    assert not verify_standard(SECRET, body, fresh)
    now = receiver.headers(body, delivery)
    verifier.verify(body, now)
    assert verify_standard(SECRET, body, now)
    assert not verify_standard(SECRET, body + b" ", now)
    assert not verify_standard(SECRET, body, {k: v for k, v in now.items() if k != "webhook-id"})
    # the same event retried carries the same webhook-id: a receiver acts on it once
    assert first_time(now["webhook-id"]) and not first_time(now["webhook-id"])


@pytest.mark.parametrize("rest", ["", "not base64!", "===="])
def test_a_whsec_secret_that_is_not_base64_is_refused_without_being_echoed(rest: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CoordinatorSettings.model_validate({"webhook_secret": "whsec_" + rest})
    assert "must be base64 after it" in str(caught.value)
    assert not rest or rest not in str(caught.value)


def test_the_chat_body_mentions_nobody_whatever_the_reason_says() -> None:
    event = Event.from_entry("orders", "audit", "1-0", {
        "action": "pause", "reason": MENTIONS, "by": "@here", "hold": "db", "version": "2"})
    body = slack_body(event)
    texts = [body["text"], body["blocks"][0]["text"]["text"],
             body["blocks"][1]["elements"][0]["text"]]
    for text in texts:
        assert re.search(r"@(?!" + ZWSP + ")", text) is None  # no bare @: Mattermost, Discord
        assert "<" not in text and ">" not in text  # no <!channel>, <@U...>: Slack, Discord
    assert body["allowed_mentions"] == {"parse": []}  # Discord: parse no mention at all
    assert body["text"].replace(ZWSP, "") == (
        "Fleet orders paused by @here (hold db): @channel @here @everyone @all &lt;!channel&gt; "
        "&lt;!here&gt; &lt;@U024BE7LH&gt; &lt;@&amp;1234&gt; ping @alice (version 2).")


async def test_a_slack_receiver_gets_a_reason_full_of_mentions_that_pings_nobody(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Hook() as hook, notifier(redis_url, fleet_name, quick(hook.url, format="slack")):
        await fleet.pause(MENTIONS, by="alice")
        await hook.wait_for(1)
    (request,) = hook.requests
    body = request.json()
    raw = json.dumps(body, ensure_ascii=False)
    for mention in ("@channel", "@here", "@everyone", "@all", "@alice", "<!", "<@"):
        assert mention not in raw
    assert body["allowed_mentions"] == {"parse": []}
    Webhook(SECRET.encode()).verify(request.body, request.headers)


def test_the_json_format_keeps_the_reason_as_typed() -> None:
    event = Event.from_entry("orders", "audit", "1-0", {"action": "pause", "reason": MENTIONS})
    assert json.loads(encode(event, "json"))["reason"] == MENTIONS  # data: the receiver's
