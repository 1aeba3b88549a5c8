"""``fleetgate history`` and ``status`` print what Redis holds as text (issue 11 D.12).

Reasons, ``by``, replica hosts and audit fields are written by operators and replicas (and by
anyone the ACL lets write the keys); the CLI shows them as the characters they are: rich markup
is not read (a ``[link=...]`` reason gives no OSC 8 link, ``[/oops]`` raises nothing) and
control characters show as escapes, in the tables and in the JSON alike.
"""

from __future__ import annotations

import json
import time

import pytest
import redis as syncredis

from replica.contract import Keys
from tests.clikit import run

LINK = "[link=https://evil.example/login]see runbook[/link]"
EVIL_HOST = "node\x1b[2J\x1b]8;;https://evil.example\x1b\\-1\x9b31m\u202e"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, redis_url: str, fleet_name: str) -> None:
    for key in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FLEETGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("FLEETGATE_FLEET", fleet_name)


def add_replica(client: syncredis.Redis, fleet: str, replica_id: str, host: str) -> None:
    """A replica record as a replica writes it (only the fields these tests read)."""
    now = time.time()
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".000Z"
    client.hset(Keys(fleet).replica(replica_id), mapping={"host": host, "heartbeat_at": at})
    client.zadd(Keys(fleet).replicas, {replica_id: int(now * 1000)})


def test_history_prints_a_reason_with_link_markup_as_text_not_as_a_terminal_link(
    env: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "pause", "--reason", LINK, "--by", "[bold]mallory[/bold]")[0] == 0
    monkeypatch.setenv("FORCE_COLOR", "1")  # a colour terminal, where rich would emit OSC 8
    code, out, err = run(capsys, "history")
    assert code == 0, err
    assert "\x1b]8;" not in out
    assert LINK in out and "[bold]mallory[/bold]" in out
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "\x1b]8;" not in out and "[bold]mallory[/bold]" in out


def test_history_prints_a_reason_with_a_stray_closing_tag(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--reason", "db [/oops] migration")[0] == 0
    code, out, err = run(capsys, "history")
    assert code == 0, err
    assert "db [/oops] migration" in out


def test_history_shows_control_characters_in_stored_audit_fields_as_escapes(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    sync_redis.xadd(Keys(fleet_name).audit, {
        "action": "pause\x07", "reason": "clear\x1b[2Jscreen", "by": "ev\x1b]0;title\x07il",
        "version": "1", "at": "2026-11-30T08:00:00.000Z",
    })
    code, out, err = run(capsys, "history")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "clear\\x1b[2Jscreen" in out and "ev\\x1b]0;title\\x07il" in out and "pause\\x07" in out
    code, out, _ = run(capsys, "history", "--json")
    assert "\x1b" not in out
    assert json.loads(out)["events"][0]["reason"] == "clear\x1b[2Jscreen"


def test_status_shows_a_replica_host_and_a_by_holding_escape_sequences_as_escapes(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    assert run(capsys, "pause", "--reason", "maintenance", "--by", "alice")[0] == 0
    sync_redis.hset(Keys(fleet_name).state, "by", "al\x1b[8mice")
    add_replica(sync_redis, fleet_name, "r1", EVIL_HOST)
    code, out, err = run(capsys, "status")
    assert code == 0, err
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in out
    assert "node\\x1b[2J\\x1b]8;;https://evil.example\\x1b\\-1\\x9b31m\\u202e" in out
    assert "al\\x1b[8mice" in out


def test_status_json_escapes_every_control_character_and_keeps_the_text_whole(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    add_replica(sync_redis, fleet_name, "r1", EVIL_HOST)
    code, out, err = run(capsys, "status", "--json", "--all")
    assert code == 0, err
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in out
    assert "\\u009b" in out and "\\u202e" in out
    assert json.loads(out)["replicas"][0]["host"] == EVIL_HOST


def test_status_says_how_many_entries_of_the_replicas_set_it_cannot_read(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    add_replica(sync_redis, fleet_name, "r1", "node-1")
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "cannot be read" not in out  # nothing to say while every entry reads
    assert json.loads(run(capsys, "status", "--json")[1])["summary"]["unreadable"] == 0

    sync_redis.zadd(Keys(fleet_name).replicas, {"bad id": int(time.time() * 1000)})
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "1 entry of the replicas set cannot be read" in out and "r1" in out
    code, out, err = run(capsys, "status", "--json", "--all")
    assert code == 0, err
    body = json.loads(out)
    assert body["summary"]["unreadable"] == 1
    assert [r["id"] for r in body["replicas"]] == ["r1"]
