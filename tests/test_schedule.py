"""The order in which a parallel run hands out the suite's files (tests/schedule.py): the
longest first, by the seconds in the durations table, which ``--store-durations`` writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests import schedule

ROOT = Path(__file__).resolve().parent.parent
# three quick files that need no server: the table alone decides their order
FILES = ["tests/test_holds.py", "tests/test_options.py", "tests/test_waiters.py"]


def _pytest(table: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env[schedule.DURATIONS_ENV] = str(table)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist",
         "loadfile", "-v", *args, *FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=100,
    )


def _files_in_run_order(output: str) -> list[str]:
    order: list[str] = []
    for found in re.finditer(r"(tests/test_\w+\.py)::\S+ *$", output, re.MULTILINE):
        if found.group(1) not in order:
            order.append(found.group(1))
    return order


def test_files_are_ordered_longest_first_and_ties_keep_their_order() -> None:
    seconds = {"b.py": 30.0, "c.py": 30.0, "a.py": 2.0}
    assert schedule.order(["a.py", "b.py", "c.py"], seconds) == ["b.py", "c.py", "a.py"]


def test_a_file_the_table_does_not_know_goes_first() -> None:
    """A new file may be long: handed out last, it would end the run alone."""
    seconds = {"b.py": 30.0, "a.py": 2.0}
    assert schedule.order(["a.py", "b.py", "new.py"], seconds) == ["new.py", "b.py", "a.py"]


def test_a_missing_or_broken_table_orders_nothing_and_fails_nothing(tmp_path: Path) -> None:
    assert schedule.load(tmp_path / "absent.json") == {}
    (tmp_path / "broken.json").write_text("{not json")
    assert schedule.load(tmp_path / "broken.json") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert schedule.load(tmp_path / "list.json") == {}
    (tmp_path / "mixed.json").write_text('{"a.py": 3, "b.py": "x", "c.py": true, "d.py": 1.5}')
    assert schedule.load(tmp_path / "mixed.json") == {"a.py": 3.0, "d.py": 1.5}
    (tmp_path / "odd.json").write_text('{"a.py": NaN, "b.py": Infinity, "c.py": 2}')
    assert schedule.load(tmp_path / "odd.json") == {"c.py": 2.0}


def test_the_suites_own_table_names_its_longest_files() -> None:
    table = schedule.load()
    assert table, "tests/durations.json is missing or empty"
    names = set(table)
    assert {"tests/test_readme_walkthrough.py", "tests/test_failover_switch.py"} <= names
    assert all(Path(ROOT, name).exists() for name in names), (
        sorted(n for n in names if not Path(ROOT, n).exists()))
    # a file added since the table was written is not an error: it runs first (above), and
    # `make test-durations` writes the table again


def test_a_parallel_run_hands_out_the_files_in_the_tables_order(tmp_path: Path) -> None:
    table = tmp_path / "durations.json"
    for wanted in (FILES[::-1], [FILES[1], FILES[0], FILES[2]]):
        table.write_text(json.dumps({name: 10.0 * (3 - i) for i, name in enumerate(wanted)}))
        done = _pytest(table)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert _files_in_run_order(done.stdout) == wanted, done.stdout[-3000:]


def test_store_durations_writes_each_files_seconds_and_keeps_the_others(tmp_path: Path) -> None:
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"tests/test_gone.py": 7.5}))
    done = _pytest(table, "--store-durations")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = json.loads(table.read_text())
    assert written["tests/test_gone.py"] == 7.5
    assert set(FILES) <= set(written)
    assert all(isinstance(written[name], float) and written[name] >= 0 for name in FILES)
    assert list(written) == sorted(written)
