"""Running the fleetgate CLI in-process for the CLI tests: ``run`` and ``one_line``.

``run`` calls ``coordinator.cli.app.main(argv)`` and returns what it printed; ``one_line`` is
the promise a failing command keeps: one line on stderr, ``fleetgate: ...``, no traceback.
(A subprocess of the installed script is ``tests.fleetkit.run_cli``.)
"""

from __future__ import annotations

import pytest

from coordinator.cli.app import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``fleetgate ARGV``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The one line on stderr of a command that failed."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    assert lines[0].startswith("fleetgate: ")
    return lines[0]
