"""The default scheduler: every request is its own payload, taken by the first free instance.

Threads: callers enqueue; every backend thread of the model blocks in the queue's ``get``;
a caller may take its own request as a payload and run it (dispatch.py); any thread may
cancel. The queue is a C-implemented ``queue.SimpleQueue``: a ``put`` is the one wake-up
signal (it wakes one blocked ``get``, or is found by the next one). ``_queued`` maps the id
of each request in the queue to the request: whoever pops an id from it (a backend
thread, a reader taking it, or a cancel) owns the request. ``dict.pop`` is atomic, so
claiming needs no lock; the backend thread that later dequeues an already-claimed request
skips it.

Request states: taken by its caller (never queued) | queued -> claimed (executing, or
answered as cancelled / timed out / unavailable).

``enqueue(take=True)`` (the caller holds an idle instance) returns the request's payload
at once: it never enters the queue (no ``_queued`` entry, no cancel hook: a cancel during
execution only sets the flag the backend sees). Otherwise the request is queued and put.
A reader that made no promise may still claim a queued request (``take``); the woken
backend thread then finds it claimed. There is no chaining: every queued request woke a
thread, which is coming for it, so a loop-driven payload is one payload (``poll`` None);
a payload handed back (its chain could not start it) is put for a thread as it is.

Timeouts: none. Without dynamic_batching Triton hands each request straight to its rate
limiter, where a request's own timeout is never looked at: it runs however long it
waited (Triton 2.51, benchmarks/qa_schedulers.py ``default_scheduler_timeout``). Queue
timeouts are the dynamic batcher's queue policies.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from functools import partial

from ..errors import CancelledError, TritonError, UnavailableError
from ..payload import Payload
from ..request import InferRequest
from .base import SchedulerStatistics

__all__ = ["DefaultScheduler"]

_STOP = None


class DefaultScheduler:
    """One request, one payload; FIFO across all instances of the model version."""

    callers_run = True

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
        # requests, payloads handed back, and _STOP
        self._queue: queue.SimpleQueue[InferRequest | Payload | None] = queue.SimpleQueue()
        self._queued: dict[int, InferRequest] = {}
        self._stopped = False
        # Diagnostics, counted without a lock: CPython does not switch threads inside
        # ``+= 1`` on an int attribute.
        self._ran_inline = 0
        self._wakeups = 0

    def enqueue(self, request: InferRequest, *, take: bool = False,
                chain: object | None = None) -> Payload | None:
        if self._stopped:
            raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
        request.queue_start_ns = self._clock()
        if take:  # the caller runs it: never queued
            self._ran_inline += 1
            return Payload([request], self._clock)
        self._queued[id(request)] = request
        request.on_cancel(partial(self._cancel_queued, request))
        self._wakeups += 1
        self._queue.put(request)
        return None

    def join_chain(self, request: InferRequest, chain: object) -> bool:
        return False  # never chained: see the module doc

    def poll(self, chain: object) -> Payload | None:
        return None

    def end_chain(self, chain: object) -> None:
        pass

    def hand_back(self, payload: Payload) -> None:
        self._wakeups += 1
        self._queue.put(payload)

    def next_payload(self) -> Payload | None:
        get = self._queue.get
        claim = self._queued.pop
        while True:
            request = get()
            if request is _STOP:
                return None
            if isinstance(request, Payload):
                return request  # handed back
            if claim(id(request), None) is None:
                continue  # run inline by its caller, or cancelled, already answered
            return Payload([request], self._clock)

    def take(self, request: InferRequest) -> Payload | None:
        """The queued ``request``'s payload for the reader, if it is still queued."""
        if self._queued.pop(id(request), None) is None:
            return None  # taken meanwhile by a backend thread or a cancel
        self._ran_inline += 1
        return Payload([request], self._clock)

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
            if isinstance(request, Payload):
                for held in request.requests:
                    self._fail(held, UnavailableError(
                        f"model '{self._model_name}' was unloaded before the request "
                        "could run"))
            elif request is not None:
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
