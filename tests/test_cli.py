"""The fleetgate CLI against a real Redis and real replicas (pools with controllers).

Most tests call ``coordinator.cli.app.main(argv)`` in-process with the replicas running in a thread
of their own; the exit-status tests also run the installed console script in a subprocess, to
prove the promise as an operator sees it: one line on stderr, never a traceback.
"""

from __future__ import annotations

import getpass
import json
import signal
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis as syncredis

from coordinator.demo.localredis import free_port
from replica.contract import Keys, parse_time
from tests.clikit import one_line, run
from tests.fleetkit import FLEETGATE, ReplicaThread, run_cli
from tests.procs import Processes


@pytest.fixture
def kit(env: None, redis_url: str, fleet_name: str) -> Iterator[ReplicaThread]:
    thread = ReplicaThread(redis_url, fleet_name, 3)
    with thread:
        yield thread


# ---------------------------------------------------------------------------- pause / resume


def test_pause_wait_returns_once_every_replica_is_quiet_and_prints_each_acknowledgement(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "pause", "--reason", "db failover", "--by", "alice", "--wait")
    assert code == 0, err
    assert "paused by alice: 'db failover'" in out
    for rid in ("r1", "r2", "r3"):
        assert rid in out
    assert kit.kit is not None
    for r in kit.kit.replicas:
        assert kit.call(lambda r=r: r.pool.quiet)
        assert kit.call(lambda r=r: r.pool.holds.get("fleet")) is not None


def test_pause_wait_json_reports_every_replica_reached_with_its_time(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    code, out, _ = run(capsys, "pause", "--reason", "deploy", "--wait", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["fleet"] == fleet_name
    assert body["state"]["paused"] is True and body["state"]["reason"] == "deploy"
    report = body["wait"]
    assert report["ok"] is True and report["action"] == "pause"
    assert sorted(r["id"] for r in report["replicas"]) == ["r1", "r2", "r3"]
    assert all(r["reached"] for r in report["replicas"])


def test_resume_wait_returns_once_every_replica_runs_again(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--reason", "maintenance", "--wait")[0] == 0
    code, out, err = run(capsys, "resume", "--by", "bob", "--wait")
    assert code == 0, err
    assert "resumed by bob" in out
    assert kit.kit is not None
    for r in kit.kit.replicas:
        assert not kit.call(lambda r=r: r.pool.paused)


@pytest.mark.usefixtures("env")
def test_a_wait_on_a_fleet_no_replica_reported_says_so_and_what_it_concluded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "pause", "--reason", "before the rollout", "--wait")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[1].startswith("no replica has reported: --wait had none to wait for; the fleet "
                               "is paused"), out
    assert "replica  reached" not in out  # no empty table header
    code, out, err = run(capsys, "resume", "--wait")
    assert code == 0, err
    assert "the fleet is running in Redis" in out and "replica  reached" not in out


def test_the_queue_is_untouched_across_a_cli_pause_and_resume(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--reason", "hold the queue", "--wait")[0] == 0
    assert kit.kit is not None
    for i in range(30):
        kit.call(lambda i=i: kit.kit.put(i % 3, i))  # type: ignore[union-attr]
    assert sum(kit.call(lambda r=r: len(r.ran)) for r in kit.kit.replicas) == 0
    assert run(capsys, "resume", "--wait")[0] == 0
    for r in kit.kit.replicas:
        kit.call(lambda r=r: r.pool.join(10))
    assert sorted(x for r in kit.kit.replicas for x in r.ran) == list(range(30))


def test_pause_by_defaults_to_the_os_user(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "pause", "--reason", "who am i", "--json")
    assert code == 0
    assert json.loads(out)["state"]["by"] == getpass.getuser()


def test_auto_resume_with_a_window_sets_auto_resume_at_to_the_same_window(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "pause", "--reason", "deploy", "--for", "30m", "--auto-resume", "--json")
    assert code == 0
    state = json.loads(out)["state"]
    since = parse_time(state["since"])
    assert since is not None
    assert parse_time(state["expected_until"]) == parse_time(state["auto_resume_at"])
    assert parse_time(state["expected_until"]) - since == timedelta(minutes=30)  # type: ignore[operator]


def test_a_window_without_auto_resume_sets_only_expected_until(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "pause", "--reason", "deploy", "--for", "2h", "--json")
    assert code == 0
    state = json.loads(out)["state"]
    assert state["expected_until"] is not None and state["auto_resume_at"] is None


# ---------------------------------------------------------------------------- exit 3


def test_pause_wait_times_out_with_exit_3_naming_the_replica_still_in_flight(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kit.kit is not None
    kit.call(lambda: kit.kit.put(1, {"hold": True}))  # type: ignore[union-attr]
    kit.call(lambda: kit.kit.held.wait())  # type: ignore[union-attr]
    code, out, err = run(capsys, "pause", "--reason", "stuck item", "--wait", "--timeout", "1s")
    assert code == 3
    line = one_line(err)
    assert "timed out" in line and "r2" in line and "in flight" in line
    assert "r1 " not in line and "r3 " not in line
    assert "paused by" in out  # the pause itself happened
    kit.kit.release()


def test_the_console_script_exits_3_on_a_wait_timeout_with_one_line(
    kit: ReplicaThread, redis_url: str, fleet_name: str
) -> None:
    assert kit.kit is not None
    kit.call(lambda: kit.kit.put(0, {"hold": True}))  # type: ignore[union-attr]
    kit.call(lambda: kit.kit.held.wait())  # type: ignore[union-attr]
    done = run_cli("pause", "--reason", "x", "--wait", "--timeout", "1", redis_url=redis_url, fleet=fleet_name)
    assert done.returncode == 3
    assert "r1" in one_line(done.stderr)
    kit.kit.release()


# ---------------------------------------------------------------------------- status / history


def test_status_json_has_the_documented_shape(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str], fleet_name: str
) -> None:
    assert run(capsys, "pause", "--reason", "shape", "--by", "carol", "--wait")[0] == 0
    code, out, _ = run(capsys, "status", "--json", "--all")
    assert code == 0
    body = json.loads(out)
    assert set(body) == {"fleet", "state", "replicas", "summary"}
    assert body["fleet"] == fleet_name
    assert body["state"]["paused"] is True and body["state"]["by"] == "carol"
    assert {"fleet", "paused", "reason", "by", "since", "version", "expected_until"} <= set(body["state"])
    assert sorted(r["id"] for r in body["replicas"]) == ["r1", "r2", "r3"]
    for r in body["replicas"]:
        assert r["applied_version"] == body["state"]["version"]
        assert {"in_flight", "queued", "heartbeat_at", "stale", "quiet"} <= set(r)
    summary = body["summary"]
    assert summary["replicas"] == 3 and summary["quiet"] == 3 and summary["unacknowledged"] == 0
    assert summary["effectively_paused"] is True and summary["overdue"] is False
    assert summary["pause_age_s"] >= 0


def test_status_shows_a_readable_table(
    kit: ReplicaThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--reason", "read me", "--by", "dave", "--for", "1h", "--wait")[0] == 0
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "PAUSED" in out and "'read me'" in out and "dave" in out and "expected until" in out
    for header in ("replica", "state", "version", "in flight", "queued", "last heartbeat"):
        assert header in out
    assert out.count("quiet") >= 3
    assert run(capsys, "resume", "--wait")[0] == 0
    assert "RUNNING" in run(capsys, "status")[1]


def test_status_of_a_registered_fleet_nobody_paused_is_running_with_no_replicas(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    # known to this Redis by its registry entry only (a fleet never seen exits 6:
    # tests/test_unknown_fleet.py)
    sync_redis.zadd("fleetgate:fleets", {fleet_name: 1})
    code, out, _ = run(capsys, "status", "--json", "--all")
    assert code == 0
    body = json.loads(out)
    assert body["state"]["paused"] is False and body["state"]["version"] == 0
    assert body["replicas"] == [] and body["summary"]["replicas"] == 0


def test_history_lists_pauses_and_resumes_newest_first(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "pause", "--reason", "first", "--by", "a")
    run(capsys, "resume", "--by", "b")
    run(capsys, "pause", "--reason", "second", "--by", "c")
    code, out, _ = run(capsys, "history", "--json")
    assert code == 0
    events = json.loads(out)["events"]
    assert [(e["action"], e["by"]) for e in events] == [("pause", "c"), ("resume", "b"), ("pause", "a")]
    assert [e["version"] for e in events] == [3, 2, 1]
    assert events[0]["reason"] == "second"
    code, out, _ = run(capsys, "history", "--limit", "1", "--json")
    assert [e["reason"] for e in json.loads(out)["events"]] == ["second"]
    code, out, _ = run(capsys, "history")
    assert out.index("second") < out.index("first")


def test_resume_takes_an_optional_reason_for_the_audit_trail(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "pause", "--reason", "drill", "--by", "a")
    code, _, err = run(capsys, "resume", "--reason", "   ", "--by", "b")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "reason" in err
    code, out, _ = run(capsys, "resume", "--reason", "drill over", "--by", "b", "--json")
    assert code == 0 and json.loads(out)["state"]["paused"] is False
    code, out, _ = run(capsys, "history", "--limit", "1", "--json")
    assert [(e["action"], e["reason"]) for e in json.loads(out)["events"]] == [
        ("resume", "drill over")]


def test_status_watch_prints_a_json_line_per_refresh_and_exits_0_on_ctrl_c(
    redis_url: str, fleet_name: str, processes: Processes
) -> None:
    proc = processes.start(
        [FLEETGATE, "--redis-url", redis_url, "--fleet", fleet_name, "status", "--watch", "--json",
         "--interval", "0.1"],
    )
    assert proc.stdout is not None
    lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
    assert all(line["fleet"] == fleet_name for line in lines)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: SIGINT at its default disposition (see Processes)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- enqueue


def test_enqueue_takes_json_items_and_plain_strings(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    code, out, _ = run(capsys, "enqueue", '{"id": "a"}', "42", "hello world", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["count"] == 3 and len(body["ids"]) == 3
    entries = sync_redis.xrange(Keys(fleet_name).work)
    assert [json.loads(fields["item"]) for _, fields in entries] == [{"id": "a"}, 42, "hello world"]


def test_enqueue_count_makes_numbered_synthetic_items(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    code, out, _ = run(capsys, "enqueue", "--count", "1500")
    assert code == 0 and "enqueued 1500 items" in out
    entries = sync_redis.xrange(Keys(fleet_name).work)
    assert len(entries) == 1500
    assert json.loads(entries[0][1]["item"]) == {"id": "item-000001", "n": 1}
    assert json.loads(entries[-1][1]["item"]) == {"id": "item-001500", "n": 1500}


def test_enqueue_file_reads_one_json_item_per_line_from_stdin(
    redis_url: str, fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    done = run_cli("enqueue", "--file", "-", stdin='{"id": 1}\n\n"two"\n[3]\n', redis_url=redis_url, fleet=fleet_name)
    assert done.returncode == 0, done.stderr
    entries = sync_redis.xrange(Keys(fleet_name).work)
    assert [json.loads(f["item"]) for _, f in entries] == [{"id": 1}, "two", [3]]


def test_enqueue_file_with_bad_json_exits_2_naming_the_line(
    env: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, sync_redis: syncredis.Redis,
    fleet_name: str,
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"ok": 1}\n{"ok": 2}\nnot json\n')
    code, _, err = run(capsys, "enqueue", "--file", str(path))
    assert code == 2
    assert "line 3" in one_line(err)
    assert sync_redis.xlen(Keys(fleet_name).work) == 0  # nothing half-enqueued


# ---------------------------------------------------------------------------- exit 2 and 1


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["pause"], "--reason"),
        (["pause", "--reason", ""], "reason must be 1 to 500"),
        (["pause", "--reason", "x" * 501], "reason must be 1 to 500"),
        (["pause", "--reason", "tab\there"], "printable"),
        (["pause", "--reason", "x", "--for", "10x"], "--for must be a duration"),
        (["pause", "--reason", "x", "--for", "8d"], "between 1s and 7d00h"),
        (["pause", "--reason", "x", "--wait", "--timeout", "0s"], "--timeout must be between"),
        (["pause", "--reason", "x", "--auto-resume"], "--auto-resume needs --for"),
        (["pause", "--reason", "x", "--bogus"], "No such option"),
        (["resume", "--stagger", "2h"], "--stagger must be between 1s and 1h00m"),
        (["history", "--limit", "0"], "--limit"),
        (["enqueue"], "exactly one of them"),
        (["enqueue", "a", "--count", "3"], "exactly one of them"),
        (["enqueue", "--file", "/nonexistent/items"], "cannot read"),
        (["--fleet", "Bad Name!", "status"], "invalid fleet"),
        (["frobnicate"], "No such command"),
    ],
)
def test_bad_usage_exits_2_with_one_line_on_stderr(
    env: None, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert fragment in one_line(err)


def test_the_console_script_prints_one_usage_line_without_panels(redis_url: str) -> None:
    done = run_cli("pause", "--for", "30m", redis_url=redis_url)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "--reason" in line
    assert not any(ch in done.stderr for ch in "╭│╰")


@pytest.mark.parametrize("argv", [["status"], ["pause", "--reason", "x"], ["history"], ["enqueue", "1"]])
def test_an_unreachable_redis_exits_1_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("FLEETGATE_FLEET", "unreachable")
    code, out, err = run(capsys, *argv)
    assert code == 1
    line = one_line(err)
    assert "cannot reach Redis at redis://:***@127.0.0.1" in line
    assert "s3cret" not in err and out == ""


def test_the_console_script_exits_1_without_a_traceback_when_redis_is_down() -> None:
    done = run_cli("status", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert done.returncode == 1
    assert "cannot reach Redis" in one_line(done.stderr)


def test_a_redis_url_that_is_not_one_exits_2(env: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--redis-url", "http://example.com", "status")
    assert code == 2
    assert "--redis-url" in one_line(err)


def test_serve_refuses_to_start_without_an_admin_token(redis_url: str, fleet_name: str) -> None:
    done = run_cli("serve", "--port", str(free_port()), redis_url=redis_url, fleet=fleet_name)
    assert done.returncode == 2
    assert "FLEETGATE_ADMIN_TOKEN" in one_line(done.stderr)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "pause" in out and "serve" in out
    code, out, _ = run(capsys, "pause", "--help")
    assert code == 0 and "--reason" in out and "--auto-resume" in out


def test_demo_pool_runs_the_pool_demo_and_exits_with_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--pool", "--json")
    assert code == 0
    assert json.loads(out)["ok"] is True


# ---------------------------------------------------------------------------- URLs and serve


BAD_URLS = [
    ("redis://127.0.0.1:notaport/0", "port that is not a number"),
    ("redis://:s3cret@[::1", "Invalid IPv6 URL"),
    ("[::1", "must be a redis://"),
    ("redis://:s3cret@/0", "has no host"),
    ("reddis://replica:s3cret@host:6379/0", "must be a redis://"),
    ("redis://:s3#cret@127.0.0.1:6379/0", "percent-encode"),
]


@pytest.mark.parametrize(("url", "fragment"), BAD_URLS)
def test_a_redis_url_that_cannot_work_exits_2_with_one_line_that_hides_the_password(
    env: None, capsys: pytest.CaptureFixture[str], url: str, fragment: str
) -> None:
    for argv in (["status"], ["pause", "--reason", "x"], ["enqueue", "1"]):
        code, out, err = run(capsys, "--redis-url", url, *argv)
        assert code == 2, err
        line = one_line(err)
        assert "--redis-url" in line and fragment in line
        assert "s3" not in err + out


@pytest.mark.parametrize(("url", "fragment"), BAD_URLS)
def test_serve_with_a_redis_url_that_cannot_work_exits_2_with_one_line(
    url: str, fragment: str
) -> None:
    done = run_cli("serve", "--port", str(free_port()), "--redis-url", url,
                   env={"FLEETGATE_ADMIN_TOKEN": "a-long-enough-admin-token-for-serve"})
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert "--redis-url" in line and fragment in line
    assert "s3" not in done.stderr + done.stdout


def test_serve_on_a_port_in_use_exits_2_with_one_line(redis_url: str, fleet_name: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("serve", "--port", str(port), redis_url=redis_url, fleet=fleet_name,
                       env={"FLEETGATE_ADMIN_TOKEN": "a-long-enough-admin-token-for-serve"})
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line


@pytest.mark.parametrize(
    "url",
    ["redis://:s3@cret@127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/0?password=s3cret&db=0",
     "redis://user:s3%23cret@127.0.0.1:{port}/0"],
)
def test_an_unreachable_redis_is_named_without_its_password_whatever_its_form(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    monkeypatch.setenv("FLEETGATE_REDIS_URL", url.format(port=free_port()))
    monkeypatch.setenv("FLEETGATE_FLEET", "unreachable")
    code, _, err = run(capsys, "status")
    assert code == 1
    assert "cannot reach Redis at redis://" in one_line(err) and "***" in err
    assert "s3" not in err
