"""``fleetgate limits set|show|clear`` and ``fleetgate enqueue`` under a backlog limit (issue 21,
points 6 and 7), in-process against the shared Redis: what each prints, its exit status, and
what is in Redis afterwards."""

from __future__ import annotations

import json

import pytest
import redis as syncredis

from coordinator.cli.exits import EXIT_BACKLOG_FULL
from coordinator.cli.limits import MAX_BACKLOG
from replica.contract import Keys
from replica.contract.limits import MAX_BACKLOG as CONTRACT_MAX_BACKLOG
from tests.clikit import one_line, run
from tests.fleetkit import run_cli


def test_set_show_and_clear_say_what_they_did_and_are_audited(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    code, out, err = run(capsys, "enqueue", "--count", "3")
    assert code == 0, err
    code, out, _ = run(capsys, "limits", "show")
    assert (code, out.strip()) == (0, f"fleet {fleet_name}: no backlog limit (enqueueing is "
                                      "never refused); 3 not yet done (3 waiting, 0 pending)")
    code, out, _ = run(capsys, "limits", "set", "--max-backlog", "5", "--by", "alice")
    assert (code, out.strip()) == (0, f"backlog limit of fleet {fleet_name} set by alice: "
                                      "max_backlog 5, when full: reject (before: no limit)")
    code, out, _ = run(capsys, "limits", "set", "--max-backlog", "6", "--when-full", "wait",
                       "--by", "bob")
    assert code == 0 and "(before: 5 (when full: reject))" in out
    code, out, _ = run(capsys, "limits", "show")
    assert code == 0 and "backlog limit 6, when full: wait, set by bob at " in out
    code, out, _ = run(capsys, "status")
    assert code == 0 and "limit 6 (3 not yet done), when full: wait" in out
    code, out, _ = run(capsys, "status", "--json")
    limit = json.loads(out)["summary"]["backlog_limit"]
    assert (limit["max_backlog"], limit["when_full"], limit["by"]) == (6, "wait", "bob")
    code, out, _ = run(capsys, "limits", "clear", "--by", "carol", "--json")
    assert code == 0 and json.loads(out)["previous"]["max_backlog"] == 6
    code, out, _ = run(capsys, "limits", "clear")
    assert (code, out.strip()) == (0, f"fleet {fleet_name} has no backlog limit: nothing changed")
    code, out, _ = run(capsys, "history", "--limit", "3", "--json")
    assert [(e["action"], e["by"]) for e in json.loads(out)["events"]] == [
        ("limit_cleared", "carol"), ("limit_set", "bob"), ("limit_set", "alice")]
    assert not sync_redis.exists(Keys(fleet_name).limits)


def test_an_enqueue_refused_by_the_limit_exits_7_with_one_line_giving_backlog_and_limit(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    """A command of 2,500 items is three batches of 1,000: two fit under a limit of 2,100, the
    third is refused whole."""
    assert run(capsys, "limits", "set", "--max-backlog", "2100")[0] == 0
    code, out, err = run(capsys, "enqueue", "--count", "2500")
    assert code == EXIT_BACKLOG_FULL == 7
    line = one_line(err)
    assert "backlog full: 2000 not yet done, limit 2100" in line
    assert "500 items not enqueued; 2000 enqueued before it" in line
    assert sync_redis.xlen(Keys(fleet_name).work) == 2000
    code, out, err = run(capsys, "enqueue", "--count", "101", "--json")
    assert code == 7
    body = json.loads(out)
    assert (body["backlog"], body["limit"], body["refused"], body["count"]) == (2000, 2100, 101, 0)
    assert run(capsys, "enqueue", "--count", "100")[0] == 0  # what fits, fits
    assert sync_redis.xlen(Keys(fleet_name).work) == 2100


def test_a_waiting_enqueue_gives_up_at_its_timeout_with_exit_7(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    assert run(capsys, "limits", "set", "--max-backlog", "1", "--when-full", "wait")[0] == 0
    assert run(capsys, "enqueue", "first")[0] == 0
    code, _, err = run(capsys, "enqueue", "second", "--timeout", "1s")
    assert code == 7
    assert "backlog full: 1 not yet done, limit 1; 1 items not enqueued after waiting 1." \
        in one_line(err)
    assert sync_redis.xlen(Keys(fleet_name).work) == 1


def test_an_unreadable_limit_refuses_the_enqueue_with_exit_7_and_says_how_to_fix_it(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str
) -> None:
    assert run(capsys, "limits", "set", "--max-backlog", "5")[0] == 0
    sync_redis.hset(Keys(fleet_name).limits, "max_backlog", "lots")  # by hand
    code, _, err = run(capsys, "enqueue", "x")
    assert code == 7
    assert "the backlog limit cannot be read" in one_line(err) and "limits clear" in err
    code, out, _ = run(capsys, "limits", "show")
    assert code == 0 and "cannot be read" in out and "every enqueue is refused" in out
    code, out, _ = run(capsys, "status")
    assert code == 0 and "limit unreadable" in out
    assert sync_redis.xlen(Keys(fleet_name).work) == 0


@pytest.mark.parametrize("argv", [
    ["limits", "set", "--max-backlog", "0"],
    ["limits", "set", "--max-backlog", "lots"],
    ["limits", "set", "--max-backlog", str(MAX_BACKLOG + 1)],
    ["limits", "set"],
    ["limits", "set", "--max-backlog", "5", "--when-full", "sometimes"],
    ["limits", "set", "--max-backlog", "5", "--by", "\x1b[31m"],
    ["enqueue", "x", "--timeout", "10x"],
])
def test_a_bad_value_is_one_line_and_exit_2_with_nothing_written(
    env: None, capsys: pytest.CaptureFixture[str], sync_redis: syncredis.Redis, fleet_name: str,
    argv: list[str],
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    one_line(err)
    assert not sync_redis.exists(Keys(fleet_name).limits, Keys(fleet_name).work)


def test_show_of_a_fleet_never_seen_exits_6(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "limits", "show")
    assert code == 6 and "no fleet" in one_line(err)


def test_limits_with_redis_unreachable_exit_1(fleet_name: str) -> None:
    done = run_cli("limits", "set", "--max-backlog", "5", redis_url="redis://127.0.0.1:1/0",
                   fleet=fleet_name)
    assert done.returncode == 1
    assert "cannot reach Redis" in one_line(done.stderr)


def test_the_clis_bound_is_the_contracts() -> None:
    assert MAX_BACKLOG == CONTRACT_MAX_BACKLOG
