"""Clocks: monotonic time in nanoseconds, and waiting on a condition until a deadline.

Schedulers never sleep to poll: they wait on a condition variable with a deadline taken
from a Clock. ``MonotonicClock`` is the real one. ``ManualClock`` (in ``infercore.testing``)
moves only when a test advances it and wakes every waiter whose deadline passed, so
timeouts and batching delays are tested instantly and deterministically.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "MonotonicClock"]


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic time in nanoseconds."""
        ...

    def wait(self, condition: threading.Condition, deadline_ns: int | None) -> None:
        """Wait on ``condition`` (held by the caller) until notified or ``deadline_ns``."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic_ns`` and timed condition waits."""

    __slots__ = ()

    now_ns = staticmethod(time.monotonic_ns)

    def wait(self, condition: threading.Condition, deadline_ns: int | None) -> None:
        if deadline_ns is None:
            condition.wait()
            return
        remaining = (deadline_ns - time.monotonic_ns()) / 1e9
        if remaining > 0:
            condition.wait(remaining)
