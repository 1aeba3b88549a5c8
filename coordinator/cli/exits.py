"""The exit statuses of ``fleetgate`` and the error that carries one.

    0  done
    1  Redis cannot be reached (or an unexpected error)
    2  bad usage or configuration
    3  a --wait that timed out (the stragglers named on stderr)
    4  a pause or resume written to the Redis primary but not confirmed by a replica in time
    5  the outcome of a change is unknown: it was sent and no answer came (read the state)
    6  no such fleet: ``status`` or ``history`` of a fleet with no state, no replicas, no audit
       trail and no registry entry (a mistyped name; the API answers 404 for it)
    7  ``enqueue`` refused by the fleet's backlog limit (``BacklogFull``): the batch was not
       written (with ``when_full`` wait: not within ``--timeout``); or the limit cannot be read
  130  interrupted by SIGINT (Ctrl-C); ``status --watch`` ends with 0 (see cli.read)
  143  stopped by SIGTERM; 0 for ``status --watch``

Every failure is one line on stderr, never a traceback: a command raises ``CliError`` and the
entry point (``coordinator.cli.app.main``) prints it.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_UNREACHABLE: Final = 1
EXIT_USAGE: Final = 2
EXIT_TIMEOUT: Final = 3
EXIT_NOT_CONFIRMED: Final = 4
EXIT_OUTCOME_UNKNOWN: Final = 5
EXIT_UNKNOWN_FLEET: Final = 6
EXIT_BACKLOG_FULL: Final = 7
EXIT_ROLLED_BACK: Final = 8
EXIT_INTERRUPTED: Final = 130
EXIT_TERMINATED: Final = 143

EXIT_STATUSES: Final = {
    EXIT_OK: "done",
    EXIT_UNREACHABLE: "Redis cannot be reached (or an unexpected error)",
    EXIT_USAGE: "bad usage or configuration",
    EXIT_TIMEOUT: "a --wait ran out of --timeout",
    EXIT_NOT_CONFIRMED: "the change is made on the Redis primary but no replica confirmed it",
    EXIT_OUTCOME_UNKNOWN: "the outcome of a change is unknown",
    EXIT_UNKNOWN_FLEET: "no such fleet on this Redis (a mistyped name)",
    EXIT_BACKLOG_FULL: "enqueue refused by the fleet's backlog limit: nothing of the batch written",
    EXIT_ROLLED_BACK: "a canary resume's soak saw trouble: the hold is back on the canaries",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C (SIGINT)",
    EXIT_TERMINATED: "stopped by SIGTERM",
}
"""What each status means (the README's table lists the same)."""


class CliError(Exception):
    """A failure the CLI reports as one line on stderr with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def usage(message: str) -> CliError:
    """A usage or configuration error (exit status 2)."""
    return CliError(message, EXIT_USAGE)


__all__ = [
    "EXIT_BACKLOG_FULL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_CONFIRMED",
    "EXIT_OK",
    "EXIT_OUTCOME_UNKNOWN",
    "EXIT_ROLLED_BACK",
    "EXIT_STATUSES",
    "EXIT_TERMINATED",
    "EXIT_TIMEOUT",
    "EXIT_UNKNOWN_FLEET",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CliError",
    "usage",
]
