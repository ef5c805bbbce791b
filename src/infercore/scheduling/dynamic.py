"""The dynamic batcher: forms batches of queued requests for the model's free instances.

Threads: callers ``enqueue``; each free instance's backend thread calls ``next_payload``
and forms the next batch itself, under ``_cond``'s lock; a caller holding an idle instance
may take a batch containing its own request (``enqueue(take=True)``, ``take``; dispatch.py
runs it; only without a queue delay, since a delayed batch must wait for company); any
thread may cancel. ``_cond``
guards the queue, the stopped flag and the counters; responses are sent outside it.
Batches are formed only when an instance is free to run them, so under load a batch keeps
growing while every instance is busy, as Triton's batcher does.

Wake-ups: a request that its caller does not run is pushed and ``_cond`` notified once,
in one critical section, so no instance thread can look at the queue and go to sleep in
between. A thread that is busy forms its next batch before it waits again, so it sees the
request without a signal; a caller that runs its batch inline signals nobody. With a queue
delay, a thread waiting for a batch's deadline records what it waits for (``_armed``: the
batch's size and shape key, and when it wakes); a request that joins that batch at the
end of the scheduling order without making it ready (same shape key, its new size neither
a preferred size nor the largest one) and without an earlier queue timeout needs no
signal: the waiter takes it at its deadline. Any other request signals. ``_armed`` is
cleared when its thread wakes, when any batch leaves the queue and when a queued request
is cancelled, so the next request signals.

When a batch leaves (Triton's GetDynamicBatch, see ``_form``): the queued requests are
scanned in scheduling order while they are shape-compatible with the first (unless the
input allows ragged batches) and their batch sizes fit ``max_batch_size``. The longest
prefix of a preferred size (by default ``max_batch_size``) goes at once; a batch of no
preferred size goes at once only when it cannot grow, else it waits until the oldest
request has waited ``max_queue_delay_microseconds``, and then everything scanned goes.
Timed-out requests are rejected or delayed by their level's policy. With
``preserve_ordering``, responses are released in arrival order.

Payloads driven by an event loop (dispatch.py's loop-driven chain, for a model whose one
instance can run payloads from a loop): a payload taken with ``chain=c`` starts chain
``c`` (``_chain``, an opaque token: the loop's attachment). While it runs, that loop's
requests join the queue without a signal (``join_chain``; another loop's or a thread's
are queued with one, as usual), and each time a payload is answered the chain forms the
next batch (``poll``); when nothing is ready, or dispatch ends it (``end_chain``), the
chain is cleared and what is queued gets its wake-up. ``_chain`` is read and written under
``_cond``, so every request queued without a signal is seen by the chain or signalled
when it ends. A payload the chain could not start is handed back (``_handed_back``) and a
backend thread takes it before forming a batch.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from tritonclient.grpc import model_config_pb2

from ..clock import Clock
from ..errors import CancelledError, TritonError, UnavailableError
from ..payload import Payload
from ..request import InferRequest
from .base import SchedulerStatistics
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
        self._preferred_set = frozenset(self._preferred)
        self._delay_ns = int(batching.max_queue_delay_microseconds) * 1_000 if batching else 0
        self.callers_run = not self._delay_ns  # a delayed batch waits for company
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
        # preserve_ordering: arrival sequence numbers and completed-but-unreleased requests
        self._next_seq = 0
        self._next_release = 0
        self._finished: dict[int, InferRequest] = {}
        self._seq: dict[int, int] = {}
        self._ran_inline = 0
        self._wakeups = 0
        # The chain that runs this model's payloads from an event loop, if one does
        self._chain: object | None = None
        self._handed_back: deque[Payload] = deque()
        # (batch size, shape key, wake-up ns) of a thread waiting for a batch's deadline
        self._armed: tuple[int, Any, int] | None = None
        self._pending: tuple[int, Any] = (0, None)  # set by _form with a deadline

    # -- callers -----------------------------------------------------------------------------
    def enqueue(self, request: InferRequest, *, take: bool = False,
                chain: object | None = None) -> Payload | None:
        if not take:  # it will queue: its key, once, outside the lock
            request.batch_key = self._shape_key(request)
        payload = None
        expired: list[InferRequest] = []
        with self._cond:
            if self._stopped:
                raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
            now = self._clock.now_ns()
            request.queue_start_ns = now
            if take and not len(self._queue):
                # Alone: it is the whole batch (no delay, nothing to wait for or to
                # expire, an empty level is never full), so it skips the queue.
                self._number(request)
                payload = self._payload([request])
                self._ran_inline += 1
            else:
                if take:
                    request.batch_key = self._shape_key(request)
                expires = self._queue.push(request, now)  # raises when a level is full
                self._number(request)
                if take:
                    batch, expired, _ = self._form(now, must_hold=request)
                    if batch:
                        payload = self._payload(batch)
                        self._ran_inline += 1
                if payload is None and not self._joins_armed(request, expires):
                    self._wakeups += 1  # queued: exactly one wake-up, under the lock
                    self._cond.notify()
            if payload is not None and chain is not None:
                self._chain = chain
        if expired:
            self._reject(expired)
        if payload is None:
            request.on_cancel(partial(self._cancel, request))
        return payload

    def take(self, request: InferRequest) -> Payload | None:
        """A batch holding the queued ``request`` for the reader (no queue delay: a
        delayed batch waits for company), or None."""
        if self._delay_ns:
            return None
        with self._cond:
            batch, expired, _ = self._form(self._clock.now_ns(), must_hold=request)
            payload = self._payload(batch) if batch else None
            if payload is not None:
                self._ran_inline += 1
        if expired:
            self._reject(expired)
        return payload

    # -- payloads driven by an event loop (dispatch.py's chain) --------------------------------
    def join_chain(self, request: InferRequest, chain: object) -> bool:
        request.batch_key = self._shape_key(request)
        with self._cond:
            if self._chain is not chain:
                return False  # none, or another loop's: queued with a wake-up instead
            if self._stopped:
                raise UnavailableError(f"model '{self._model_name}' is not accepting requests")
            now = self._clock.now_ns()
            # The running chain forms its next batch from the queue when the current
            # payload is answered: no thread to wake.
            request.queue_start_ns = now
            self._queue.push(request, now)  # raises when a level is full
            self._number(request)
        request.on_cancel(partial(self._cancel, request))
        return True

    def poll(self, chain: object) -> Payload | None:
        payload = None
        expired: list[InferRequest] = []
        with self._cond:
            if not self._stopped and self._chain is chain:
                batch, expired, _ = self._form(self._clock.now_ns())
                if batch:
                    payload = self._payload(batch)
                    self._ran_inline += 1
            if payload is None:
                self._end_chain(chain)
        if expired:
            self._reject(expired)
        return payload

    def end_chain(self, chain: object) -> None:
        with self._cond:
            self._end_chain(chain)

    def _end_chain(self, chain: object) -> None:
        """Holds _cond: ``chain`` ends; a thread is woken for what is queued."""
        if self._chain is chain:
            self._chain = None
        if len(self._queue):
            self._wakeups += 1
            self._cond.notify()

    def hand_back(self, payload: Payload) -> None:
        with self._cond:
            self._handed_back.append(payload)
            self._wakeups += 1
            self._cond.notify()

    def _number(self, request: InferRequest) -> None:
        """preserve_ordering: the request's place in the release order. Holds _cond."""
        if self._preserve_ordering:
            self._seq[id(request)] = self._next_seq
            self._next_seq += 1

    def _cancel(self, request: InferRequest) -> None:
        with self._cond:
            removed = self._queue.remove(request)
            if removed:
                self._armed = None  # its size is in the waiter's record: recount
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
                if self._handed_back:
                    return self._handed_back.popleft()
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

    def _form(
        self, now: int, must_hold: InferRequest | None = None
    ) -> tuple[list[InferRequest], list[InferRequest], int | None]:
        """(batch to run now, requests that timed out, when to look again). Holds _cond.

        Triton's GetDynamicBatch: the queue is scanned in scheduling order while the
        requests share the first one's shape key and their sizes fit max_batch_size;
        ``best`` marks the longest prefix whose size is a preferred size or, once the
        next request would pass the largest preferred size, the prefix before it. Before
        the oldest request's delay passes the best prefix goes at once; without one the
        batch goes at once only if it cannot grow (the next request does not fit or
        differs in shape, or the largest preferred size is reached), else it waits. Once
        the delay passed (or without one) everything scanned goes.
        """
        expired = self._queue.expire(now)
        if expired:
            return [], expired, None
        if not len(self._queue):
            return [], [], None
        batch: list[InferRequest] = []
        size = 0
        key = None
        best = 0  # requests in the best prefix (0: none found)
        send_now = False
        largest = self._preferred[-1]
        for request in self._queue:
            if not self._batching and batch:
                send_now = True
                break
            request_size = request.batch_size or 1
            if batch:
                if not best and size + request_size > largest:
                    best = len(batch)
                if size + request_size > self._max_batch_size or request.batch_key != key:
                    send_now = True
                    break
            batch.append(request)
            size += request_size
            key = request.batch_key
            if size in self._preferred_set:
                best = len(batch)
        oldest = min(r.queue_start_ns for r in batch)
        exceeded = bool(self._delay_ns) and now - oldest >= self._delay_ns
        if best and not exceeded:
            batch = batch[:best]
        elif (not send_now and size < largest and not exceeded and self._delay_ns
              and self._batching and not self._stopped):
            if must_hold is not None:
                return [], [], None
            timeout = self._queue.next_deadline()
            self._pending = (size, key)
            wake_at = oldest + self._delay_ns
            return [], [], wake_at if timeout is None else min(wake_at, timeout)
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
                or size in self._preferred_set or (expires_ns and expires_ns < wake_at)
                or not self._queue.is_last(request)):
            return False
        self._armed = (size, key, wake_at)
        return True

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
            for payload in self._handed_back:
                leftover.extend(payload.requests)
            self._handed_back.clear()
        self._fail(leftover, UnavailableError(
            f"model '{self._model_name}' was unloaded before the request could run"))

    # -- answers -----------------------------------------------------------------------------
    def _reject(self, requests: list[InferRequest]) -> None:
        for request in requests:
            request.timed_out = True
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

