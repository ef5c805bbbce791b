"""The default scheduler: every request is its own payload, taken by the first free instance.

Threads: callers put requests on one ``queue.SimpleQueue`` (C-implemented, lock-free for
the callers' purposes); every backend thread of the model blocks in ``get``. A request
cancelled while queued is answered when an instance dequeues it, without executing it.
``stop`` puts one sentinel per instance thread, after which requests still queued are
answered with UnavailableError.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ..errors import CancelledError, TritonError, UnavailableError
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
        self._stopped = False
        # Only the stop path touches these, so the lock costs requests nothing.
        self._markers_lock = threading.Lock()
        self._markers_queued = 0

    def enqueue(self, request: InferRequest) -> None:
        if self._stopped:
            raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
        request.queue_start_ns = self._clock()
        self._queue.put(request)

    def next_payload(self) -> Payload | None:
        get = self._queue.get
        while True:
            request = get()
            if request is _STOP:
                with self._markers_lock:
                    self._markers_queued -= 1
                return None
            if request.cancelled:
                self._fail(request, CancelledError("Request was cancelled"))
                continue
            return Payload([request], self._clock)

    def queued_count(self) -> int:
        # qsize() also counts the stop markers still queued; only requests matter here.
        with self._markers_lock:
            return max(0, self._queue.qsize() - self._markers_queued)

    def stop(self) -> None:
        """Wake the instance threads; fail whatever is still queued behind the sentinels."""
        self._stopped = True
        with self._markers_lock:
            for _ in range(self._instance_count):
                self._queue.put(_STOP)
            self._markers_queued += self._instance_count

    def drain(self) -> None:
        """After the instance threads exited: answer requests left in the queue."""
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is _STOP:
                with self._markers_lock:
                    self._markers_queued -= 1
            else:
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
