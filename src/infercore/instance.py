"""ModelInstance: one instance of a model version and the backend thread that runs it.

Threads: the loading thread creates the instance (the backend's initialize runs there)
and starts its thread; the backend thread, named ``infercore-<model>-<instance>``, loops
``next_payload -> execute -> record -> release`` until the scheduler returns None; a
caller blocked on its own result may execute one payload on an idle instance (see
scheduling/default.py); the unloading thread joins the backend thread and finalizes the
backend instance. ``busy`` is held for each execution and for finalize, so an instance
runs one payload at a time, whichever thread runs it, and is never finalized mid-payload.

For a model that is not decoupled, each request's final response is held back by its
sender until the execution's statistics are recorded, then released: a caller that has
its response also sees it counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .backends.base import BackendInstance, InstanceInfo
from .errors import InternalError, TritonError
from .payload import Payload
from .stats import ModelStats

__all__ = ["ModelInstance"]

logger = logging.getLogger(__name__)


class ModelInstance:
    """An instance of a model version, owning its backend instance and its thread."""

    def __init__(
        self,
        model_name: str,
        info: InstanceInfo,
        backend_instance: BackendInstance,
        next_payload: Callable[[], Payload | None],
        stats: ModelStats,
        *,
        decoupled: bool,
        clock: Callable[[], int],
    ) -> None:
        self.model_name = model_name
        self.info = info
        self._backend = backend_instance
        self._next_payload = next_payload
        self._stats = stats
        self._decoupled = decoupled
        self._clock = clock
        self._thread: threading.Thread | None = None
        self.busy = threading.Lock()
        self.execution_count = 0
        # Moving average of execute durations (ns, weight 1/8): lets the scheduler judge
        # whether running a payload on an event loop's thread would stall that loop.
        # Unknown (-1) until the first execution, and unknown counts as long.
        self.recent_execute_ns = -1

    @property
    def name(self) -> str:
        return self.info.name

    def start(self) -> None:
        thread = threading.Thread(
            target=self._run,
            name=f"infercore-{self.model_name}-{self.info.name}",
            daemon=True,  # a hung model must not keep the interpreter alive at exit
        )
        self._thread = thread
        thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it did (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def finalize(self, timeout: float = 30.0) -> None:
        """Finalize the backend instance once no payload runs on it (waits up to timeout)."""
        acquired = self.busy.acquire(timeout=timeout)
        if not acquired:
            logger.error("instance %s of model %s is still executing; finalizing anyway",
                         self.info.name, self.model_name)
        try:
            self._backend.finalize()
        except Exception:
            logger.exception("finalize of instance %s of model %s failed", self.info.name,
                             self.model_name)
        finally:
            if acquired:
                self.busy.release()

    def _run(self) -> None:
        next_payload = self._next_payload
        busy = self.busy
        while True:
            payload = next_payload()
            if payload is None:
                return
            with busy:
                self.execute(payload)

    def execute(self, payload: Payload) -> None:
        """Run one payload on this instance (the caller holds ``busy``), record, release."""
        requests = payload.requests
        hold = not self._decoupled
        if hold:
            for request in requests:
                request.sender.hold()  # type: ignore[union-attr]
        clock = self._clock
        start = clock()
        try:
            self._backend.execute(payload)
        except Exception as exc:
            self._fail_open_requests(payload, exc)
        end = clock()
        recent = self.recent_execute_ns
        self.recent_execute_ns = (end - start if recent < 0
                                  else recent + ((end - start - recent) >> 3))
        input_end = payload.compute_input_end_ns or start
        output_start = payload.compute_output_start_ns or end
        for request in requests:
            request.compute_start_ns = start
            request.compute_input_end_ns = input_end
            request.compute_output_start_ns = output_start
            request.compute_end_ns = end
            if hold and not request.sender.closed:  # type: ignore[union-attr]
                request.sender.send_error(InternalError(  # type: ignore[union-attr]
                    f"model '{self.model_name}' sent no response for request "
                    f"'{request.id}'"
                ))
        self.execution_count += 1
        self._stats.record_execution(requests, end)
        if hold:
            for request in requests:
                request.sender.release_held()  # type: ignore[union-attr]

    def _fail_open_requests(self, payload: Payload, exc: Exception) -> None:
        if isinstance(exc, TritonError):
            error: TritonError = exc
        else:
            logger.exception("instance %s of model %s raised in execute", self.info.name,
                             self.model_name)
            error = InternalError(
                f"instance '{self.info.name}' of model '{self.model_name}' failed: "
                f"{type(exc).__name__}: {exc}"
            )
        for request in payload.requests:
            sender = request.sender
            if sender is not None and not sender.closed:
                sender.send_error(error)
