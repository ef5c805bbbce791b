"""Keeping the HTTP frontend's event loop awake for a moment after each request and answer.

An event loop with nothing left to do sleeps in ``epoll`` until the next event: a client's
next request, an instance thread's result, an isolated worker's answer. Being woken is not
free. On a VM, a vCPU that went idle takes an interrupt and a halt exit to run again, tens
of microseconds (docs/performance.md, "Process wake-up cost"), and a request to a small
model meets such a wake-up at each of its steps.

So, for a window after each request it reads and each response it writes, the loop does
not sleep: a callback that reschedules itself keeps a callback ready, and with one ready
the loop polls its sockets (``epoll`` with a zero timeout) instead of waiting on them.
Whatever comes within the window is handled at once, without a wake-up; after the window
the loop sleeps as before. This is busy polling (as in Linux's ``busy_poll``, or the Go
scheduler's spinning threads), bounded by the window: the loop's CPU goes up by at most a
window per request, and under load, when the loop is never idle, the polling costs one
cheap callback per loop iteration.
"""

from __future__ import annotations

import asyncio
import time


class BusyPoll:
    """Keeps ``loop`` polling, not sleeping, until ``window_us`` after the latest ``touch``.

    Used on the loop's thread only.
    """

    __slots__ = ("_loop", "_window_ns", "_deadline_ns", "_polling")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int) -> None:
        if window_us <= 0:
            raise ValueError(f"the busy-poll window must be positive, not {window_us}")
        self._loop = loop
        self._window_ns = window_us * 1000
        self._deadline_ns = 0
        self._polling = False

    @property
    def polling(self) -> bool:
        """Whether the loop is kept awake now."""
        return self._polling

    def touch(self) -> None:
        """Something happened: keep the loop awake for another window from now."""
        self._deadline_ns = time.monotonic_ns() + self._window_ns
        if not self._polling:
            self._polling = True
            self._loop.call_soon(self._poll)

    def _poll(self) -> None:
        if time.monotonic_ns() < self._deadline_ns:
            self._loop.call_soon(self._poll)  # still ready: the loop polls, then comes back
        else:
            self._polling = False
