"""Model instances: a backend instance with its reservation lock, statistics and timing.

Threads: the loading thread creates each ModelInstance (the backend's initialize runs
there); dispatch.py is the only caller of ``execute``/``execute_on_loop``, on a backend
thread, on a caller that runs its own request, or on an event loop driving a chain; the
unloading thread finalizes it.

``busy`` keeps an instance to one payload at a time whichever thread runs it, and the
instance is never finalized mid-payload (finalize takes ``busy`` too). A reservation is
``busy`` plus the instance's rate-limiter resources; dispatch.py takes both
(``acquire``/``try_acquire`` are the ``busy`` half). ``waiting`` counts threads blocked
in ``acquire``: a loop-driven chain ends when one waits. States: serving -> finalizing
(``inline_allowed`` and ``loop_capable`` cleared: nobody may borrow it) -> finalized.

For a model that is not decoupled, each request's final response is held back by its
sender until the execution's statistics are recorded, then released: a caller that has
its response also sees it counted.

A decoupled request still open when its execution ends (the model answers later, from
its own threads, or never) and then cancelled gets ``CANCEL_GRACE_S`` to end: the model
sees ``is_cancelled()`` and usually answers (an error, the final flag), and its answer
reaches the caller as Triton delivers it. One that is still open after that is ended
here with CancelledError: the model may never send its final flag, and the caller (an
in-process stream, a frontend, a BLS caller) must not wait for it. The backend's later
sends are dropped (the Python backend's sender drops them without raising, as Triton
does for a cancelled request). ``_CancelGrace`` keeps those deadlines: its thread
(``infercore-<model>-<instance>-cancel-grace``) runs while any is pending and ends by
itself; ``finalize`` stops and joins it. Its condition guards the pending list.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

from .backends.base import BackendInstance, InstanceInfo, LoopInstance
from .errors import CancelledError, InternalError, InvalidArgumentError, TritonError
from .payload import Payload
from .rate_limiter import ResourceAsk
from .stats import ModelStats

if TYPE_CHECKING:
    from .request import InferRequest
    from .response import ResponseSender

__all__ = ["ModelInstance", "cpu_cores_of", "log_state", "pin_current_thread"]

logger = logging.getLogger(__name__)


def log_state(request: InferRequest, old: str, new: str) -> None:
    """Triton's verbose line for a request changing state (its infer_request.cc)."""
    logger.debug("[request id: %s] Setting state from %s to %s", request.id or "<id_unknown>",
                 old, new)

# Longest recent execute time (ns) for which an event loop's thread runs a request inline.
INLINE_ON_LOOP_MAX_NS = 50_000

_NO_RESOURCES = ResourceAsk(())


CANCEL_GRACE_S = 2.0  # a cancelled decoupled request's time to end by its model


class ModelInstance:
    """An instance of a model version: its backend instance, reservation and statistics."""

    def __init__(
        self,
        model_name: str,
        info: InstanceInfo,
        backend_instance: BackendInstance,
        stats: ModelStats,
        *,
        decoupled: bool,
        clock: Callable[[], int],
        resources: ResourceAsk = _NO_RESOURCES,
        inline_allowed: bool = True,
        inline_on_loop_allowed: bool = True,
    ) -> None:
        self.model_name = model_name
        self.info = info
        self._backend = backend_instance
        self._stats = stats
        self._decoupled = decoupled
        self._clock = clock
        self.resources = resources  # what one execution takes from the rate limiter
        # False for instances whose thread must be the only one running them
        self.inline_allowed = inline_allowed and not info.passive
        # False: an event loop's thread never runs it, however short its executions
        self._inline_on_loop = inline_on_loop_allowed
        self.busy = threading.Lock()
        # A backend that can run payloads from an event loop declares it (backends/base.py;
        # checked once: the common backends cannot)
        self._loop: LoopInstance | None = (backend_instance if not decoupled and isinstance(
            backend_instance, LoopInstance) else None)
        self.loop_capable = self._loop is not None
        # Threads waiting in acquire(); read (without the lock) by runs_on_loop.
        self.waiting = 0
        self._waiting_lock = threading.Lock()
        self.execution_count = 0
        # A typical recent execute duration (ns): lets the scheduler judge whether running
        # a payload on an event loop's thread would stall that loop. It follows shorter
        # executions fast (weight 1/2) and longer ones slowly (1/16), so a rare slow one
        # (the thread preempted, or waiting for the GIL while an instance thread runs a
        # Python model next to a busy loop) moves it little and briefly, while a model
        # that is slow every time crosses INLINE_ON_LOOP_MAX_NS (from 20 us: a 2 ms one at
        # once, a 100 us one after 8). Unknown (-1) until the first execution, and unknown
        # counts as long.
        self.recent_execute_ns = -1
        self._cancel_grace = _CancelGrace(model_name, info.name, clock)

    @property
    def name(self) -> str:
        return self.info.name

    def runs_on_loop(self) -> bool:
        """Whether a payload can run from an event loop without blocking it: the backend
        starts it there and finishes it when its answer is readable (process-isolated
        instances: ``execute_on_loop``), and no thread waits to reserve the instance."""
        backend = self._loop
        return (self.loop_capable and self.inline_allowed and not self.waiting
                and backend is not None and backend.loop_ready())

    def runs_short(self) -> bool:
        """Known to execute quickly enough to run on an event loop's thread."""
        return self._inline_on_loop and 0 <= self.recent_execute_ns <= INLINE_ON_LOOP_MAX_NS

    # -- the busy half of a reservation (dispatch.py adds the resources) ---------------------
    def try_acquire(self) -> bool:
        """Take ``busy`` now, without waiting, for a caller or a loop; False if busy (or
        finalized: checked again under ``busy``, which finalize holds while it clears
        ``inline_allowed``)."""
        if not self.inline_allowed or not self.busy.acquire(False):
            return False
        if self.inline_allowed:
            return True
        self.busy.release()
        return False

    def acquire(self) -> None:
        """Wait for ``busy`` (a backend thread, warmup)."""
        with self._waiting_lock:
            self.waiting += 1  # an event loop running payloads here lets this thread in
        self.busy.acquire()
        with self._waiting_lock:
            self.waiting -= 1

    def release(self) -> None:
        self.busy.release()

    def finish_from_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """``loop`` is being detached (dispatch.detach_loop, on its thread): finish here a
        payload still in flight from it."""
        if self._loop is not None:
            self._loop.finish_from_loop(loop)

    def finalize(self, timeout: float = 30.0) -> None:
        """Finalize the backend instance once no payload runs on it (waits up to timeout)."""
        self.loop_capable = False  # a chain running here ends after its payload
        self._cancel_grace.stop()
        acquired = self.busy.acquire(timeout=timeout)
        self.inline_allowed = False  # no caller may reserve it from now on
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

    # -- execution ---------------------------------------------------------------------------
    def execute(self, payload: Payload) -> None:
        """Run one payload (the caller holds the reservation), record, release responses."""
        requests = payload.requests
        hold = not self._decoupled
        if hold:
            for request in requests:
                request.sender.hold()  # type: ignore[union-attr]
        clock = self._clock
        verbose = logger.isEnabledFor(logging.DEBUG)
        if verbose:  # Triton's backends' lines at verbose level 1
            for request in requests:
                log_state(request, "PENDING", "EXECUTING")
            logger.debug("model %s, instance %s, executing %d requests", self.model_name,
                         self.info.name, len(requests))
        start = clock()
        try:
            self._backend.execute(payload)
        except Exception as exc:
            self._fail_open_requests(payload, exc)
        end = clock()
        if verbose:
            for request in requests:
                log_state(request, "EXECUTING", "RELEASED")
            logger.debug("TRITONBACKEND_ModelInstanceExecute: model instance name %s "
                         "released %d requests", self.info.name, len(requests))
        took = end - start
        recent = self.recent_execute_ns
        if recent < 0:
            self.recent_execute_ns = took
        elif took < recent:
            self.recent_execute_ns = recent + ((took - recent) >> 1)
        else:
            self.recent_execute_ns = recent + ((took - recent) >> 4)
        self._complete(payload, start, end)

    def execute_on_loop(self, payload: Payload, loop: asyncio.AbstractEventLoop,
                        then: Callable[[Payload | None], None]) -> None:
        """Start one payload from ``loop``, the running event loop, without blocking it (the
        caller holds the reservation; only when ``runs_on_loop``). The backend finishes it
        on the loop; then it is recorded, its responses released, and ``then(None)``
        called (which releases the reservation or starts the next payload). If the
        backend could not start it at all (its requests untouched), ``then(payload)``."""
        for request in payload.requests:
            request.sender.hold()  # type: ignore[union-attr]
        verbose = logger.isEnabledFor(logging.DEBUG)
        if verbose:  # as execute's
            for request in payload.requests:
                log_state(request, "PENDING", "EXECUTING")
            logger.debug("model %s, instance %s, executing %d requests", self.model_name,
                         self.info.name, len(payload.requests))
        start = self._clock()

        def finished() -> None:
            self._complete(payload, start, self._clock())
            if verbose:
                for request in payload.requests:
                    log_state(request, "EXECUTING", "RELEASED")
                logger.debug("TRITONBACKEND_ModelInstanceExecute: model instance name %s "
                             "released %d requests", self.info.name, len(payload.requests))
            then(None)

        backend = self._loop
        assert backend is not None
        try:
            backend.execute_on_loop(payload, loop, finished, partial(then, payload))
        except Exception as exc:  # not started: answered here, on the loop
            self._fail_open_requests(payload, exc)
            finished()

    def _complete(self, payload: Payload, start: int, end: int) -> None:
        """Record an execution and release its held responses."""
        requests = payload.requests
        hold = not self._decoupled
        input_end = payload.compute_input_end_ns or start
        output_start = payload.compute_output_start_ns or end
        for request in requests:
            request.compute_start_ns = start
            request.compute_input_end_ns = input_end
            request.compute_output_start_ns = output_start
            request.compute_end_ns = end
            sender = request.sender
            if hold and not sender.closed and not sender.late:  # type: ignore[union-attr]
                sender.send_error(InternalError(  # type: ignore[union-attr]
                    f"model '{self.model_name}' sent no response for request "
                    f"'{request.id}'"
                ))
            elif not hold and sender is not None and not sender.closed:
                # answered later, or never: a cancel (now, or already) ends it in time
                request.on_cancel(partial(self._cancel_grace.add, sender))
        self.execution_count += 1
        self._stats.record_execution(requests, end, self.info.name)
        if hold:
            if payload.on_release is not None:
                payload.on_release(requests)
            else:
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


def cpu_cores_of(policy: Mapping[str, str], policy_name: str) -> frozenset[int] | None:
    """The CPU cores a host policy (``cpu-cores=0-3,6-6``: ranges, as Triton takes them)
    pins its instances to, if any."""
    spec = policy.get("cpu-cores", "").strip()
    if not spec:
        if policy.get("numa-node"):
            logger.info("host policy %s: NUMA binding is not available here; ignored",
                        policy_name)
        return None
    cores: set[int] = set()
    try:
        for part in spec.split(","):
            first, dash, last = part.partition("-")
            if not dash:
                raise InvalidArgumentError(
                    "host policy setting 'cpu-cores' format is "
                    f"'<lower_cpu_core_id>-<upper_cpu_core_id>'. Got {part}")
            cores.update(range(int(first), int(last) + 1))
    except ValueError:
        raise InvalidArgumentError(
            f"host policy '{policy_name}' has an invalid cpu-cores value '{spec}'"
        ) from None
    return frozenset(cores)


def pin_current_thread(name: str, cores: frozenset[int]) -> None:
    set_affinity = getattr(os, "sched_setaffinity", None)
    if set_affinity is None:
        logger.info("thread %s: CPU affinity is not supported on this OS; ignored", name)
        return
    try:
        set_affinity(0, cores)  # 0: the calling thread on Linux
    except OSError as exc:
        logger.warning("thread %s: could not pin to CPU cores %s: %s", name, sorted(cores), exc)



class _CancelGrace:
    """Ends cancelled decoupled requests their model left open past CANCEL_GRACE_S."""

    def __init__(self, model_name: str, instance_name: str,
                 clock: Callable[[], int]) -> None:
        self._model_name = model_name
        self._thread_name = f"infercore-{model_name}-{instance_name}-cancel-grace"
        self._clock = clock
        self._changed = threading.Condition(threading.Lock())
        self._pending: list[tuple[int, ResponseSender]] = []  # (deadline ns, sender)
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, sender: ResponseSender) -> None:
        """A cancel hook (any thread): end ``sender``'s request unless it ends in time."""
        if sender.closed:
            return
        with self._changed:
            if self._stopped:
                return
            self._pending.append((self._clock() + int(CANCEL_GRACE_S * 1e9), sender))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._thread_name,
                                                daemon=True)
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while True:
                    if self._stopped or not self._pending:
                        self._thread = None
                        return
                    now = self._clock()
                    due = [sender for deadline, sender in self._pending if deadline <= now]
                    if due:
                        self._pending = [(d, s) for d, s in self._pending if d > now]
                        break
                    first = min(deadline for deadline, _ in self._pending)
                    self._changed.wait((first - now) / 1e9)
            for sender in due:  # outside the lock: a stream's consumer wakes up
                if not sender.closed:
                    sender.abort(CancelledError(
                        f"request for model '{self._model_name}' was cancelled; the model "
                        f"had not sent its final response {CANCEL_GRACE_S:g} s later"))

    def stop(self) -> None:
        """At finalize: nothing more is ended here (unload ends what is left); join."""
        with self._changed:
            self._stopped = True
            thread = self._thread
            self._changed.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
