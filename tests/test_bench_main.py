"""``make bench``'s runner (``bench/__main__.py``): a benchmark that fails (5,000 replicas on a
machine too loaded to acknowledge them) is a row that says so, the others still run, the
results are still written, and the exit status is 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main

OK = """def run():
    return [{"bench": "ok", "case": "measured", "value": 2.0, "unit": "ms", "baseline": 1.0,
             "ratio": 2.0, "goal": None}]
"""
BAD = """def run():
    raise RuntimeError("pause not acknowledged\\nby all 5000")
"""


def test_a_benchmark_that_fails_is_a_row_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fleetgate_bench_bad.py").write_text(BAD)
    (tmp_path / "fleetgate_bench_ok.py").write_text(OK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLEETGATE_BENCH_RESULTS", str(tmp_path / "results"))

    assert main(["fleetgate_bench_bad", "fleetgate_bench_ok"]) == 1

    rows = json.loads((tmp_path / "results" / "latest.json").read_text())["rows"]
    assert [(r["bench"], r["case"], r["value"]) for r in rows] == [
        ("fleetgate_bench_bad", "FAILED: pause not acknowledged by all 5000", None),
        ("ok", "measured", 2.0),
    ]
    out, err = capsys.readouterr()
    assert "| fleetgate_bench_bad | FAILED: pause not acknowledged by all 5000 | - |" in out
    assert "FAILED fleetgate_bench_bad: RuntimeError: pause not acknowledged by all 5000" in err
    assert err.rstrip().endswith("benchmarks that failed: fleetgate_bench_bad")


def test_a_run_where_every_benchmark_succeeds_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fleetgate_bench_ok.py").write_text(OK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLEETGATE_BENCH_RESULTS", str(tmp_path / "results"))
    assert main(["fleetgate_bench_ok"]) == 0
