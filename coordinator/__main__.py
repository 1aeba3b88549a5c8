"""``python -m coordinator``: the same as the ``fleetgate`` command."""

from coordinator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
