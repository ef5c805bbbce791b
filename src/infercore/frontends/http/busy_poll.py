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

Polling is for requests the loop answers itself: a model run inline on it, or a
process-isolated worker driven from it. When a request is answered by a thread of this
process instead (an instance thread running a longer model), the handler awaiting it
holds the poller (``hold``/``release``), and the loop does not poll at all for a while:
a polling loop takes the GIL back after every poll, and a thread waiting for the GIL
meanwhile hardly ever gets it (Python hands the GIL over only when the holder lets go for
a while), and it takes a CPU that such threads could use. Measured with a 400 µs
pure-Python model on 2 instances, polling cost 13% of its throughput at concurrency 1;
with the hold, none. So while threads answered requests within the last
``_QUIET_AFTER_HOLD_NS``, a touch does not start polling.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...response import ResponseStream

# After a request was answered by a thread of this process, no polling for this long.
_QUIET_AFTER_HOLD_NS = 10_000_000


class BusyPoll:
    """Keeps ``loop`` polling, not sleeping, until ``window_us`` after the latest ``touch``.

    Used on the loop's thread only.
    """

    __slots__ = ("_loop", "_window_ns", "_deadline_ns", "_polling", "_holds", "_held_ns",
                 "_clock")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        if window_us <= 0:
            raise ValueError(f"the busy-poll window must be positive, not {window_us}")
        self._loop = loop
        self._clock = clock  # ns; tests hand in their own
        self._window_ns = window_us * 1000
        self._deadline_ns = 0
        self._polling = False
        self._holds = 0  # answers awaited from other threads of this process
        self._held_ns = -_QUIET_AFTER_HOLD_NS  # when a hold last began or ended

    @property
    def polling(self) -> bool:
        """Whether the loop is kept awake now."""
        return self._polling

    def touch(self) -> None:
        """Something happened: keep the loop awake for another window from now, unless a
        thread of this process answers for the loop now or did so lately."""
        now = self._clock()
        self._deadline_ns = now + self._window_ns
        if (not self._polling and not self._holds
                and now - self._held_ns > _QUIET_AFTER_HOLD_NS):
            self._polling = True
            self._loop.call_soon(self._poll)

    def hold(self) -> None:
        """A thread of this process is answering for the loop: no polling until the
        matching ``release``, nor for a while after (the polling would keep the GIL from
        such threads)."""
        self._holds += 1
        self._held_ns = self._clock()

    def release(self) -> None:
        self._holds -= 1
        self._held_ns = self._clock()

    def _poll(self) -> None:
        if not self._holds and self._clock() < self._deadline_ns:
            self._loop.call_soon(self._poll)  # still ready: the loop polls, then comes back
        else:
            self._polling = False


def hold_while_a_thread_answers(busy_poll: BusyPoll | None,
                                stream: ResponseStream) -> BusyPoll | None:
    """The poller, held, when ``stream``'s answer is to come from a thread of this process
    (not there yet, and its request not run from the loop); None otherwise. The caller
    releases it once the answer came."""
    if busy_poll is None or stream.done or stream.request.runs_on_loop:
        return None
    busy_poll.hold()
    return busy_poll
