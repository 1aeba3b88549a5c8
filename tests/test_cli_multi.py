"""``fleetgate pause``/``resume`` of several fleets (issue 15 section 1, "Pausing several").

``--fleet a --fleet b`` makes one change per fleet, each audited in its own fleet, and prints
what each did (with ``--wait``, whether each is quiet); the command exits 0 only when every
fleet's change succeeded, else with the worst status (``multi.WORST_FIRST``), the others still
changed. ``--all-fleets`` changes every fleet of the registry: with ``--yes``, after a y on a
terminal, and never without a terminal to ask on. Replicas are real ``FleetController``s
(``tests.fleetkit.ReplicaThread``); the CLI runs in-process, or as the console script on a
pseudo-terminal for the question.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator

import pytest
import redis as syncredis

from coordinator.cli.multi import WORST_FIRST
from coordinator.demo.localredis import LocalRedis
from replica.contract import Keys
from tests.clikit import one_line, run
from tests.fleetkit import FLEETGATE, ROOT, ReplicaThread


@pytest.fixture
def url(private_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    """A Redis of the test's own: the registry holds the test's fleets only."""
    monkeypatch.setenv("FLEETGATE_REDIS_URL", private_redis.url)
    monkeypatch.delenv("FLEETGATE_FLEET", raising=False)
    return private_redis.url


@pytest.fixture
def client(url: str) -> Iterator[syncredis.Redis]:
    with syncredis.Redis.from_url(url, decode_responses=True) as c:
        yield c


def paused(client: syncredis.Redis, fleet: str) -> bool:
    return client.hget(Keys(fleet).state, "paused") == "1"


def audit(client: syncredis.Redis, fleet: str) -> list[tuple[str, str]]:
    """(action, reason) of the fleet's audit trail, oldest first."""
    return [(f["action"], f["reason"]) for _, f in client.xrange(Keys(fleet).audit)]


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by fleet (cells split on blanks)."""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["fleet", "did", "version"], out
    return {line.split()[0]: line.split()[1:] for line in lines[1:]}


def test_pausing_several_fleets_changes_and_audits_each_in_its_own_fleet_and_waits_for_each(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    with ReplicaThread(url, "orders", 2), ReplicaThread(url, "billing", 1):
        code, out, err = run(capsys, "pause", "--fleet", "orders", "--fleet", "billing",
                             "-r", "db failover", "--wait", "--timeout", "20s")
        assert (code, err) == (0, "")
        table = rows(out)
        assert table["orders"][:4] == ["paused", "v1", "yes", "(2"]
        assert table["billing"][:4] == ["paused", "v1", "yes", "(1"]
        assert paused(client, "orders") and paused(client, "billing")
        assert audit(client, "orders") == [("pause", "db failover")]
        assert audit(client, "billing") == [("pause", "db failover")]

        code, out, err = run(capsys, "resume", "--fleet", "orders", "--fleet", "billing",
                             "--wait", "--json")
        assert (code, err) == (0, "")
        data = json.loads(out)
        assert [d["fleet"] for d in data] == ["orders", "billing"]
        assert all(d["ok"] and d["exit"] == 0 and d["error"] is None for d in data)
        assert all(d["wait"]["ok"] and d["state"]["paused"] is False for d in data)
        assert not paused(client, "orders") and not paused(client, "billing")
        assert audit(client, "billing") == [("pause", "db failover"), ("resume", "")]


def test_one_fleet_failing_fails_the_command_and_the_others_are_still_changed(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "pause", "--fleet", "orders", "--fleet", "Not-A-Fleet",
                         "--fleet", "billing", "-r", "drill")
    assert code == 2
    line = one_line(err)
    assert "1 of 3 fleets failed" in line and "Not-A-Fleet: invalid fleet name" in line
    table = rows(out)
    assert table["orders"][:2] == ["paused", "v1"] and table["billing"][:2] == ["paused", "v1"]
    assert table["Not-A-Fleet"][:2] == ["failed", "-"]
    assert paused(client, "orders") and paused(client, "billing")

    code, out, err = run(capsys, "pause", "--fleet", "orders", "--fleet", "Not-A-Fleet",
                         "-r", "drill", "--json")
    assert code == 2
    bad = next(d for d in json.loads(out) if d["fleet"] == "Not-A-Fleet")
    assert (bad["ok"], bad["exit"], bad["state"]) == (False, 2, None)


def test_the_worst_status_wins_an_invalid_name_over_a_wait_that_ran_out_of_time(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert WORST_FIRST == (5, 1, 2, 4, 3)
    thread = ReplicaThread(url, "orders", 1)
    with thread as kit:
        thread.call(lambda: kit.put(0, {"hold": True}))  # stays in flight: never quiet
        thread.call(kit.held.wait)
        code, out, err = run(capsys, "pause", "--fleet", "orders", "--fleet", "billing",
                             "-r", "drill", "--wait", "--timeout", "3s")
        assert code == 3, err
        assert "orders: timed out" in one_line(err) and "billing" not in one_line(err)
        table = rows(out)
        assert table["orders"][:3] == ["paused", "v1", "no"]
        assert table["billing"][:3] == ["paused", "v1", "yes"]

        code, out, err = run(capsys, "pause", "--fleet", "orders", "--fleet", "BAD",
                             "-r", "drill", "--wait", "--timeout", "3s")
        assert code == 2, err  # a change refused is worse than a wait that ran out
        assert "BAD: invalid fleet name" in one_line(err)
        thread.call(kit.release)


def test_one_fleet_named_once_or_twice_prints_what_a_single_pause_prints(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The global --fleet is the single-fleet command as it was: the command's own --fleet,
    once or repeated, prints the same."""
    outputs = []
    for argv in (["--fleet", "orders", "pause"], ["pause", "--fleet", "orders"],
                 ["pause", "--fleet", "orders", "--fleet", "orders"]):
        fleet = f"f{len(outputs)}"
        argv = [fleet if a == "orders" else a for a in argv]
        code, out, err = run(capsys, *argv, "-r", "x", "--by", "alice")
        assert (code, err) == (0, "")
        outputs.append(out.replace(fleet, "F"))
    assert outputs[0] == outputs[1] == outputs[2]
    assert "fleet F paused by alice: 'x' (version 1)" in outputs[0]
    code, out, err = run(capsys, "resume", "--fleet", "f2", "--by", "alice")
    assert "fleet f2 resumed by alice (version 2)" in out


def test_all_fleets_without_yes_and_without_a_terminal_refuses_and_changes_nothing(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "--fleet", "orders", "-r", "x")[0] == 0
    assert run(capsys, "resume", "--fleet", "orders")[0] == 0
    code, out, err = run(capsys, "pause", "--all-fleets", "-r", "stop everything")
    assert (code, out) == (2, "")
    assert "--all-fleets would pause every fleet on this Redis: add --yes" in one_line(err)
    assert not paused(client, "orders")
    code, out, err = run(capsys, "pause", "--all-fleets", "--fleet", "orders", "-r", "x", "--yes")
    assert code == 2 and "not both" in one_line(err)


def test_all_fleets_with_yes_pauses_then_resumes_every_fleet_of_the_registry(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    with ReplicaThread(url, "orders", 1):
        for fleet in ("billing", "search"):  # registered by a change
            assert run(capsys, "pause", "--fleet", fleet, "-r", "x")[0] == 0
            assert run(capsys, "resume", "--fleet", fleet)[0] == 0
        code, out, err = run(capsys, "pause", "--all-fleets", "--yes", "-r", "incident",
                             "--wait", "--json")
        assert (code, err) == (0, ""), err
        data = json.loads(out)
        assert sorted(d["fleet"] for d in data) == ["billing", "orders", "search"]
        assert all(d["ok"] and d["state"]["paused"] for d in data)
        assert all(audit(client, f)[-1] == ("pause", "incident")
                   for f in ("billing", "orders", "search"))

        code, out, err = run(capsys, "resume", "--all-fleets", "--yes")
        assert (code, err) == (0, "")
        assert sorted(rows(out)) == ["billing", "orders", "search"]
        assert not any(paused(client, f) for f in ("billing", "orders", "search"))
        code, out, err = run(capsys, "resume", "--all-fleets", "--yes")
        assert code == 0
        assert rows(out)["orders"][:4] == ["not", "paused:", "nothing", "to"]


def _on_a_terminal(url: str, answer: bytes, *argv: str) -> tuple[int, str]:
    """Run the console script with a pseudo-terminal as stdin, type ``answer``; (exit, output)."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env["FLEETGATE_REDIS_URL"] = url
    try:
        proc = subprocess.Popen([FLEETGATE, *argv], stdin=follower, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        os.close(follower)
        os.write(leader, answer)
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(leader)
    return proc.returncode, out.decode()


def test_all_fleets_asks_on_a_terminal_and_a_no_changes_nothing(
    url: str, client: syncredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    for fleet in ("billing", "orders"):
        assert run(capsys, "pause", "--fleet", fleet, "-r", "x")[0] == 0
    code, out = _on_a_terminal(url, b"n\n", "resume", "--all-fleets")
    assert code == 2, out
    assert "resume 2 fleets (billing, orders)? [y/N]" in out and "not confirmed" in out
    assert paused(client, "billing") and paused(client, "orders")
    code, out = _on_a_terminal(url, b"y\n", "resume", "--all-fleets")
    assert code == 0, out
    assert not paused(client, "billing") and not paused(client, "orders")
