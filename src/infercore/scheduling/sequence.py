"""The sequence batcher: the requests of each sequence, in order, on one instance's slot.

A sequence is the requests that share a correlation id (an int, or a str), from the one
flagged START to the one flagged END. Each sequence is seated in a *slot* of one instance
for its lifetime; its requests run in arrival order, one at a time, each after the previous
one's execution; the batcher adds the control inputs and the implicit state
(sequence_state.py) to each request before it runs.

Slots (Triton's): each instance has ``max_batch_size`` slots (1 when the model does not
batch), or ``oldest.max_candidate_sequences`` with the oldest strategy when set. A START for
an unknown correlation id takes the free slot with the lowest index (spreading sequences
across instances first) or, with none free, waits in the backlog; when a slot is freed the
backlog's oldest sequence takes it.

Batches, formed by the instance's own thread from the requests at the head of its slots:
- ``direct``: at most one request per slot, in slot order, shape-compatible with the first.
  With ``max_queue_delay_microseconds`` and ``minimum_slot_utilization`` both set, a batch
  waits until enough slots are ready or its oldest request has waited the delay. When the
  model batches, the empty slots below the highest one in the batch get null requests
  (``padding``: READY, START and END false, CORRID 0, inputs zeroed), so a request's batch
  index is its slot, as Triton's; a null request is answered to nobody and counted only in
  the batch's size (conformance qa_sequence_direct_padding).
- ``oldest``: the heads of the oldest sequences (by arrival of their next request) form a
  batch as the dynamic batcher does: shape-compatible, up to the largest preferred size,
  waiting up to ``max_queue_delay_microseconds`` for a preferred size; it goes at once when
  every slot of the instance is in it. Batches of one instance run one at a time and
  release their responses in batch order, so ``preserve_ordering`` holds by construction.

Sequence states: backlogged -> seated -> closing -> retired. A sequence *closes* (new
requests for its id fail, or start a new sequence if flagged START) when its END request
arrives, when it has been idle for ``max_sequence_idle_microseconds`` (no request arrived;
only seated sequences are released, as Triton's reaper does), when one of its queued
requests is cancelled, or when the batcher stops. Its queued requests still run; once none
is left it retires and frees its slot. A second START for a live sequence continues it in
its slot, and the state is reset when that request runs (Triton: "previous sequence will
be terminated early").

Iterative sequences (``iterative_sequence: true``, Triton's "generative" sequencer): a
request may be run again and again until its model stops asking (a Python model's
``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``): ``_take`` gives each
request a ``rescheduler``, which queues it behind its sequence again, neither START nor
END. When the lane's thread asks for its next batch, each request of its last batch that
was not rescheduled ends its sequence (Triton ends it by cancelling the request, counted
as a failure). A request without a correlation id starts a sequence of its own, under an
id the batcher gives it.

Errors (raised by ``enqueue``, Triton's texts): no correlation id ("must
specify a non-zero or non-empty correlation ID"), a request without START for an id with
no live sequence, including after END or an idle release ("must specify the START flag on
the first request of the sequence"), a batch size above 1. A request cancelled while
queued is answered "Request was cancelled" at once and ends its sequence: the requests
queued behind it are cancelled too, those ahead still run (Triton releases the sequence's
slot and cancels what is left). A request's timeout applies while its sequence waits in the
backlog: past it the whole backlogged sequence is answered "timeout of the corresponding
sequence has been expired"; seated requests do not time out (neither do Triton's).

Threads: callers ``enqueue`` (and cancel) on their own threads; each backend thread of the
model calls ``next_payload`` and is bound, on its first call, to a *lane*: the slots of the
instance it runs (one thread per instance, so a sequence stays on one instance; a backend
that shares one thread among a device's instances, ``device_blocking``, would get one lane
per thread, and its sequences would stay on the device, not the instance). Only a lane's
own thread forms its batches, one after the previous one executed, so a sequence never has
two requests executing at once and no in-flight bookkeeping is needed. There is no reaper
thread: each lane thread wakes at the idle deadlines of its sequences and at the backlog's
timeouts; ``enqueue`` releases the idle sequence a request names, and every idle sequence
when a START finds no free slot (so a busy instance delays no backlogged sequence). Callers
never run requests themselves (``callers_run`` is False): a request must wait for its
predecessors on its sequence's instance. One lock guards every structure here; each lane
waits on its own condition of that lock, so an enqueue wakes only its sequence's lane.
Responses are sent outside the lock.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..clock import Clock
from ..errors import (
    CancelledError,
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
)
from ..payload import Payload
from ..request import InferRequest
from ..response import InferResponse, ResponseSender, ResponseStream
from ..tensor import Tensor
from .base import NoCallerRuns
from .sequence_state import ImplicitState, SequenceControls

__all__ = ["SequenceBatcher", "SequenceStatistics"]

logger = logging.getLogger(__name__)

_DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds

CorrelationId = int | str


@dataclass(frozen=True, slots=True)
class SequenceStatistics:
    """What the sequence batcher holds right now."""

    seated: int  # sequences holding a slot (live or closing)
    backlogged: int  # sequences waiting for a slot
    queued: int  # requests not yet handed to an instance
    free_slots: int  # slots of the lanes (instance threads) seen so far, unused


class _Sequence:
    __slots__ = ("correlation_id", "requests", "lane", "slot", "open", "last_seen_ns",
                 "expires_ns", "state")

    def __init__(self, correlation_id: CorrelationId) -> None:
        self.correlation_id = correlation_id
        self.requests: deque[InferRequest] = deque()
        self.lane: _Lane | None = None  # None while backlogged or once retired
        self.slot = -1
        self.open = True  # takes new requests (False: closing)
        self.last_seen_ns = 0  # arrival of its latest request
        self.expires_ns = 0  # backlogged: the earliest timeout of its requests (0: none)
        self.state: dict[str, Tensor] | None = None  # implicit state, set at START


class _Lane:
    """The slots of one instance, served by that instance's backend thread."""

    __slots__ = ("index", "slots", "ready", "ran")

    def __init__(self, index: int, slot_count: int, lock: threading.Lock) -> None:
        self.index = index
        self.slots: list[_Sequence | None] = [None] * slot_count
        self.ready = threading.Condition(lock)  # notified when this lane may have work
        # iterative sequences: the requests of the batch this lane ran last, settled
        # (rescheduled or released) when the lane's thread asks for its next batch
        self.ran: list[InferRequest] = []


class SequenceBatcher(NoCallerRuns):
    """Triton's sequence batcher (``sequence_batching``) for one model version."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        clock: Clock,
        on_failed: Callable[[InferRequest], None],
        model_dir: Path | None = None,
    ) -> None:
        batcher = config.sequence_batching
        self._model_name = config.name
        self._max_batch_size = max(1, int(config.max_batch_size))
        self._batching = config.max_batch_size > 0
        self._oldest = batcher.HasField("oldest")
        strategy = batcher.oldest if self._oldest else batcher.direct
        self._delay_ns = int(strategy.max_queue_delay_microseconds) * 1_000
        self._slot_count = self._max_batch_size
        self._min_utilization = 0.0
        self._preferred = [self._max_batch_size]
        if self._oldest:
            self._slot_count = int(batcher.oldest.max_candidate_sequences) or self._slot_count
            sizes = {int(s) for s in batcher.oldest.preferred_batch_size}
            self._preferred = sorted(s for s in sizes if s <= self._max_batch_size) or [
                self._max_batch_size]
        else:
            self._min_utilization = float(batcher.direct.minimum_slot_utilization)
        self._idle_ns = int(batcher.max_sequence_idle_microseconds or _DEFAULT_IDLE_US) * 1_000
        self._ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        self._controls = SequenceControls(config)
        self._state = ImplicitState.from_config(config, model_dir)
        self._clock = clock
        self._on_failed = on_failed
        self._lock = threading.Lock()
        self._local = threading.local()  # .lane: the calling backend thread's lane
        self._lanes: list[_Lane] = []
        self._free: list[tuple[int, int]] = []  # heap of free (slot, lane index)
        self._live: dict[CorrelationId, _Sequence] = {}  # open sequences by id
        self._backlog: deque[_Sequence] = deque()
        self._owner: dict[int, _Sequence] = {}  # id(queued request) -> its sequence
        self._stopped = False
        # iterative_sequence: a request runs until its model stops rescheduling it
        self._iterative = bool(batcher.iterative_sequence)
        self._running: dict[int, _Sequence] = {}  # id(executing request) -> its sequence
        self._generated_id = 0  # the last correlation id given to a request without one

    # -- callers -----------------------------------------------------------------------------
    def enqueue(self, request: InferRequest, *, take: bool = False,
                chain: object | None = None) -> None:
        """Queue ``request`` on its sequence; raises InvalidArgumentError for a request
        that cannot belong to one (Triton's sequence batcher refuses it in its Enqueue:
        the caller gets the error at once, and no statistics count it). Its caller never
        runs it (``take`` is never asked: ``callers_run`` is False): it waits for its
        sequence's lane."""
        error = self._check(request)
        if error is None:
            with self._lock:
                if self._stopped:
                    raise UnavailableError(
                        f"model '{self._model_name}' is not accepting requests")
                error = self._admit(request)
        if error is not None:
            raise error
        request.on_cancel(partial(self._cancel, request))

    def _check(self, request: InferRequest) -> TritonError | None:
        if self._iterative and request.correlation_id in (0, ""):
            return None  # _admit gives it a sequence of its own (Triton's generative one)
        if request.batch_size > 1:
            return InvalidArgumentError(
                f"inference request to model '{self._model_name}' must specify batch-size 1 "
                "due to requirements of sequence batcher")
        try:
            self._controls.check_correlation_id(self._model_name, request.correlation_id)
        except InvalidArgumentError as exc:
            return exc
        return None

    def _admit(self, request: InferRequest) -> TritonError | None:
        """Queue ``request`` on its sequence (holds the lock); the error if it cannot be."""
        now = self._clock.now_ns()
        if self._iterative and request.correlation_id in (0, ""):
            self._new_sequence_for(request)
        correlation_id = request.correlation_id
        sequence = self._live.get(correlation_id)
        if sequence is not None and self._is_idle(sequence, now):
            self._close(sequence)  # released as the lane thread would at its idle deadline
            sequence = None
        if sequence is None:
            if not request.sequence_start:
                return InvalidArgumentError(
                    f"inference request for sequence {correlation_id} to model "
                    f"'{self._model_name}' must specify the START flag on the first request "
                    "of the sequence")
            if not self._free:  # idle sequences make way, as Triton's reaper would
                for lane in self._lanes:
                    self._release_idle(lane, now)
            sequence = self._begin(correlation_id)
        elif request.sequence_start:
            logger.warning("sequence %s for model '%s' has a conflict. The previous sequence "
                           "did not end before this sequence start. Previous sequence will "
                           "be terminated early.", correlation_id, self._model_name)
        request.queue_start_ns = now
        sequence.last_seen_ns = now
        sequence.requests.append(request)
        self._owner[id(request)] = sequence
        if request.sequence_end:
            self._close(sequence)
        if sequence.lane is not None:
            sequence.lane.ready.notify()
        elif request.timeout_us:
            expires = now + request.timeout_us * 1_000
            if not sequence.expires_ns or expires < sequence.expires_ns:
                sequence.expires_ns = expires
                self._notify_all()  # an idle lane must wake for the new deadline
        return None

    def _new_sequence_for(self, request: InferRequest) -> None:
        """An iterative model's request without a correlation id starts a sequence of its
        own, as Triton's generative sequencer does: the next unused id, flagged START."""
        generated = self._generated_id + 1
        while generated in self._live:
            generated += 1
        self._generated_id = generated
        request.correlation_id = generated
        request.sequence_start = True

    def _reschedule(self, request: InferRequest) -> None:
        """``request.rescheduler`` of an iterative model's request: its model asked to run
        it again. Queued behind its sequence's requests, flagged neither START nor END (as
        Triton's generative sequencer re-enqueues it); a sequence that was released
        meanwhile (idle) is started again. Called once its execution returned."""
        with self._lock:
            sequence = self._running.pop(id(request), None)
            if sequence is None:
                raise InternalError(
                    f"request '{request.id}' for model '{self._model_name}' was "
                    "rescheduled while it was not executing")
            now = self._clock.now_ns()
            if not sequence.open:
                sequence = (self._live.get(request.correlation_id)
                            or self._begin(request.correlation_id))
            request.sequence_start = request.sequence_end = False
            if request.sender is not None:
                request.sender.answer_later()  # its instance must not fail it as unanswered
            request.queue_start_ns = now
            sequence.last_seen_ns = now
            sequence.requests.append(request)
            self._owner[id(request)] = sequence
            if sequence.lane is not None:
                sequence.lane.ready.notify()

    def _settle(self, lane: _Lane) -> list[InferRequest]:
        """The lane's last batch of an iterative model is over: each request its model did
        not reschedule ends its sequence (Triton ends it by cancelling the request, which
        its statistics count as a failure: returned for that). Holds the lock."""
        released = []
        for request in lane.ran:
            sequence = self._running.pop(id(request), None)
            if sequence is not None:
                self._close(sequence)
                released.append(request)
        lane.ran = []
        return released

    def _cancel(self, request: InferRequest) -> None:
        with self._lock:
            sequence = self._owner.get(id(request))
            if sequence is None:
                return  # already running, run, or answered
            cancelled = self._cut_from(sequence, request)
            self._close(sequence)
        self._fail(cancelled, CancelledError("Request was cancelled"))

    def queued_count(self) -> int:
        return len(self._owner)

    def statistics(self) -> SequenceStatistics:
        with self._lock:
            seated = sum(s is not None for lane in self._lanes for s in lane.slots)
            return SequenceStatistics(seated, len(self._backlog), len(self._owner),
                                      len(self._free))

    # -- instance threads --------------------------------------------------------------------
    def next_payload(self) -> Payload | None:
        """Block until the calling thread's instance has a batch to run; None once stopped."""
        with self._lock:
            lane = self._lane()
            if lane.ran:
                released = self._settle(lane)
                if released:
                    self._lock.release()
                    try:
                        for request in released:
                            self._on_failed(request)
                    finally:
                        self._lock.acquire()
            while True:
                now = self._clock.now_ns()
                expired = self._expire_backlog(now)
                if expired:
                    self._lock.release()
                    try:
                        for request in expired:
                            request.timed_out = True
                        self._fail(expired, UnavailableError(
                            "timeout of the corresponding sequence has been expired"))
                    finally:
                        self._lock.acquire()
                    continue
                self._release_idle(lane, now)
                requests, wake_at = self._form(lane, now)
                if requests:
                    if self._iterative:
                        lane.ran = [r for r in requests if not r.padding]
                    return Payload(requests, self._clock.now_ns)
                # (a backlogged sequence would have been seated in a free slot of this lane)
                if self._stopped and not any(lane.slots):
                    return None
                self._clock.wait(lane.ready, wake_at)

    def _lane(self) -> _Lane:
        """The calling thread's lane, made on its first call (holds the lock)."""
        lane: _Lane | None = getattr(self._local, "lane", None)
        if lane is None:
            lane = _Lane(len(self._lanes), self._slot_count, self._lock)
            self._lanes.append(lane)
            self._local.lane = lane
            for slot in range(self._slot_count):
                self._free_slot(lane, slot)
        return lane

    def _release_idle(self, lane: _Lane, now: int) -> None:
        """Close the lane's idle sequences; once stopping, every sequence (nothing can
        follow), so that backlogged ones get slots."""
        for sequence in lane.slots:
            if sequence is not None and sequence.open and (
                    self._stopped or self._is_idle(sequence, now)):
                self._close(sequence)

    def _form(self, lane: _Lane, now: int) -> tuple[list[InferRequest], int | None]:
        """(requests to run now, when to look again). Holds the lock."""
        wake_at = self._next_deadline(lane)
        ready = [s for s in lane.slots if s is not None and s.requests]
        if not ready:
            return [], wake_at
        chosen, deadline = (self._oldest_batch(ready, now) if self._oldest
                            else self._direct_batch(ready, now))
        if not chosen:
            return [], _earliest(wake_at, deadline)
        if self._oldest or not self._batching:
            return [self._take(sequence) for sequence in chosen], None
        slots = [lane.slots.index(sequence) for sequence in chosen]
        taken = dict(zip(slots, (self._take(sequence) for sequence in chosen), strict=True))
        first = taken[slots[0]]
        return [taken.get(slot) or self._null_request(first) for slot in range(slots[-1] + 1)
                ], None

    def _null_request(self, template: InferRequest) -> InferRequest:
        """A null request for an empty slot below a batch's highest one (the direct
        strategy of a batching model, as Triton's): ``template``'s inputs zeroed (Triton
        hands uninitialised memory), the controls of no sequence, answered to nobody."""
        inputs = {}
        for name, tensor in template.inputs.items():
            array = tensor.to_numpy()
            zeros = (np.full(array.shape, b"", np.object_) if array.dtype == np.object_
                     else np.zeros(array.shape, array.dtype))
            inputs[name] = Tensor(tensor.data_type, zeros)
        request = InferRequest(template.model_name, inputs,
                               model_version=template.model_version)
        request.batch_size = template.batch_size
        request.padding = True
        self._controls.add_null_to(request)
        stream = ResponseStream(request, raise_on_error=False, callback=_drop)
        request.sender = ResponseSender(request, stream, self._model_name,
                                        template.model_version)
        return request

    def _direct_batch(self, ready: list[_Sequence], now: int
                      ) -> tuple[list[_Sequence], int | None]:
        """One head per ready slot, in slot order (``ready`` is in slot order)."""
        if self._delay_ns and self._min_utilization > 0 and not self._stopped:
            deadline = min(s.requests[0].queue_start_ns for s in ready) + self._delay_ns
            utilization = len(ready) / self._max_batch_size
            if now < deadline and utilization < self._min_utilization:
                return [], deadline
        if len(ready) == 1:
            return ready, None
        key = self._shape_key(ready[0])
        return [s for s in ready if self._shape_key(s) == key], None

    def _oldest_batch(self, ready: list[_Sequence], now: int
                      ) -> tuple[list[_Sequence], int | None]:
        """The heads of the oldest sequences, batched as the dynamic batcher does."""
        ready.sort(key=lambda s: s.requests[0].queue_start_ns)
        batch: list[_Sequence] = []
        key = None
        full = len(ready) == self._slot_count  # no other sequence can join this lane
        for sequence in ready:
            sequence_key = self._shape_key(sequence)
            if batch and (not self._batching or sequence_key != key
                          or len(batch) >= self._max_batch_size):
                full = True
                break
            batch.append(sequence)
            key = sequence_key
            if len(batch) >= self._preferred[-1]:
                full = True
                break
        deadline = batch[0].requests[0].queue_start_ns + self._delay_ns
        if not full and self._batching and now < deadline and not self._stopped:
            return [], deadline
        return self._preferred_prefix(batch), None

    def _preferred_prefix(self, batch: list[_Sequence]) -> list[_Sequence]:
        """The longest prefix whose size is a preferred size, else the whole batch."""
        for cut in range(len(batch), 0, -1):
            if cut in self._preferred:
                return batch[:cut]
        return batch

    def _shape_key(self, sequence: _Sequence) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """What must match for two heads to share a batch: non-ragged inputs' item shapes,
        and the shapes of the sequences' states."""
        ragged = self._ragged
        head = sequence.requests[0]
        key = tuple((name, tensor.shape[1:] if name not in ragged else ())
                    for name, tensor in sorted(head.inputs.items()))
        if self._state is not None:
            state = sequence.state
            if head.sequence_start or state is None:
                state = self._state.initial()
            key += tuple((name, tensor.shape) for name, tensor in sorted(state.items()))
        return key

    def _take(self, sequence: _Sequence) -> InferRequest:
        """Hand the head of ``sequence`` to the lane, with its controls and state."""
        request = sequence.requests.popleft()
        del self._owner[id(request)]
        self._controls.add_to(request)
        if self._state is not None:
            if request.sequence_start or sequence.state is None:
                sequence.state = self._state.initial()
            self._state.add_to(request, sequence.state)
        if self._iterative:
            request.rescheduler = self._reschedule
            self._running[id(request)] = sequence
        if not sequence.open and not sequence.requests:
            self._retire(sequence)
        return request

    def _next_deadline(self, lane: _Lane) -> int | None:
        """The lane's earliest idle deadline, or the backlog's earliest timeout."""
        deadlines = [s.last_seen_ns + self._idle_ns for s in lane.slots
                     if s is not None and s.open]
        deadlines.extend(s.expires_ns for s in self._backlog if s.expires_ns)
        return min(deadlines) if deadlines else None

    def _expire_backlog(self, now: int) -> list[InferRequest]:
        """Take out the backlogged sequences whose timeout passed; their requests."""
        expired = [s for s in self._backlog if 0 < s.expires_ns <= now]
        failed: list[InferRequest] = []
        for sequence in expired:
            if sequence.requests:
                failed.extend(self._cut_from(sequence, sequence.requests[0]))
            self._close(sequence)
        return failed

    # -- sequences and slots (all hold the lock) ---------------------------------------------
    def _is_idle(self, sequence: _Sequence, now: int) -> bool:
        return sequence.lane is not None and now - sequence.last_seen_ns >= self._idle_ns

    def _begin(self, correlation_id: CorrelationId) -> _Sequence:
        sequence = _Sequence(correlation_id)
        self._live[correlation_id] = sequence
        if self._free:
            slot, index = heapq.heappop(self._free)
            self._seat(sequence, self._lanes[index], slot)
        else:
            self._backlog.append(sequence)
        return sequence

    def _seat(self, sequence: _Sequence, lane: _Lane, slot: int) -> None:
        lane.slots[slot] = sequence
        sequence.lane = lane
        sequence.slot = slot
        sequence.expires_ns = 0
        lane.ready.notify()

    def _close(self, sequence: _Sequence) -> None:
        """No more requests for ``sequence``; retire it if nothing is queued."""
        if sequence.open:
            sequence.open = False
            if self._live.get(sequence.correlation_id) is sequence:
                del self._live[sequence.correlation_id]
        if not sequence.requests:
            self._retire(sequence)

    def _retire(self, sequence: _Sequence) -> None:
        lane = sequence.lane
        if lane is None:
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            return
        lane.slots[sequence.slot] = None
        sequence.lane = None
        self._free_slot(lane, sequence.slot)

    def _free_slot(self, lane: _Lane, slot: int) -> None:
        """Give the slot to the oldest backlogged sequence, or mark it free."""
        if self._backlog:
            self._seat(self._backlog.popleft(), lane, slot)
        else:
            heapq.heappush(self._free, (slot, lane.index))

    def _cut_from(self, sequence: _Sequence, request: InferRequest) -> list[InferRequest]:
        """Remove ``request`` and every request queued behind it; return them in order."""
        queued = sequence.requests
        index = next(i for i, queued_request in enumerate(queued) if queued_request is request)
        cut = [queued.pop() for _ in range(len(queued) - index)]
        cut.reverse()
        for removed in cut:
            del self._owner[id(removed)]
        return cut

    def _notify_all(self) -> None:
        for lane in self._lanes:
            lane.ready.notify()

    # -- shutdown ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop admitting; instance threads run what is queued, then get None."""
        with self._lock:
            self._stopped = True
            self._notify_all()

    def drain(self) -> None:
        """After the instance threads exited: answer requests left in the queues."""
        with self._lock:
            sequences = [s for lane in self._lanes for s in lane.slots if s is not None]
            sequences.extend(self._backlog)
            leftover = [r for sequence in sequences for r in sequence.requests]
            for sequence in sequences:
                sequence.requests.clear()
                self._close(sequence)
            self._owner.clear()
            self._running.clear()
        self._fail(leftover, UnavailableError(
            f"model '{self._model_name}' was unloaded before the request could run"))

    def _fail(self, requests: Iterable[InferRequest], error: TritonError) -> None:
        for request in requests:
            sender = request.sender
            if sender is not None and not sender.closed:
                sender.send_error(error)
            self._on_failed(request)


def _drop(response: InferResponse | None, final: bool) -> None:
    """A null request's answers go nowhere."""


def _earliest(*deadlines: int | None) -> int | None:
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None
