"""The default scheduler: every request is its own payload, taken by the first free instance.

Threads: callers enqueue; every backend thread of the model blocks in the queue's ``get``;
a caller may run its own request itself ("caller runs", see scheduling/base.py); any
thread may cancel. The queue is a C-implemented ``queue.SimpleQueue``: a ``put`` is the
one wake-up signal (it wakes one blocked ``get``, or is found by the next one). ``_queued``
maps the id of each request in the queue to the request: whoever pops an id from it (an
instance thread, a reader running it inline, or a cancel) owns the request. ``dict.pop``
is atomic, so claiming needs no lock; the instance thread that later dequeues an
already-claimed request skips it.

Request states: running on its caller (never queued) | queued -> claimed (executing, or
answered as cancelled / timed out / unavailable).

Caller runs: ``enqueue(caller_runs=True)`` reserves an idle instance first; if it gets one
the request executes there on the caller's thread and never enters the queue (no
``_queued`` entry, no cancel hook: a cancel during execution only sets the flag the
backend sees). Otherwise the request is queued and put, so a thread takes it as soon as
an instance is free: the reservation attempt and the handoff happen in one call on one
thread, so no request waits for a reader that never comes. A reader that made no promise
may still claim a queued request (``run_inline``) when an instance is idle; the woken
instance thread then finds it claimed.

Each instance's ``busy`` lock keeps it to one payload at a time whichever thread executes
it. On an event loop only an instance whose recent executions are short qualifies
(``ModelInstance.runs_short``): a short model costs the loop less than the two thread
crossings would, a long one must not stall it.

Timeouts: without a dynamic batcher there is one queue and no timer; a request whose
timeout passed while queued is answered "Request timeout expired" when it is dequeued,
and is never executed. (Models with dynamic_batching get timely rejections.)
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from functools import partial

from ..errors import CancelledError, TritonError, UnavailableError
from ..instance import ModelInstance
from ..payload import Payload
from ..request import InferRequest
from .base import SchedulerStatistics, reserve_for_loop, reserve_idle

__all__ = ["DefaultScheduler"]

_STOP = None


class DefaultScheduler:
    """One request, one payload; FIFO across all instances of the model version."""

    def __init__(
        self,
        model_name: str,
        instance_count: int,
        clock: Callable[[], int],
        on_failed: Callable[[InferRequest], None],
    ) -> None:
        self._model_name = model_name
        self._instance_count = instance_count
        self._clock = clock
        self._on_failed = on_failed
        self._queue: queue.SimpleQueue[InferRequest | None] = queue.SimpleQueue()
        self._queued: dict[int, InferRequest] = {}
        self._inline_instances: tuple[ModelInstance, ...] = ()
        self._stopped = False
        # Diagnostics, counted without a lock: CPython does not switch threads inside
        # ``+= 1`` on an int attribute.
        self._ran_inline = 0
        self._wakeups = 0

    def attach(self, instances: Sequence[ModelInstance]) -> None:
        """The instances a caller may borrow to run its own request inline."""
        self._inline_instances = tuple(instances)

    def enqueue(self, request: InferRequest, *, caller_runs: bool = False,
                on_loop: bool = False) -> None:
        if self._stopped:
            raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
        request.queue_start_ns = self._clock()
        if caller_runs and on_loop and not request.cancelled:
            reserved = reserve_for_loop(self._inline_instances)
            if reserved is not None:  # sent from the loop, finished there (base.py)
                self._ran_inline += 1
                request.runs_on_loop = True
                reserved[0].execute_on_loop(Payload([request], self._clock), reserved[1],
                                            reserved[0].unreserve)
                return
        if caller_runs and not request.cancelled:
            instance = reserve_idle(self._inline_instances, on_loop)
            if instance is not None:
                try:
                    self._ran_inline += 1
                    instance.execute(Payload([request], self._clock))
                finally:
                    instance.unreserve()
                return
        self._queued[id(request)] = request
        request.on_cancel(partial(self._cancel_queued, request))
        self._wakeups += 1
        self._queue.put(request)

    def next_payload(self) -> Payload | None:
        get = self._queue.get
        claim = self._queued.pop
        while True:
            request = get()
            if request is _STOP:
                return None
            if claim(id(request), None) is None:
                continue  # run inline by its caller, or cancelled, already answered
            if request.timeout_us and self._timed_out(request):
                continue
            return Payload([request], self._clock)

    def _timed_out(self, request: InferRequest) -> bool:
        if self._clock() - request.queue_start_ns < request.timeout_us * 1_000:
            return False
        self._fail(request, UnavailableError("Request timeout expired"))
        return True

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        """Execute the queued ``request`` on the calling thread if it is still queued and
        an instance is idle; False (nothing done) otherwise. ``on_loop``: the caller is an
        event loop, so only an instance whose recent executions were short qualifies."""
        if id(request) not in self._queued:
            return False
        instance = reserve_idle(self._inline_instances, on_loop)
        if instance is None:
            return False
        try:
            if self._queued.pop(id(request), None) is None:
                return False  # taken meanwhile by an instance thread or a cancel
            if request.timeout_us and self._timed_out(request):
                return True
            self._ran_inline += 1
            instance.execute(Payload([request], self._clock))
            return True
        finally:
            instance.unreserve()

    def _cancel_queued(self, request: InferRequest) -> None:
        if self._queued.pop(id(request), None) is not None:
            self._fail(request, CancelledError("Request was cancelled"))

    def queued_count(self) -> int:
        return len(self._queued)

    def statistics(self) -> SchedulerStatistics:
        return SchedulerStatistics(queued=len(self._queued), ran_inline=self._ran_inline,
                                   wakeups=self._wakeups)

    def stop(self) -> None:
        """Stop admitting; instance threads take what was queued before, then get None."""
        self._stopped = True
        for _ in range(self._instance_count):
            self._queue.put(_STOP)

    def drain(self) -> None:
        """After the instance threads exited: answer requests left in the queue."""
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                break
            if request is not _STOP:
                self._drop(request)
        for request in list(self._queued.values()):  # none expected: every one was put
            self._drop(request)

    def _drop(self, request: InferRequest) -> None:
        if self._queued.pop(id(request), None) is not None:
            self._fail(request, UnavailableError(
                f"model '{self._model_name}' was unloaded before the request could run"))

    def _fail(self, request: InferRequest, error: TritonError) -> None:
        sender = request.sender
        if sender is not None and not sender.closed:
            sender.send_error(error)
        self._on_failed(request)
