"""Where a large request is decoded: off the thread that serves every client.

A frontend reads all its clients on one thread (HTTP: the event loop; gRPC: the
completion-queue thread), and decoding and validating a request costs time in proportion
to what it holds (inputs, BYTES elements, JSON values): done there, one request of 4
million BYTES elements kept every other client waiting for over a second. So a request
that ``costs_much`` is decoded, validated and started on a thread of its own,
``infercore-<kind>-large``; the serving thread goes on meanwhile, taking the GIL back at
each switch interval (5 ms) while that thread runs Python code. The cost is in what is
not tensor data (a JSON header, the protobuf fields around the raw tensors) and in BYTES
data, never in the bytes of other tensors, which become views: so a request costs much
when the rest is over ``LARGE_REQUEST_BYTES``, or when it is large and holds BYTES.
Small requests, and large tensors of numbers (a 1 MiB image), never leave the serving
thread.

Work on that thread runs with the cyclic collector paused (process-wide: Python has one
collector; two such threads at once only resume it early): a decode that builds hundreds
of thousands of objects (100k JSON inputs) otherwise sets off full collections, each one
long C call over every object in the process that holds the GIL (300 ms of a 0.9 s
decode, during which no other client was served). Nothing is lost: what the decode
builds is freed by reference counting, and collections resume when it ends.

While work runs there, the GIL's switch interval is 1 ms instead of Python's 5 ms
(process-wide too; restored when the last such work ends): a health check crosses
threads several times (gRPC core's queue thread, the event loop, back), and each crossing
waits up to one interval for the decoding thread to hand the GIL over: at 5 ms, 100k
inputs over gRPC kept other clients' checks waiting 45-65 ms, at 1 ms 17-29 ms. A
thread that does not wait for the GIL is not switched away from any more often.

A refused large request is followed by ``release_memory`` (memory.py) on that thread, once
what it held is gone, so the pages it used (its copies, the many small objects of its
inputs) go back to the system: never after small requests, and one release at a time
stands for every refusal queued before it. It is a full collection (the young
generations only when the last full one was under ``FULL_COLLECTION_S`` ago, so that a
flood of refusals cannot hold the GIL in collections): two rounds of the load-probe
corpus (benchmarks/load_probes.py) left the server 19 MiB larger with young-generation
releases, 3 MiB with full ones. Why is not pinned down: after 100k gRPC inputs the full
collection finds only a few hundred unreachable objects (closed HTTP connections'
cycles), yet Python's small-object arenas shrink by 13 MiB.

Threads: the frontend that owns a ``LargeRequests`` creates it when it starts and shuts it
down when it stops; ``submit``, ``run`` and ``release_refused`` may be called from any
thread (``_lock`` guards ``_release_queued``). The one thread is marked as serving
(response.py): the engine runs only brief models inline on it, so one long execution
cannot hold up the large requests behind it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..memory import release_memory

__all__ = ["LARGE_REQUEST_BYTES", "LargeRequests", "costs_much"]

# At most one full collection this often after refusals (see the module doc).
FULL_COLLECTION_S = 1.0

# Up to this size a request is decoded where it arrives: at most some 16k BYTES elements
# or a few thousand inputs, a few ms of work.
LARGE_REQUEST_BYTES = 64 * 1024

T = TypeVar("T")


def costs_much(rest: bytes, end: int, size: int) -> bool:
    """Whether a request of ``size`` bytes, whose part that is not raw tensor data is
    ``rest[:end]``, is one for the large-request thread (see the module doc)."""
    return end > LARGE_REQUEST_BYTES or (
        size > LARGE_REQUEST_BYTES and rest.find(b"BYTES", 0, end) >= 0)


class LargeRequests:
    """The thread that decodes a frontend's large requests, one at a time."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._release_queued = False
        self._full_collected = -FULL_COLLECTION_S  # (monotonic time; this thread only)

    def submit(self, work: Callable[..., T], *args: object) -> Future[T]:
        return self._executor.submit(_uncollected, work, *args)

    async def run(self, work: Callable[..., T], *args: object) -> T:
        """Await ``work(*args)`` run on the thread, from the frontend's event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, _uncollected, work, *args)

    def release_refused(self) -> None:
        """A refused large request is being dropped: give its memory back to the system
        once its references are gone (queued behind the work that held them: the
        executor drops a work item before it takes the next)."""
        with self._lock:
            if self._release_queued:
                return
            self._release_queued = True
        try:
            self._executor.submit(self._release)
        except RuntimeError:  # shut down: the process is ending anyway
            pass

    def _release(self) -> None:
        with self._lock:
            self._release_queued = False
        now = time.monotonic()
        if now - self._full_collected >= FULL_COLLECTION_S:
            self._full_collected = now
            release_memory(generation=2)
        else:
            release_memory(generation=1)

    def shutdown(self) -> None:
        """Finish the work already given (each answers its request), then end the thread."""
        self._executor.shutdown(wait=True)


# The GIL's switch interval while large work runs (see the module doc); the count of
# such works running and the interval to restore, under _switch_lock.
LARGE_WORK_SWITCH_S = 0.001
_switch_lock = threading.Lock()
_switch_users = 0
_switch_before = 0.0


def _shorten_switches() -> None:
    global _switch_users, _switch_before
    with _switch_lock:
        if _switch_users == 0:
            _switch_before = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_before, LARGE_WORK_SWITCH_S))
        _switch_users += 1


def _restore_switches() -> None:
    global _switch_users
    with _switch_lock:
        _switch_users -= 1
        if _switch_users == 0:
            sys.setswitchinterval(_switch_before)


def _uncollected(work: Callable[..., T], *args: object) -> T:
    """``work(*args)`` with the cyclic collector paused and the GIL handed over sooner
    (see the module doc)."""
    paused = gc.isenabled()  # (left as it is where something else turned it off)
    if paused:
        gc.disable()
    _shorten_switches()
    try:
        return work(*args)
    except BaseException as exc:
        # The frames of its traceback hold what the request built (a parsed document):
        # their locals go now, or the first collection after this would walk all of it.
        error: BaseException | None = exc
        seen: set[int] = set()  # a chain set by hand may loop back
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            traceback.clear_frames(error.__traceback__)
            error = error.__cause__ or error.__context__
        raise
    finally:
        _restore_switches()
        if paused:
            gc.enable()
