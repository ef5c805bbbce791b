"""The server's side of one worker process: start it, execute over shared memory, see it die.

A ``WorkerHandle`` is one incarnation of an isolated instance's worker; a restart makes a new
handle (isolation/instances.py). Its states:

    starting -> ready -> dead         the process ended unasked (crash, kill, OOM): EOF on
                      -> finalized    a channel; or FINALIZE was answered (or timed out)

Per payload: the executing thread copies each request's inputs into a block of the input
arena, registers the request in the in-flight table (isolation/inflight.py) and sends one
EXECUTE frame. Responses come back as RESPONSE frames naming the request's slot, outputs in
the output ring (those sent during the execute inside its DONE frame); each is copied out
and passed to the request's engine ``ResponseSender``.

Threads:
  - the thread executing a payload (the instance's backend thread, or a caller running its
    request inline; one at a time, under the engine's ``busy`` lock) writes the data
    channel and reads it until DONE. A model that is not decoupled answers on this channel,
    so its requests cross no thread of ours: caller -> worker -> caller.
  - or an event loop (``execute_on_loop``: the engine's loop callers, models that are not
    decoupled): the loop sends EXECUTE and returns; the answer socket is registered with
    the loop, whose callback reads the answers as they come, delivers them and calls the
    engine back at DONE, so the loop never waits on the worker. Until then the engine's
    reservation keeps every other thread off the channel. A loop is detached before it
    closes (dispatch.py): ``finish_from_loop``, on its thread, then reads the answer of a
    payload still in flight from it and finishes it there.
  - the event thread (``infercore-<model>-<instance>-events``) reads the event channel: log
    records, decoupled models' responses as they come, BLS requests (started here, never
    waited on: isolation/bls.py) and custom metric operations (isolation/metrics.py). EOF
    there is the worker's death: it fails the requests in flight, cancels its BLS calls,
    drops its metrics and calls ``on_death`` (the instance restarts). It also takes the
    READY_ANSWERs of readiness checks (``start_ready_check``, from any thread) and, at EOF,
    answers those still waiting "not ready".
  - the threads answering BLS calls, and the event thread, write BLS responses and metric
    replies to the event channel, under ``_event_write_lock``.
  - each RESPONSE on the data channel says how many event frames the worker sent before it;
    the executing thread delivers it once the event thread has handled that many (nearly
    always already true), so a client that has its response also sees the metric updates
    and log lines the model made before answering. ``_events_changed`` wakes it.
  - any thread may cancel a request: that sets the flag byte in its block.
``_started`` and ``_finalizing`` are plain flags: each is set before the event it explains
(READY was read; FINALIZE is sent) and read by the event thread only after EOF. A worker
that dies by itself as finalize begins is taken for a crash, and its instance, already
stopped, ignores the report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....errors import InternalError, error_from_code
from ....payload import Payload
from ...base import CustomMetrics, InstanceInfo, ModelControl
from ..ipc.arena import ArenaView, InputArena, create_memory_file
from ..ipc.protocol import (
    BLS_CANCEL,
    BLS_REQUEST,
    CONTROL,
    DONE,
    EXECUTE,
    FINALIZE,
    FINALIZED,
    FLAG_FAILED,
    FLAG_FINAL,
    FLAG_RESPONSE,
    INIT,
    INIT_FAILED,
    LOG,
    METRIC,
    READY,
    READY_ANSWER,
    READY_CHECK,
    RESPONSE,
    FrameReader,
    encode_frame,
    read_outputs,
    stage_inputs,
)
from ..ipc.spawner import WorkerProcess, spawn_worker
from .bls import BlsCalls, Infer
from .inflight import Inflight, InflightTable, fail
from .metrics import WorkerMetrics

__all__ = ["WorkerHandle", "WorkerSettings", "WorkerUnreachable"]

logger = logging.getLogger(__name__)

_EXIT_STATUS_WAIT_S = 2.0  # how long a crash report waits to learn how the process ended
_UNWATCH_WAIT_S = 5.0  # at most, for an event loop to stop watching a finalized worker

# The loggers whose levels workers copy (root, infercore, infercore.model), sent with each
# execution: records this process would drop never cross.
_SYNCED_LOGGERS = tuple(logging.getLogger(name) for name in ("", "infercore", "infercore.model"))


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Everything a worker of one instance is started with."""

    model_name: str
    model_version: int
    instance: InstanceInfo
    config: bytes  # the normalised ModelConfig, serialised
    model_dir: str
    version_dir: str
    repository: str
    backend_config: tuple[tuple[str, str], ...]
    decoupled: bool
    start_method: str
    shm_size: int
    shm_growth: int
    start_timeout_s: float
    infer: Infer | None = None  # the server's infer, for the model's BLS calls
    control: ModelControl | None = None  # the server's, for the model's load_model ...
    metrics: CustomMetrics | None = None  # the server's registry, for the model's metrics


class WorkerUnreachable(Exception):
    """The payload never reached the worker (it was already dead); its requests are untouched."""


def _log_levels() -> tuple[int, ...]:
    return tuple(synced.getEffectiveLevel() for synced in _SYNCED_LOGGERS)


def _relog(frame: tuple[Any, ...]) -> None:
    """Log a worker's record here, under its logger, with its file, line and model fields."""
    _, level, name, message, path, line, function, exc_text, extra = frame
    target = logging.getLogger(name)
    if not target.isEnabledFor(level):
        return
    fields = None if extra is None else {
        "model_name": extra[0], "model_version": extra[1], "instance_name": extra[2]
    }
    record = target.makeRecord(name, level, path, line, message, (), None, function, fields)
    if exc_text:
        record.exc_text = exc_text
    target.handle(record)


class WorkerHandle:
    """One worker process serving one instance, from spawn to exit."""

    def __init__(self, settings: WorkerSettings, on_death: Callable[[WorkerHandle], None]
                 ) -> None:
        self._settings = settings
        self._name = settings.instance.name
        self._on_death = on_death
        self._decoupled = settings.decoupled
        self._executions = itertools.count(1)
        self._started = False
        self._finalizing = False
        self._crash_text: str | None = None
        # (loop, exec id, payload, entries, done, unreachable) of the payload an event loop
        # runs, and the loop watching the data channel (kept between chained payloads)
        self._on_loop: tuple[Any, ...] | None = None
        self._watching: asyncio.AbstractEventLoop | None = None
        # Orders starting a payload from a loop against a loop ceasing to watch, when two
        # loops take turns on the instance (the second must never be left unwatched, nor
        # watched by the first, which may close: _unwatch_if_idle hands it over).
        self._watch_lock = threading.Lock()
        self._process: WorkerProcess | None = None
        self._event_thread: threading.Thread | None = None
        self._inflight: InflightTable | None = None
        self._event_write_lock = threading.Lock()
        self._metrics = WorkerMetrics(self._name, settings.metrics)
        # Event frames handled so far (the event thread's count; "infinite" once it ended),
        # and the executing thread waiting for more of them (see _await_events).
        self._events_handled = 0
        self._events_waiters = 0
        self._events_changed = threading.Condition(threading.Lock())
        # the model's is_ready() (READY says whether it has one), and the checks asked of
        # the worker and not answered yet, by call number (guarded by _ready_lock)
        self.checks_readiness = False
        self._ready_calls = itertools.count(1)
        self._ready_lock = threading.Lock()
        self._ready_waiting: dict[int, concurrent.futures.Future[bool]] = {}

    @property
    def pid(self) -> int:
        return self._process.pid if self._process is not None else 0

    @property
    def dead(self) -> bool:
        return self._inflight is None or self._inflight.closed

    def event_thread_alive(self) -> bool:
        thread = self._event_thread
        return thread is not None and thread.is_alive()

    # -- start ----------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the worker and run the model's ``initialize`` there.

        Raises:
            TritonError: ``initialize`` (or importing model.py) failed, with the text the
                in-thread mode gives; or the worker could not start or died while starting.
        """
        settings = self._settings
        size = settings.shm_size
        # The data channel is two one-way sockets. One socket both ways would make each
        # read of the worker's answer wake the worker, asleep on that socket waiting for
        # the next payload, only for it to sleep again: a needless wake-up per payload.
        self._data, data_theirs = socket.socketpair()  # payloads: server -> worker
        self._answers, answers_theirs = socket.socketpair()  # answers: worker -> server
        self._events, events_theirs = socket.socketpair()
        self._inputs = InputArena(f"infercore-{self._name}-in", size, settings.shm_growth)
        self._outputs = ArenaView(create_memory_file(f"infercore-{self._name}-out", size), size)
        # The called models may keep views of BLS inputs: never unmapped under them.
        self._bls_inputs = ArenaView(create_memory_file(f"infercore-{self._name}-bls", size),
                                     size, keep_mapped=True)
        self._bls = BlsCalls(self._name, settings.infer, self._bls_inputs, self._inputs,
                             self._send_event, settings.control)
        self._inflight = InflightTable(self._inputs.free,
                                       lambda block: self._inputs.set_flag(block, 1))
        try:
            fds = [data_theirs.fileno(), answers_theirs.fileno(), events_theirs.fileno(),
                   self._inputs.fd, self._outputs.fd, self._bls_inputs.fd]
            self._process = spawn_worker(settings.start_method, self._name, fds,
                                         settings.start_timeout_s)
        except BaseException:
            self._close_resources()
            raise
        finally:
            data_theirs.close()
            answers_theirs.close()
            events_theirs.close()
        self._reader = FrameReader(self._answers)
        self._event_thread = threading.Thread(
            target=self._read_events, daemon=True,
            name=f"infercore-{settings.model_name}-{self._name}-events",
        )
        self._event_thread.start()
        try:
            self._initialize()
        except BaseException:
            self._abandon()
            raise
        self._started = True

    def _initialize(self) -> None:
        settings = self._settings
        instance = settings.instance
        init = {
            "model_name": settings.model_name,
            "model_version": settings.model_version,
            "config": settings.config,
            "model_dir": settings.model_dir,
            "version_dir": settings.version_dir,
            "repository": settings.repository,
            "backend_config": dict(settings.backend_config),
            "instance": (instance.name, instance.group_name, instance.index, instance.kind,
                         instance.device_id, instance.passive, instance.profiles,
                         instance.secondary_devices, instance.host_policy),
            "decoupled": settings.decoupled,
            "input_size": self._inputs.size,
            "output_size": self._outputs.size,
            "bls_size": self._bls_inputs.size,
            "growth": settings.shm_growth,
            "log_levels": _log_levels(),
        }
        try:
            self._data.sendall(encode_frame((INIT, init)))
        except OSError:
            pass  # dead already: the read below says so
        frames = self._reader.read()
        if not frames:
            raise InternalError(
                f"Stub process '{self._name}' failed to initialize: its worker process "
                f"{self._describe_exit()}"
            )
        frame = frames[0]
        if frame[0] == INIT_FAILED:
            raise error_from_code(frame[1], frame[2])
        if frame[0] != READY:
            raise InternalError(f"Stub process '{self._name}' sent an unexpected first frame")
        self.checks_readiness = bool(frame[2])

    def _abandon(self) -> None:
        """Tear down a worker that failed to start."""
        self._table.close()
        process = self._process
        if process is not None and process.wait(_EXIT_STATUS_WAIT_S) is None:
            process.kill()
            process.wait(_EXIT_STATUS_WAIT_S)
        self.release()

    @property
    def _table(self) -> InflightTable:
        table = self._inflight
        assert table is not None, "the worker was never started"
        return table

    # -- execute --------------------------------------------------------------------------
    def execute(self, payload: Payload) -> None:
        """Run one payload in the worker; return when its ``execute`` has returned.

        Raises:
            WorkerUnreachable: the worker died before it read the payload; its requests
                are untouched.
        """
        table = self._table
        if table.closed:
            raise WorkerUnreachable
        exec_id, entries, frame = self._prepare(payload)
        try:
            self._data.sendall(frame)
        except OSError:
            self._undelivered(entries)
            return
        self._await_done(exec_id, payload, entries)

    def _prepare(self, payload: Payload) -> tuple[int, list[Inflight], bytes]:
        """Stage the payload's inputs and register its requests: (exec id, entries, the
        EXECUTE frame). Raises with nothing registered (the engine answers)."""
        table = self._table
        entries: list[Inflight] = []
        records: list[tuple[Any, ...]] = []
        try:
            for request in payload.requests:
                block, descriptors = stage_inputs(self._inputs, request.inputs,
                                                  request.cancelled)
                slot, entry = table.add(request, block)
                entries.append(entry)
                records.append((
                    slot, block, request.id, request.correlation_id, request.sequence_start,
                    request.sequence_end, request.timeout_us, request.parameters,
                    request.requested_outputs, request.batch_size, descriptors,
                ))
            exec_id = next(self._executions)
            frame = encode_frame((EXECUTE, exec_id, _log_levels(), self._inputs.size,
                                  tuple(records)))
        except BaseException:  # e.g. a parameter marshal cannot encode: the engine answers
            table.take_back(entries)
            raise
        payload.mark_compute_input_end()
        return exec_id, entries, frame

    # -- execute from an event loop (models that are not decoupled) -----------------------
    def execute_on_loop(self, payload: Payload, loop: asyncio.AbstractEventLoop,
                        done: Callable[[], None], unreachable: Callable[[], None]) -> None:
        """Send the payload from ``loop`` (the running one) and return at once; the loop
        reads the answer when it is readable, delivers it and calls ``done()``. If the
        worker turns out to have died before it read the payload, ``unreachable()`` is
        called instead, its requests untouched (to be retried). One of the two is called,
        once, on the loop. Raises before anything was sent (WorkerUnreachable: it is dead).

        The data channel is the loop's until then: the engine's reservation keeps every
        other thread off this instance meanwhile. The loop keeps watching the channel while
        ``done`` starts the next payload (a chain of them, scheduling/dynamic.py).
        """
        if self._table.closed:
            raise WorkerUnreachable
        exec_id, entries, frame = self._prepare(payload)
        with self._watch_lock:
            self._on_loop = (loop, exec_id, payload, entries, done, unreachable)
            if self._watching is None:
                loop.add_reader(self._answers.fileno(), self._on_loop_readable)
                self._watching = loop
        try:
            self._data.sendall(frame)  # a few hundred bytes: never blocks the loop
        except OSError:
            self._settle_on_loop(loop)
            self._lost(entries, done, unreachable)

    def _settle_on_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Nothing is in flight from a loop any more: ``loop`` (the running one, if it
        watches the channel) stops watching it."""
        with self._watch_lock:
            self._on_loop = None
            self._unwatch_if_idle(loop)

    def _unwatch_if_idle(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Under ``_watch_lock``: stop ``loop`` watching the channel unless a payload it
        started is in flight (``done`` on this loop chained the next one). A payload that
        another loop started meanwhile (it found this loop still watching) is handed to
        that loop, which then watches for itself: a loop never serves another's payload,
        since it may close once its own work is done. A loop only ever (un)registers
        itself."""
        if loop is None or self._watching is not loop:
            return
        started = self._on_loop
        if started is not None and started[0] is loop:
            return
        self._watching = None
        loop.remove_reader(self._answers.fileno())
        if started is not None:
            owner = started[0]
            try:
                owner.call_soon_threadsafe(self._watch_for, owner)
            except RuntimeError:  # closed: it was detached, which finished its payload
                pass

    def _watch_for(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: watch the channel for the payload ``loop`` started (handed over)."""
        with self._watch_lock:
            started = self._on_loop
            if self._watching is None and started is not None and started[0] is loop:
                loop.add_reader(self._answers.fileno(), self._on_loop_readable)
                self._watching = loop

    def _on_loop_readable(self) -> None:
        started = self._on_loop
        watcher = self._watching
        if started is None:  # nothing in flight (a chain's callback failed): stop watching
            with self._watch_lock:
                self._unwatch_if_idle(watcher)
            return
        frames = self._reader.read_available()
        if frames is None:
            return  # woken without a whole frame
        _, exec_id, payload, entries, done, unreachable = started
        if not frames:  # EOF: the worker died
            self._settle_on_loop(watcher)
            if payload.compute_output_start_ns == 0 and self._payload_unread():
                self._lost(entries, done, unreachable)  # it never read the payload
                return
            table = self._table
            table.close()
            fail(table.take_back(entries), self._crash_error_text())
            done()
            return
        if payload.compute_output_start_ns == 0:
            payload.mark_compute_output_start()
        try:
            late = self._take_frames(frames, exec_id)
        except Exception as exc:  # noqa: BLE001 - as a failed execute: answer, go on
            # Its later frames, if any, name slots and an execution no longer awaited.
            logger.exception("instance %s: failed to read its worker's answer", self._name)
            fail(self._table.take_back(entries), f"{type(exc).__name__}: {exc}")
            late = ()
        if late is None:
            return
        self._on_loop = None
        self._settle_answered(entries, late or ())
        try:
            done()  # may send the chain's next payload, which keeps the channel watched
        finally:
            with self._watch_lock:
                self._unwatch_if_idle(watcher)

    def finish_from_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """``loop`` is being detached (on its thread, before it closes): read the answer of
        the payload it started, if one is still in flight, on this thread and finish it
        (``done``; ``unreachable`` if the worker died without reading it)."""
        with self._watch_lock:
            started = self._on_loop
            if started is None or started[0] is not loop:
                return
            self._on_loop = None
            if self._watching is loop:
                self._watching = None
                loop.remove_reader(self._answers.fileno())
        _, exec_id, payload, entries, done, unreachable = started
        try:
            self._await_done(exec_id, payload, entries)
        except WorkerUnreachable:  # it never read the payload: handed back for a retry
            unreachable()
            return
        done()

    def _await_done(self, exec_id: int, payload: Payload, entries: list[Inflight]) -> None:
        reader = self._reader
        received = False
        while True:
            frames = reader.read()
            if not frames:
                if not received and self._payload_unread():
                    self._undelivered(entries)  # raises WorkerUnreachable: retried
                    return
                # The worker died with the payload in hand.
                self._table.close()
                fail(self._table.take_back(entries), self._crash_error_text())
                return
            if not received and not self._decoupled:
                # Its responses arrive with DONE, once execute returned: outputs start now.
                payload.mark_compute_output_start()
            received = True
            late = self._take_frames(frames, exec_id)
            if late is not None:
                break
        if self._decoupled:
            payload.mark_compute_output_start()
            if self._table.settle(entries):  # died meanwhile: nobody else fails them now
                self._table.fail_all(self._crash_error_text())
            return
        self._settle_answered(entries, late or ())

    def _settle_answered(self, entries: list[Inflight], late: tuple[int, ...]) -> None:
        """A non-decoupled payload's DONE came: the requests of the ``late`` slots stay,
        answered later from the event channel (their engine senders are told so); the
        engine fails any other left unanswered: their blocks are freed."""
        kept = self._table.keep(late) if late else []
        if kept:
            for entry in kept:
                sender = entry.request.sender
                if sender is not None:
                    sender.answer_later()
            if self._table.settle(kept):  # died meanwhile: nobody else fails them now
                self._table.fail_all(self._crash_error_text())
            kept_ids = {id(entry) for entry in kept}
            entries = [entry for entry in entries if id(entry) not in kept_ids]
        self._table.take_back(entries)

    def _take_frames(self, frames: list[tuple[Any, ...]], exec_id: int
                     ) -> tuple[int, ...] | None:
        """Deliver the responses among a payload's answer frames; once its DONE came, the
        slots it answers later (else None)."""
        late: tuple[int, ...] | None = None
        for frame in frames:
            if frame[0] == RESPONSE:
                self._await_events(frame[8])
                self._deliver(frame)
            elif frame[0] == DONE and frame[1] == exec_id:
                for response in frame[2]:
                    self._await_events(response[8])
                    self._deliver(response)
                late = tuple(frame[3]) if len(frame) > 3 else ()
        return late

    def _lost(self, entries: list[Inflight], done: Callable[[], None],
              unreachable: Callable[[], None]) -> None:
        """The worker died before reading the payload (seen on the loop): a retry if none
        of its requests was answered, else fail the rest."""
        if self._hand_back(entries):
            unreachable()
        else:
            done()

    def _undelivered(self, entries: list[Inflight]) -> None:
        """The worker died without reading the payload: hand it back for a retry."""
        if self._hand_back(entries):
            raise WorkerUnreachable

    def _hand_back(self, entries: list[Inflight]) -> bool:
        """After the worker died without reading a payload: True when none of its requests
        was answered (the payload can be retried as it is); else the rest are failed."""
        table = self._table
        table.close()
        taken = table.take_back(entries)
        if len(taken) == len(entries):
            return True
        fail(taken, self._crash_error_text())  # some were answered already
        return False

    def _payload_unread(self) -> bool:
        """After the worker's death (EOF on its answers): whether it left what we sent it
        unread. A Unix socket closed with data still in its receive queue resets its peer
        (Linux), so our end of the payload socket then reports ECONNRESET. A dying
        process's descriptors close one by one, so that end may close a moment after the
        answer socket: wait for it (a crash only; microseconds)."""
        try:
            poller = select.poll()  # not select(): descriptors may be past 1023
            poller.register(self._data, select.POLLIN)
            if poller.poll(_EXIT_STATUS_WAIT_S * 1000):
                self._data.recv(1, socket.MSG_DONTWAIT)
        except ConnectionResetError:
            return True
        except (OSError, ValueError):  # read everything, or closed under us
            return False
        return False

    def _await_events(self, count: int) -> None:
        """Wait until the event thread has handled the worker's first ``count`` event frames
        (metric updates and logs sent before a response are applied before it is delivered).
        Nearly always true at once: those frames were sent before the response."""
        if self._events_handled >= count:
            return
        with self._events_changed:
            self._events_waiters += 1
            try:
                while self._events_handled < count:
                    self._events_changed.wait()
            finally:
                self._events_waiters -= 1

    def _handled_events(self, count: int) -> None:
        """The event thread has handled ``count`` frames: wake an executing thread waiting."""
        self._events_handled = count  # written before the waiters are read: none is missed
        if self._events_waiters:
            with self._events_changed:
                self._events_changed.notify_all()

    def _deliver(self, frame: tuple[Any, ...]) -> None:
        _, slot, flags, parameters, error, descriptors, ring_size, sequence, _ = frame
        try:
            outputs = read_outputs(self._outputs, ring_size, descriptors) if descriptors else {}
        finally:
            if sequence:
                self._outputs.mark_consumed(sequence)
        self._table.deliver(slot, final=bool(flags & FLAG_FINAL),
                            has_response=bool(flags & FLAG_RESPONSE), outputs=outputs,
                            parameters=parameters, error=error,
                            fails=bool(flags & FLAG_FAILED))

    # -- readiness ------------------------------------------------------------------------
    def start_ready_check(self) -> concurrent.futures.Future[bool]:
        """Ask the worker for the model's is_ready() (any thread): a future of its answer,
        False if the worker dies first; the caller bounds its wait."""
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._ready_lock:
            if self.dead:
                answer.set_result(False)
                return answer
            call = next(self._ready_calls)
            self._ready_waiting[call] = answer
        self._send_event((READY_CHECK, call))
        return answer

    def _ready_answered(self, call: int, ready: bool) -> None:
        with self._ready_lock:
            answer = self._ready_waiting.pop(call, None)
        if answer is not None:
            answer.set_result(bool(ready))

    def _ready_unanswered(self) -> None:
        """The worker is gone (event thread): its pending checks answer not ready."""
        with self._ready_lock:
            waiting, self._ready_waiting = self._ready_waiting, {}
        for answer in waiting.values():
            answer.set_result(False)

    def _send_event(self, frame: tuple[Any, ...]) -> None:
        """Write a BLS response or metric reply to the worker (from any thread)."""
        raw = encode_frame(frame)
        with self._event_write_lock:
            try:
                self._events.sendall(raw)
            except OSError:  # the worker is gone: its event thread cleans up
                pass

    # -- death ----------------------------------------------------------------------------
    def _describe_exit(self) -> str:
        process = self._process
        if process is None:
            return "did not start"
        process.wait(_EXIT_STATUS_WAIT_S)
        return f"(pid {process.pid}) {process.describe_exit()}"

    def _crash_error_text(self) -> str:
        """What the requests in flight are failed with, close to Triton's wording."""
        if self._crash_text is None:
            self._crash_text = (
                f"Failed to process the request(s) for model '{self._name}', message: Stub "
                f"process is not healthy. The worker process of instance '{self._name}' "
                f"{self._describe_exit()} while requests were in flight; it is being "
                "restarted."
            )
        return self._crash_text

    def _read_events(self) -> None:
        reader = FrameReader(self._events)
        handled = 0
        while True:
            frames = reader.read()
            if not frames:
                break
            handled += len(frames)
            for frame in frames:
                try:
                    kind = frame[0]
                    if kind == LOG:
                        _relog(frame)
                    elif kind == RESPONSE:
                        self._deliver(frame)
                    elif kind == METRIC:
                        reply = self._metrics.handle(frame)
                        if reply is not None:
                            self._send_event(reply)
                    elif kind == BLS_REQUEST:
                        self._bls.start(frame)
                    elif kind == BLS_CANCEL:
                        self._bls.cancel(frame[1])
                    elif kind == CONTROL:
                        self._bls.control(frame)
                    elif kind == READY_ANSWER:
                        self._ready_answered(frame[1], frame[2])
                except Exception:  # noqa: BLE001 - one bad frame must not end the thread
                    logger.exception("instance %s: failed to handle a frame from its worker",
                                     self._name)
            self._handled_events(handled)
        self._handled_events(sys.maxsize)  # nothing more will come: nobody may wait
        self._bls.close()
        self._metrics.close()
        table = self._table
        table.close()  # dead from now on: no readiness check is asked of it any more
        self._ready_unanswered()
        if self._finalizing:
            table.fail_all(
                f"Failed to process the request(s) for model '{self._name}', message: the "
                "model instance was unloaded before the request finished", unavailable=True)
            return
        if not self._started:
            return  # start() reports it
        text = self._crash_error_text()
        logger.error("Stub process '%s' is unhealthy and it will be restarted: its worker "
                     "process %s", self._name, self._describe_exit())
        table.fail_all(text)
        self._on_death(self)

    # -- finalize -------------------------------------------------------------------------
    def finalize(self, timeout: float) -> None:
        """Run the model's ``finalize`` in the worker, let it exit, release everything."""
        deadline = time.monotonic() + timeout
        self._finalizing = True
        self._bls.abort()  # a model waiting on another model must get to finalize
        with self._watch_lock:
            watching, self._watching = self._watching, None
        if watching is not None:
            # A payload that never ended (finalized past the exit timeout): its loop stops
            # watching the channel, which this thread reads from now on.
            self._unwatch_from(watching, min(timeout, _UNWATCH_WAIT_S))
        if not self._table.closed:
            try:
                self._data.settimeout(timeout)
                self._answers.settimeout(timeout)
                self._data.sendall(encode_frame((FINALIZE,)))
                finished = False
                while not finished:
                    frames = self._reader.read()  # [] at EOF or at the timeout
                    if not frames:
                        break
                    finished = any(frame[0] == FINALIZED for frame in frames)
            except OSError:  # gone already, or the send timed out
                pass
        process = self._process
        if process is not None:
            remaining = max(0.1, deadline - time.monotonic())
            if process.wait(remaining) is None:
                logger.error("worker of instance %s did not exit after finalize; killing it",
                             self._name)
                process.kill()
                process.wait(_EXIT_STATUS_WAIT_S)
        self.release()

    def _unwatch_from(self, loop: asyncio.AbstractEventLoop, wait_s: float) -> None:
        """Make ``loop`` stop watching the answer channel, and wait until it has: it must
        not read what this thread reads now, nor hold a registration for a descriptor
        about to be closed (whose number the next worker's channel may get). On that
        loop's own thread, at once; a loop that is not running does it when it runs
        again (it reads nothing meanwhile); one that does not get to it within
        ``wait_s`` is left to find the descriptor closed."""
        fd = self._answers.fileno()
        if _running_loop() is loop:
            loop.remove_reader(fd)
            return
        removed = threading.Event()

        def remove() -> None:
            try:
                loop.remove_reader(fd)
            finally:
                removed.set()

        try:
            loop.call_soon_threadsafe(remove)
        except RuntimeError:  # closed: its registrations went with it
            return
        if loop.is_running() and not removed.wait(wait_s):
            logger.warning("instance %s: the event loop watching its worker did not let go "
                           "within %.1f s; finalizing anyway", self._name, wait_s)

    def release(self) -> None:
        """Join the event thread and close the channels and shared memory (after exit)."""
        thread = self._event_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_EXIT_STATUS_WAIT_S)
        self._close_resources()

    def _close_resources(self) -> None:
        for resource in ("_data", "_answers", "_inputs", "_outputs", "_bls_inputs"):
            value = getattr(self, resource, None)
            if value is not None:
                value.close()
        events = getattr(self, "_events", None)
        if events is not None:
            with self._event_write_lock:  # not under a BLS answer being written
                events.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # this thread runs no loop
        return None
