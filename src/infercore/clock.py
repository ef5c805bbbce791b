"""Clocks: monotonic time in nanoseconds, and waiting on a condition until a deadline.

Schedulers never sleep to poll: they wait on a condition variable with a deadline taken
from a Clock. ``MonotonicClock`` is the real one. ``ManualClock`` (in ``infercore.testing``)
moves only when a test advances it and wakes every waiter whose deadline passed, so
timeouts and batching delays are tested instantly and deterministically.

The rule: the engine reads time only through the Clock it is given.
``Options.clock`` is the server's; ``Server`` hands it to the repository manager and
poller, to every model (``ModelEnvironment.clock``) and from there to schedulers,
instances, warmup, statistics, the cache, the tracer and the metrics. Engine time is
every stamp, duration, delay, timeout and deadline that decides what the engine does or
reports on Triton's steady clock: request and queue timestamps, batching delays, queue
and sequence idle timeouts, poll intervals, restart back-offs, drain and unload
deadlines. A wait bounded by engine time waits on a condition through
``Clock.wait`` (so a ManualClock wakes it); a wait on something no clock can wake (a
thread join, an OS process, a socket) takes its bound from ``seconds_until``.

Not engine time, and so read directly (``tests/test_clock_reads.py`` keeps the list):

- wall-clock timestamps that Triton reports as wall time (``time.time_ns``: a model's
  last inference, OpenTelemetry span times);
- the edges, which bound network and process shutdowns in real seconds: ``frontends/``,
  ``remote/`` (the client), ``launch``, ``serving``, ``cli`` and the ``--supervise``
  parent process;
- a caller's own wait for its answer (``ResponseStream.result(timeout=...)``), in the
  caller's seconds;
- code that runs in another process and is handed no clock: the Python backend's worker
  process, the Ray actor host, and the server side's bounds on waiting for a worker
  process to exit.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock", "deadline_after", "seconds_until"]


@runtime_checkable
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


def deadline_after(clock: Clock, seconds: float) -> int:
    """The deadline (``clock``'s ns) ``seconds`` from now; negative seconds count as 0."""
    return clock.now_ns() + int(max(0.0, seconds) * 1e9)


def seconds_until(clock: Clock, deadline_ns: int) -> float:
    """Seconds left before ``deadline_ns`` on ``clock`` (0.0 once it passed): the bound
    for a wait that no clock can wake (a thread join, a process exit)."""
    return max(0.0, (deadline_ns - clock.now_ns()) / 1e9)
