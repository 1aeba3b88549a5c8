"""When ``wait``'s fallback poll reads the records of the replicas it has not heard from.

The fallback is for replicas that went silent (frozen, cut off, killed) and for those that
joined or left during a wait: every ``wait_poll_interval`` it reads the ``replicas`` set and the
pending replicas' records. At a change to thousands of replicas the acknowledgements take
longer than an interval to come in, and a poll then reads the records of replicas whose
acknowledgements are on their way (one script call per 500 records, and their parse, in the
middle of the acknowledgements' intake, on the same Redis and the same event loop).

So while acknowledgements keep coming, the poll waits: at each due time it runs only if no
acknowledgement resolved a pending replica during the interval before (or the channel is lost,
when the records are all there is). Every interval that postpones it has resolved at least one
replica, so it is postponed at most as many times as there are replicas waited for, and never
past the wait's deadline: a replica silent at the change is polled one interval after the last
acknowledgement that came, and whoever is still pending at the deadline has its record read by
the wait's final word.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FallbackPoll"]


class FallbackPoll:
    """The fallback poll's clock for one wait: ``due_at`` (monotonic seconds) is the next time
    to ask ``due()``; ``resolved()`` notes a pending replica resolved by an acknowledgement."""

    __slots__ = ("_resolved", "due_at", "interval", "polls", "postponed")

    def __init__(self, interval: float, now: float) -> None:
        self.interval: Final = interval
        self.due_at = now + interval
        self._resolved = 0
        self.polls = 0
        """Polls run in this wait."""
        self.postponed = 0
        """Due times passed over because acknowledgements were still resolving replicas."""

    def start(self, now: float) -> None:
        """The wait starts following: the first poll is due one interval from now."""
        self.due_at = now + self.interval
        self._resolved = 0

    def resolved(self) -> None:
        self._resolved += 1

    def due(self, now: float, listening: bool) -> bool:
        """Whether to poll now (``listening``: the acknowledgements channel works). A due time
        reached with replicas resolved since the last one passes: the next is an interval on."""
        if now < self.due_at:
            return False
        self.due_at = now + self.interval
        streaming, self._resolved = self._resolved > 0, 0
        if listening and streaming:
            self.postponed += 1
            return False
        self.polls += 1
        return True

    def polled(self, now: float) -> None:
        """The poll ended (it took a round trip): the next is due an interval from now."""
        self.due_at = now + self.interval
