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

A refused large request is followed by ``release_memory`` (memory.py) on that thread, once
what it held is gone, so the pages it used (its copies, the many small objects of its
inputs) go back to the system: never after small requests, and one release at a time
stands for every refusal queued before it. It collects the young generations only: what
the request built is there (no collection promoted it while the decode ran), and a full
collection holds the GIL for tens of milliseconds in a server with many objects.

Threads: the frontend that owns a ``LargeRequests`` creates it when it starts and shuts it
down when it stops; ``submit``, ``run`` and ``release_refused`` may be called from any
thread (``_lock`` guards ``_release_queued``). The one thread is marked as serving
(response.py): the engine runs only brief models inline on it, so one long execution
cannot hold up the large requests behind it.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..memory import release_memory

__all__ = ["LARGE_REQUEST_BYTES", "LargeRequests", "costs_much"]

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
        release_memory(generation=1)

    def shutdown(self) -> None:
        """Finish the work already given (each answers its request), then end the thread."""
        self._executor.shutdown(wait=True)


def _uncollected(work: Callable[..., T], *args: object) -> T:
    """``work(*args)`` with the cyclic collector paused (see the module doc)."""
    paused = gc.isenabled()  # (left as it is where something else turned it off)
    if paused:
        gc.disable()
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
        if paused:
            gc.enable()
