"""The default scheduler: every request is its own payload, taken by the first free instance.

Threads: callers enqueue; every backend thread of the model blocks in the queue's ``get``;
a caller blocked on its own result may run its request itself (``run_inline``); any thread
may cancel. The queue is a C-implemented ``queue.SimpleQueue``. ``_queued`` maps the id of
each request still waiting to the request: whoever pops an id from it (an instance thread,
an inline caller, or a cancel) owns the request. ``dict.pop`` is atomic, so claiming needs
no lock; the instance thread that later dequeues an already-claimed request skips it.

Request states: queued -> claimed (executing, or answered as cancelled / unavailable).

Inline execution ("caller runs"): when a sync caller blocks on a result and an instance is
idle, the caller claims its request and executes it on that instance, on its own thread.
A request then crosses no thread at all, instead of two (a cross-core wake-up costs tens
of microseconds on small VMs). Each instance's ``busy`` lock keeps it to one payload at a
time whichever thread executes it. An asyncio consumer runs its request inline only while
the instance's recent executions are short (``ModelInstance.runs_short``): a short model
costs its event loop less than the two thread crossings would, a long one must not stall it.

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

    def attach(self, instances: Sequence[ModelInstance]) -> None:
        """The instances a blocked caller may borrow to run its own request inline."""
        self._inline_instances = tuple(instances)

    def enqueue(self, request: InferRequest, wake: bool = True) -> None:
        if self._stopped:
            raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
        request.queue_start_ns = self._clock()
        self._queued[id(request)] = request
        request.on_cancel(partial(self._cancel_queued, request))
        if wake:
            self._queue.put(request)

    def dispatch(self, request: InferRequest) -> None:
        if id(request) in self._queued:
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
        """Execute ``request`` on the calling thread if it is still queued and an instance
        is idle; False (nothing done) otherwise. ``on_loop``: the caller is an event loop,
        so only an instance whose recent executions were short qualifies."""
        if id(request) not in self._queued:
            return False
        for instance in self._inline_instances:
            if on_loop and not instance.runs_short():
                continue  # unknown or long: the loop must not wait for it
            if instance.try_reserve():
                try:
                    if self._queued.pop(id(request), None) is None:
                        return False
                    if request.timeout_us and self._timed_out(request):
                        return True
                    instance.execute(Payload([request], self._clock))
                    return True
                finally:
                    instance.unreserve()
        return False

    def _cancel_queued(self, request: InferRequest) -> None:
        if self._queued.pop(id(request), None) is not None:
            self._fail(request, CancelledError("Request was cancelled"))

    def queued_count(self) -> int:
        return len(self._queued)

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
                return
            if request is not _STOP and self._queued.pop(id(request), None) is not None:
                self._fail(
                    request,
                    UnavailableError(f"model '{self._model_name}' was unloaded before the "
                                     "request could run"),
                )

    def _fail(self, request: InferRequest, error: TritonError) -> None:
        sender = request.sender
        if sender is not None and not sender.closed:
            sender.send_error(error)
        self._on_failed(request)
