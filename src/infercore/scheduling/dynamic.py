"""The dynamic batcher: forms batches of queued requests for the model's free instances.

Threads: callers ``enqueue``; each free instance's backend thread calls ``next_payload``
and forms the next batch itself, under ``_cond``'s lock; a caller may form and run a batch
containing its own request ("caller runs", scheduling/base.py; only without a queue
delay, since a delayed batch must wait for company); any thread may cancel. ``_cond``
guards the queue, the stopped flag and the counters; responses are sent outside it.
Batches are formed only when an instance is free to run them, so under load a batch keeps
growing while every instance is busy, as Triton's batcher does.

Wake-ups: a request that its caller does not run is pushed and ``_cond`` notified once,
in one critical section, so no instance thread can look at the queue and go to sleep in
between. A thread that is busy forms its next batch before it waits again, so it sees the
request without a signal; a caller that runs its batch inline signals nobody. With a queue
delay, a thread waiting for a batch's deadline records what it waits for (``_armed``: the
batch's size and shape key, and when it wakes); a request that joins that batch without
making it ready (same shape key, still below the largest preferred size) and without an
earlier queue timeout needs no signal: the waiter takes it at its deadline. Any other
request signals. ``_armed`` is cleared when its thread wakes and when any batch leaves
the queue; a cancel meanwhile only makes the recorded size an overestimate, which errs
towards waking.

When a batch leaves (Triton's rules): the queued requests are taken in priority order
while they are shape-compatible with the first (unless the input allows ragged batches)
and their batch sizes fit ``max_batch_size``. The batch goes at once if it reached the
largest preferred size (by default ``max_batch_size``) or cannot grow (the next request
does not fit); otherwise it waits for more requests until the oldest has waited
``max_queue_delay_microseconds``, and then goes with the largest prefix whose size is a
preferred size, or whole. Timed-out requests are rejected or delayed by their level's
policy. With ``preserve_ordering``, responses are released in arrival order.

Payloads driven by an event loop: a model with one instance whose backend can run a
payload from the loop without blocking it (process-isolated Python instances send it to
their worker and read the answer when the loop finds it readable; ``runs_on_loop``) is
run by a frontend's loop instead of its backend thread, with no thread crossing. A loop
caller (``caller_runs``, ``on_loop``, no queue delay, on a loop marked long-lived: a
frontend's, which outlives the work it leaves in flight) that finds the instance idle and
the queue empty reserves it and starts its request there: the chain begins. While the
chain runs, that loop's callers' requests are queued without a signal (another loop's
are queued with one, as usual), and each time a payload is
answered the chain forms the next batch from the queue on the loop (``_loop_next``); it
ends, releasing the instance and waking an instance thread for what is queued, when the
queue is empty, when an instance thread waits to reserve the instance (a caller that is
not on the loop queued work), when the instance cannot run on the loop any more (its
worker is restarting), or when the batcher stops. ``_chain_loop`` (the loop running the
chain, None when there is none) is read and written under ``_cond``, so every request
queued without a signal is seen by the chain.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from tritonclient.grpc import model_config_pb2

from ..clock import Clock
from ..errors import CancelledError, TritonError, UnavailableError
from ..instance import ModelInstance
from ..payload import Payload
from ..request import InferRequest
from ..response import running_long_lived_loop
from .base import SchedulerStatistics, reserve_idle
from .queue import PriorityQueue

__all__ = ["DynamicBatcher"]


class DynamicBatcher:
    """Triton's dynamic batching for one model version (also its scheduler when
    dynamic_batching is absent but priorities or timeouts must be honoured)."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        instance_count: int,
        clock: Clock,
        on_failed: Callable[[InferRequest], None],
    ) -> None:
        batching = config.dynamic_batching if config.HasField("dynamic_batching") else None
        self._model_name = config.name
        self._max_batch_size = max(1, int(config.max_batch_size))
        self._batching = batching is not None and config.max_batch_size > 0
        preferred = sorted({int(s) for s in batching.preferred_batch_size}) if batching else []
        self._preferred = [s for s in preferred if s <= self._max_batch_size] or [
            self._max_batch_size]
        self._delay_ns = int(batching.max_queue_delay_microseconds) * 1_000 if batching else 0
        self._preserve_ordering = bool(batching.preserve_ordering) if batching else False
        self._ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        # Every input required, of fixed dims (and reshape) and not ragged: the validator
        # admits one item shape per input, so every request has the same shape key.
        fixed = all(not i.optional and not i.allow_ragged_batch and min(i.dims, default=0) >= 0
                    and min(i.reshape.shape, default=0) >= 0 for i in config.input)
        self._fixed_key: tuple[()] | None = () if fixed else None
        self._queue = PriorityQueue.from_config(batching)
        self._instance_count = instance_count
        self._clock = clock
        self._on_failed = on_failed
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._inline_instances: tuple[ModelInstance, ...] = ()
        # preserve_ordering: arrival sequence numbers and completed-but-unreleased requests
        self._next_seq = 0
        self._next_release = 0
        self._finished: dict[int, InferRequest] = {}
        self._seq: dict[int, int] = {}
        self._ran_inline = 0
        self._wakeups = 0
        self._loop_instance: ModelInstance | None = None
        # The event loop that runs this model's payloads, if one does (see above)
        self._chain_loop: asyncio.AbstractEventLoop | None = None
        # (batch size, shape key, wake-up ns) of a thread waiting for a batch's deadline
        self._armed: tuple[int, Any, int] | None = None
        self._pending: tuple[int, Any] = (0, None)  # set by _form with a deadline

    # -- callers -----------------------------------------------------------------------------
    def attach(self, instances: Sequence[ModelInstance]) -> None:
        self._inline_instances = tuple(instances)
        # One instance that can run payloads from an event loop: loops chain them there.
        self._loop_instance = (instances[0] if len(instances) == 1
                               and instances[0].loop_capable else None)

    def enqueue(self, request: InferRequest, *, caller_runs: bool = False,
                on_loop: bool = False) -> None:
        if (on_loop and caller_runs and not self._delay_ns and not request.cancelled
                and self._loop_instance is not None and self._enqueue_on_loop(request)):
            return
        instance = None
        if caller_runs and not self._delay_ns and not request.cancelled:
            instance = reserve_idle(self._inline_instances, on_loop)
        if instance is None:  # it will queue: its key, once, outside the lock
            request.batch_key = self._shape_key(request)
        try:
            payload = None
            expired: list[InferRequest] = []
            with self._cond:
                if self._stopped:
                    raise UnavailableError(
                        f"model '{self._model_name}' is not accepting requests")
                now = self._clock.now_ns()
                request.queue_start_ns = now
                if instance is not None and not len(self._queue):
                    # Alone: it is the whole batch (no delay, nothing to wait for or to
                    # expire, an empty level is never full), so it skips the queue.
                    self._number(request)
                    payload = self._payload([request])
                    self._ran_inline += 1
                else:
                    if instance is not None:
                        request.batch_key = self._shape_key(request)
                    expires = self._queue.push(request, now)  # raises when a level is full
                    self._number(request)
                    if instance is not None:
                        batch, expired, _ = self._form(now, must_hold=request)
                        if batch:
                            payload = self._payload(batch)
                            self._ran_inline += 1
                    if payload is None and not self._joins_armed(request, expires):
                        self._wakeups += 1  # queued: exactly one wake-up, under the lock
                        self._cond.notify()
            if expired:
                self._reject(expired)
            if payload is None:
                request.on_cancel(partial(self._cancel, request))
                return
            instance.execute(payload)  # type: ignore[union-attr]
        finally:
            if instance is not None:
                instance.unreserve()

    # -- payloads driven by an event loop (process-isolated instances) ------------------------
    def _enqueue_on_loop(self, request: InferRequest) -> bool:
        """Run ``request`` from the calling event loop without blocking it, or leave it
        for the chain of payloads a loop already runs on the instance; False (nothing
        done) when neither applies. See the module doc."""
        instance = self._loop_instance
        if instance is None or not instance.runs_on_loop():
            return False
        caller = running_long_lived_loop()
        if caller is None:
            return False
        request.batch_key = self._shape_key(request)
        loop = None
        with self._cond:
            if self._stopped:
                raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
            now = self._clock.now_ns()
            if self._chain_loop is not None:
                if self._chain_loop is not caller:
                    return False  # another loop's chain: queued with a wake-up instead
                # The running chain forms its next batch from the queue when the current
                # payload is answered: no thread to wake.
                request.queue_start_ns = now
                self._queue.push(request, now)  # raises when a level is full
                self._number(request)
            else:
                if len(self._queue) or not instance.try_reserve():
                    return False
                loop = caller
                request.queue_start_ns = now
                self._number(request)
                self._chain_loop = caller
                self._ran_inline += 1
        request.runs_on_loop = True
        if loop is None:
            request.on_cancel(partial(self._cancel, request))
            return True
        instance.execute_on_loop(self._payload([request]), loop,
                                 partial(self._loop_next, instance, loop))
        return True

    def _loop_next(self, instance: ModelInstance, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, a chained payload was answered: run the next batch from the queue
        the same way, or end the chain (a thread waiting for the instance, a restart
        under way, the instance finalizing, or nothing queued) and hand what is queued to
        the instance threads."""
        payload = None
        expired: list[InferRequest] = []
        with self._cond:
            if not self._stopped and instance.runs_on_loop():
                batch, expired, _ = self._form(self._clock.now_ns())
                if batch:
                    payload = self._payload(batch)
                    self._ran_inline += 1
            if payload is None:
                self._chain_loop = None
                if len(self._queue):
                    self._wakeups += 1
                    self._cond.notify()
        if payload is None:
            instance.unreserve()
        if expired:
            self._reject(expired)
        if payload is not None:
            instance.execute_on_loop(payload, loop, partial(self._loop_next, instance, loop))

    def _number(self, request: InferRequest) -> None:
        """preserve_ordering: the request's place in the release order. Holds _cond."""
        if self._preserve_ordering:
            self._seq[id(request)] = self._next_seq
            self._next_seq += 1

    def _cancel(self, request: InferRequest) -> None:
        with self._cond:
            removed = self._queue.remove(request)
        if removed:
            self._fail([request], CancelledError("Request was cancelled"))

    def queued_count(self) -> int:
        return len(self._queue)

    def statistics(self) -> SchedulerStatistics:
        with self._cond:
            return SchedulerStatistics(queued=len(self._queue), ran_inline=self._ran_inline,
                                       wakeups=self._wakeups)

    # -- instance threads --------------------------------------------------------------------
    def next_payload(self) -> Payload | None:
        """Block until a batch is ready for the calling (free) instance; None once stopped."""
        with self._cond:
            while True:
                batch, expired, wake_at = self._form(self._clock.now_ns())
                if expired:
                    self._cond.release()
                    try:
                        self._reject(expired)
                    finally:
                        self._cond.acquire()
                    continue
                if batch:
                    if len(self._queue):
                        self._wakeups += 1
                        self._cond.notify()  # more work: wake another free instance
                    return self._payload(batch)
                if self._stopped and not len(self._queue):
                    return None
                if wake_at is not None:  # a batch waits for company until wake_at
                    self._armed = (*self._pending, wake_at)
                self._clock.wait(self._cond, wake_at)
                self._armed = None

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        """Form and run, on the calling thread, a batch that holds the queued ``request``.

        Only without a queue delay (a delayed batch must wait for company) and when an
        instance is idle; False (nothing done) otherwise.
        """
        if self._delay_ns:
            return False
        instance = reserve_idle(self._inline_instances, on_loop)
        if instance is None:
            return False
        try:
            with self._cond:
                batch, expired, _ = self._form(self._clock.now_ns(), must_hold=request)
                payload = self._payload(batch) if batch else None
                if payload is not None:
                    self._ran_inline += 1
            if expired:
                self._reject(expired)
            if payload is None:
                return False
            instance.execute(payload)
            return True
        finally:
            instance.unreserve()

    def _form(
        self, now: int, must_hold: InferRequest | None = None
    ) -> tuple[list[InferRequest], list[InferRequest], int | None]:
        """(batch to run now, requests that timed out, when to look again). Holds _cond."""
        expired = self._queue.expire(now)
        if expired:
            return [], expired, None
        if not len(self._queue):
            return [], [], None
        batch: list[InferRequest] = []
        size = 0
        key = None
        full = False
        for request in self._queue:
            if not self._batching and batch:
                full = True
                break
            request_size = request.batch_size or 1
            request_key = request.batch_key
            if batch and (size + request_size > self._max_batch_size or request_key != key):
                full = True
                break
            batch.append(request)
            size += request_size
            key = request_key
            if size >= self._preferred[-1]:
                full = True
                break
        deadline = batch[0].queue_start_ns + self._delay_ns
        if not full and now < deadline and self._batching and not self._stopped:
            if must_hold is not None:
                return [], [], None
            timeout = self._queue.next_deadline()
            self._pending = (size, key)
            return [], [], deadline if timeout is None else min(deadline, timeout)
        batch = self._preferred_prefix(batch)
        if must_hold is not None and not any(r is must_hold for r in batch):
            return [], [], None
        self._queue.take(batch)
        self._armed = None  # a waiter's batch may be gone: the next request signals
        return batch, [], None

    def _joins_armed(self, request: InferRequest, expires_ns: int) -> bool:
        """Whether a thread waiting for a batch's deadline will take ``request`` in time
        without a signal (see the module doc); records it in that batch. Holds _cond."""
        armed = self._armed
        if armed is None:
            return False
        size, key, wake_at = armed
        size += request.batch_size or 1
        if (request.batch_key != key or size >= self._preferred[-1]
                or (expires_ns and expires_ns < wake_at)):
            return False
        self._armed = (size, key, wake_at)
        return True

    def _preferred_prefix(self, batch: list[InferRequest]) -> list[InferRequest]:
        """The longest prefix whose batch size is a preferred size, else the whole batch."""
        if len(self._preferred) == 1 and self._preferred[0] == self._max_batch_size:
            return batch
        sizes = []
        total = 0
        for request in batch:
            total += request.batch_size or 1
            sizes.append(total)
        for cut in range(len(batch), 0, -1):
            if sizes[cut - 1] in self._preferred:
                return batch[:cut]
        return batch

    def _shape_key(self, request: InferRequest) -> tuple[tuple[str, tuple[int, ...]], ...]:
        if self._fixed_key is not None:
            return self._fixed_key
        ragged = self._ragged
        return tuple(
            (name, tensor.shape[1:] if name not in ragged else ())
            for name, tensor in sorted(request.inputs.items())
        )

    def _payload(self, batch: list[InferRequest]) -> Payload:
        payload = Payload(batch, self._clock.now_ns)
        if self._preserve_ordering:
            payload.on_release = self._release_in_order
        return payload

    def _release_in_order(self, requests: list[InferRequest]) -> None:
        """Deliver held responses in arrival order across instances (preserve_ordering)."""
        ready: list[InferRequest] = []
        with self._cond:
            for request in requests:
                self._finished[self._seq.pop(id(request))] = request
            while self._next_release in self._finished:
                ready.append(self._finished.pop(self._next_release))
                self._next_release += 1
        for request in ready:
            request.sender.release_held()  # type: ignore[union-attr]

    # -- shutdown ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop admitting; instance threads run what is queued, then get None."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def drain(self) -> None:
        """After the instance threads exited: answer requests left in the queue."""
        with self._cond:
            leftover = list(self._queue)
            self._queue.take(leftover)
        self._fail(leftover, UnavailableError(
            f"model '{self._model_name}' was unloaded before the request could run"))

    # -- answers -----------------------------------------------------------------------------
    def _reject(self, requests: list[InferRequest]) -> None:
        self._fail(requests, UnavailableError("Request timeout expired"))

    def _fail(self, requests: list[InferRequest], error: TritonError) -> None:
        for request in requests:
            if self._preserve_ordering:
                # a failed request must not hold back the responses queued behind it
                with self._cond:
                    seq = self._seq.pop(id(request), None)
                    if seq is not None:
                        self._finished[seq] = request
                sender = request.sender
                if sender is not None and not sender.closed:
                    sender.send_error(error)
                self._release_in_order([])
            else:
                sender = request.sender
                if sender is not None and not sender.closed:
                    sender.send_error(error)
            self._on_failed(request)

