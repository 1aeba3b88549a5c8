"""The size rule of the tree: one concept per module, no module of replica/ or coordinator/
over ``MAX_LINES`` lines (a module that grows past it is split along a seam, as the controller,
the sync loop, the applier and the watcher were)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _oversized(root: Path) -> dict[str, int]:
    """The modules under ``root``'s replica/ and coordinator/ with more than ``MAX_LINES``
    lines, by path."""
    found: dict[str, int] = {}
    for package in ("replica", "coordinator"):
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found[str(path.relative_to(root))] = lines
    return found


def test_no_module_of_replica_or_coordinator_is_over_400_lines() -> None:
    assert _oversized(REPO) == {}


def test_the_rule_reports_a_module_over_the_bound_with_its_length(tmp_path: Path) -> None:
    (tmp_path / "replica" / "control").mkdir(parents=True)
    (tmp_path / "coordinator").mkdir()
    (tmp_path / "replica" / "control" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "coordinator" / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert _oversized(tmp_path) == {"replica/control/big.py": MAX_LINES + 1}

