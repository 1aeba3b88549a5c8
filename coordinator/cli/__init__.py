"""The ``fleetgate`` command. It loads the web side only for ``fleetgate serve``.

``main`` is the console script. It loads the command's modules itself, after making a Ctrl-C
that comes while they load end the process quietly with status 130 (the default handler would
print a ``KeyboardInterrupt`` traceback from the middle of an import).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

EXIT_INTERRUPTED_WHILE_LOADING = 130


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("fleetgate: interrupted by SIGINT\n")
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED_WHILE_LOADING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fleetgate`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    loading = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if loading:  # a SIGINT ignored by whoever started us stays ignored
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    from coordinator.cli.app import main as run

    if loading:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return run(argv)


__all__ = ["main"]
