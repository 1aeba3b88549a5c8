"""Notifications, the parts without Redis: an entry as an event, its sentence, the Slack body,
the signature and the settings."""

from __future__ import annotations

import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coordinator.notify.consumer import encode, stream_entries
from coordinator.notify.events import Event
from coordinator.notify.settings import NotifySettings, receiver_label
from coordinator.notify.slack import slack_body
from coordinator.notify.webhook import Delivery, NotifyStats, Receiver, sign
from coordinator.settings import CoordinatorSettings
from tests.notifykit import SECRET, first_time, verify, verify_standard

PAUSE = {"action": "pause", "reason": "orders-db failover drill", "by": "alice", "version": "3",
         "at": "2026-11-30T08:19:08.686Z"}


def test_a_pause_entry_becomes_an_event_with_every_field_and_a_sentence() -> None:
    event = Event.from_entry("orders", "audit", b"1796000000000-0",
                             {k.encode(): v.encode() for k, v in PAUSE.items()})
    body = event.body()
    assert {k: body[k] for k in ("event", "fleet", "hold", "reason", "by", "version", "at")} == {
        "event": "pause", "fleet": "orders", "hold": None, "reason": "orders-db failover drill",
        "by": "alice", "version": 3, "at": "2026-11-30T08:19:08.686Z",
    }
    assert body["text"] == "Fleet orders paused by alice: orders-db failover drill (version 3)."
    assert body["id"] == "1796000000000-0" and body["source"] == "audit"


def test_a_resume_and_a_restore_read_as_sentences() -> None:
    resume = Event.from_entry("orders", "audit", "1-0", {**PAUSE, "action": "resume", "reason": ""})
    assert resume.text == "Fleet orders resumed by alice (version 3)."
    restore = Event.from_entry("orders", "audit", "1-0", {
        **PAUSE, "action": "restore", "reason": "state hash was missing or older", "by": "coordinator",
    })
    assert "restored from the replicas by coordinator" in restore.text


def test_an_action_of_a_later_release_becomes_an_event_with_its_hold_and_its_other_fields() -> None:
    event = Event.from_entry("orders", "audit", "1-0", {
        **PAUSE, "action": "window_started", "hold": "dbmaint", "reason": "pg 16 upgrade",
        "auto_resume_at": "2026-12-01T02:30:00.000Z",
    })
    assert event.body()["hold"] == "dbmaint"
    assert event.details == {"auto_resume_at": "2026-12-01T02:30:00.000Z"}
    assert event.text == ("Fleet orders: maintenance window dbmaint started by alice: "
                          "pg 16 upgrade (version 3).")
    unknown = Event.from_entry("orders", "audit", "1-0", {**PAUSE, "action": "hold_frobbed",
                                                          "hold": "db"})
    assert unknown.text == ("Fleet orders: hold frobbed by alice (hold db): "
                            "orders-db failover drill (version 3).")


def test_an_overdue_alert_reads_as_a_question_to_the_team() -> None:
    event = Event.from_entry("orders", "events", "1-0", {
        **PAUSE, "action": "overdue", "since": "2026-11-30T08:19:08.686Z", "age_s": "1925.5",
        "expected_until": "", "max_pause_s": "1800",
    })
    assert event.details["age_s"] == 1925.5
    assert event.text == (
        "Fleet orders has been paused for 32m05s (since 2026-11-30T08:19:08.686Z, paused by "
        "alice: orders-db failover drill); it was given no window and passed "
        "FLEETGATE_MAX_PAUSE. Forgotten?"
    )


def test_a_wait_with_stragglers_names_each_one_and_why() -> None:
    event = Event.from_entry("orders", "events", "1-0", {
        **PAUSE, "action": "wait", "wait_action": "pause", "elapsed_s": "30.002", "replicas": "3",
        "stragglers": json.dumps([{"id": "orders-2", "why": "still in flight"}]),
    })
    assert event.details["stragglers"] == [{"id": "orders-2", "why": "still in flight"}]
    assert event.text == ("Fleet orders: 1 of 3 replicas did not get quiet within 30.002 s after "
                          "the pause at version 3: orders-2 (still in flight).")


def test_the_slack_body_has_the_sentence_and_escapes_what_an_operator_typed() -> None:
    event = Event.from_entry("orders", "audit", "1-0", {**PAUSE, "reason": "<!channel> a & b"})
    body = slack_body(event)
    assert body["text"] == "Fleet orders paused by alice: &lt;!channel&gt; a &amp; b (version 3)."
    assert body["blocks"][0]["text"]["text"] == body["text"]
    assert "<" not in json.dumps(body)


def test_the_signature_is_the_hmac_of_the_exact_body_and_the_readme_check_accepts_it() -> None:
    body = encode(Event.from_entry("orders", "audit", "1-0", PAUSE), "json")
    header = sign(SECRET.encode(), body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert verify(SECRET, body, header)
    assert not verify(SECRET, body + b" ", header)
    assert not verify("another secret", body, header)


def test_stream_replies_of_either_protocol_read_the_same() -> None:
    resp2 = [["s", [("1-0", {"a": "1"}), ("2-0", {})]]]
    resp3 = {"s": [[("1-0", {"a": "1"}), ("2-0", {})]]}
    assert list(stream_entries(resp2)) == list(stream_entries(resp3)) == [
        ("s", "1-0", {"a": "1"}), ("s", "2-0", {}),
    ]
    assert list(stream_entries([])) == list(stream_entries({})) == []


def test_the_settings_read_urls_separated_by_commas_or_spaces() -> None:
    s = CoordinatorSettings.model_validate({
        "webhook_urls": "http://127.0.0.1:9000/a, https://hooks.example.com/services/T0/B0/x",
        "webhook_format": "slack", "webhook_secret": "k", "webhook_max_age": "2h",
    })
    n = NotifySettings.from_coordinator(s)
    assert n.urls == ("http://127.0.0.1:9000/a", "https://hooks.example.com/services/T0/B0/x")
    assert (n.format, n.secret, n.max_age) == ("slack", b"k", 7200.0)
    assert CoordinatorSettings.model_validate({}).webhook_max_age == 3600.0


@pytest.mark.parametrize("value", ["ftp://example.com/x", "hooks.example.com/x", "http://:80/x",
                                   "http://example.com:port/x"])
def test_a_webhook_url_that_cannot_work_is_refused_without_being_echoed(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CoordinatorSettings.model_validate({"webhook_urls": f"http://ok.example/a {value}"})
    assert "URL 2 is not an http:// or https:// URL with a host" in str(caught.value)
    assert value not in str(caught.value)


def test_a_receiver_is_named_by_its_host_never_by_its_secret_path() -> None:
    assert receiver_label("https://u:p@hooks.slack.com/services/T0/B0/secret") == \
        "https://hooks.slack.com"
    assert receiver_label("http://[::1]:8080/x") == "http://[::1]:8080"


def test_the_readme_shows_the_receiver_check_the_tests_use() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "notifications.md"
    readme = page.read_text(encoding="utf-8")
    section = readme[readme.index("<!-- section:notify -->"):readme.index("<!-- /section:notify -->")]
    (snippet,) = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "docs/notifications.md", "exec"), namespace)
    body = encode(Event.from_entry("orders", "audit", "1-0", PAUSE), "slack")
    receiver = Receiver("http://127.0.0.1:9/", NotifySettings(urls=(), secret=SECRET.encode()),
                        NotifyStats())
    delivery = Delivery("1-0", "pause", body, time.time(), lambda: None, webhook_id="o:audit:1-0")
    headers = receiver.headers(body, delivery)
    assert namespace["verify"](SECRET, body, headers)
    assert not namespace["verify"](SECRET, body[:-1], headers)
    assert not namespace["verify"](SECRET, body, receiver.headers(body, delivery, time.time() - 600))
    assert namespace["first_time"]("o:audit:1-0") and not namespace["first_time"]("o:audit:1-0")
    for function in (verify_standard, first_time):
        assert inspect.getsource(function).split('"""')[2].strip() in snippet
