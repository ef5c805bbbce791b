"""Inside a worker process: one instance of a Python model, driven by the server's frames.

The worker runs the unchanged in-thread runtime (``PythonModel``/``PythonInstance`` from
backend.py) over requests whose inputs are views of its shared memory and whose senders
are ``_WorkerSender``s: a response the model sends, from ``execute`` or from any thread it
starts, is copied into the output ring and described in a RESPONSE frame. So the model sees
exactly the pb_utils API, ``initialize`` args and error texts it sees in-thread.

    INIT      create the model and the instance (imports model.py, runs ``initialize``);
              answer READY (saying whether the model has ``is_ready``), or INIT_FAILED
              with the error's code and text
    EXECUTE   wrap the requests, run ``execute``, answer DONE. For a model that is not
              decoupled, the responses sent meanwhile are held and travel inside DONE:
              one frame, one send, one wake-up of the server. DONE also names the
              requests whose response sender the model kept to answer after ``execute``
              returned (as Triton allows); those answers travel as events, outputs inline
    FINALIZE  run ``finalize``, answer FINALIZED; the process then exits

A worker's life: started -> initializing (INIT) -> serving (EXECUTE after EXECUTE) ->
finalizing (FINALIZE) -> exited; or exited at any point when the server is gone, or when the
model crashes the process (the server then restarts the instance with a new worker).

Log records (the model's ``pb_utils.Logger`` lines, and any other logging) are forwarded to
the server as LOG frames and logged there under the same logger name. Cancellation needs no
frame: the server sets a flag byte in the request's input block, which ``is_cancelled``
reads. BLS calls go to the server as BLS_REQUEST frames and model control (load_model ...)
as CONTROL frames (worker/bls.py), and pb_utils custom metrics live in the server's
registry (worker/metrics.py); all travel on the event channel, whose other direction
brings their answers. A READY_CHECK there runs the model's ``is_ready()`` (readiness.py,
on a thread of its own) and is answered by a READY_ANSWER.

Threads: the main thread reads the data channel and runs INIT/EXECUTE/FINALIZE. Model
threads may send responses, call other models, update metrics and log at any time.
``_Outbox`` serialises writes: one lock per channel (the event channel's is reentrant, as
logging may happen while sending; a frame sent from inside another's write, by a finalizer
the garbage collector runs there, waits until that write ends), and the channel carrying
responses also covers the output ring, so ring chunks are consumed in the order they were
allocated. The reader thread reads the event channel: BLS responses and metric replies;
EOF means the server is gone, and the process exits at once.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from ....errors import InternalError, TritonError
from ....payload import Payload
from ....request import InferRequest
from ....tensor import Tensor as CoreTensor
from ...base import InstanceInfo, ModelContext
from ..ipc.arena import ArenaView, InputArena, OutputRing
from ..ipc.protocol import (
    BLS_RESPONSE,
    CONTROL_REPLY,
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
    METRIC_REPLY,
    READY,
    READY_ANSWER,
    READY_CHECK,
    RESPONSE,
    FrameReader,
    encode_frame,
    inline_outputs,
    read_inputs,
    write_outputs,
)
from ..pb_utils.error import python_error_text
from ..pb_utils.metrics import use_metrics_backend
from .bls import BlsClient, RemoteControl
from .metrics import RemoteMetrics

__all__ = ["EXIT_SERVER_GONE", "WorkerRuntime", "exit_now"]

logger = logging.getLogger(__name__)

EXIT_SERVER_GONE = 1  # the server closed our channels: nobody is left to answer


def exit_now(code: int) -> None:
    """Leave at once: model threads must not keep the worker alive, nor atexit hooks hang it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nothing to keep
            pass
    os._exit(code)


class _Outbox:
    """Every write to the server, serialised per channel."""

    def __init__(self, data: socket.socket, events: socket.socket, ring: OutputRing,
                 decoupled: bool, model_name: str) -> None:
        self.model_name = model_name  # for error texts
        self._data = data
        self._events = events
        self._ring = ring
        self._decoupled = decoupled
        self._data_lock = threading.Lock()
        self._event_lock = threading.RLock()
        self._event_writing = False  # a write on the event channel is under way
        self._event_backlog: deque[bytes] = deque()  # frames sent from inside that write
        self._events_sent = 0  # frames written on the event channel (RESPONSE carries it)
        # The channel that carries responses also orders the ring's chunks.
        self._response_lock = self._event_lock if decoupled else self._data_lock
        # RESPONSE frames kept back during an execute, to travel inside its DONE
        self._held: list[tuple[Any, ...]] | None = None
        # slots of that execute's requests the model answers after it returns
        self._late: list[int] = []

    def hold(self) -> None:
        with self._data_lock:
            self._held = []
            self._late = []

    def answer_later(self, slot: int) -> None:
        """The model kept the request of ``slot`` (not decoupled) to answer it after its
        ``execute`` returns: its DONE says so, and its responses go as events."""
        with self._data_lock:
            self._late.append(slot)

    def release(self, exec_id: int) -> None:
        """Send the DONE of execution ``exec_id``, with the responses held since ``hold``
        and the slots answered later."""
        with self._data_lock:
            held, self._held = self._held, None
            late, self._late = self._late, []
            self._write(self._data,
                        encode_frame((DONE, exec_id, tuple(held or ()), tuple(late))))

    def send_data(self, frame: tuple[Any, ...]) -> None:
        raw = encode_frame(frame)
        with self._data_lock:
            self._write(self._data, raw)

    def send_event(self, frame: tuple[Any, ...]) -> None:
        raw = encode_frame(frame)
        with self._event_lock:
            self._write_event(raw)

    def _write_event(self, raw: bytes) -> None:
        """Write one frame on the event channel (``_event_lock`` held)."""
        if self._event_writing:
            # Re-entered on this thread mid-write (a finalizer run by the garbage
            # collector): never split the frame being written; it follows it.
            self._event_backlog.append(raw)
            return
        self._event_writing = True
        try:
            self._write(self._events, raw)
            self._events_sent += 1
            while self._event_backlog:
                self._write(self._events, self._event_backlog.popleft())
                self._events_sent += 1
        finally:
            self._event_writing = False

    def respond(self, slot: int, flags: int, parameters: dict[str, Any] | None,
                error: tuple[int, str] | None, outputs: Mapping[str, CoreTensor],
                late: bool = False) -> None:
        if late and not self._decoupled:
            # An answer after execute (any time from answer_later on): an event, read at
            # once; its outputs inline, since the ring's chunks are ordered by the data
            # channel this frame does not travel on.
            frame = (RESPONSE, slot, flags, parameters, error, inline_outputs(outputs), 0, 0,
                     0)
            self._write_event(encode_frame(frame))
            return
        with self._response_lock:
            sequence, descriptors = write_outputs(self._ring, outputs) if outputs else (0, ())
            frame = (RESPONSE, slot, flags, parameters, error, descriptors, self._ring.size,
                     sequence, self._events_sent)
            if self._decoupled:
                self._write_event(encode_frame(frame))
            elif self._held is not None:
                self._held.append(frame)
            else:
                self._write(self._data, encode_frame(frame))

    @staticmethod
    def _write(channel: socket.socket, raw: bytes) -> None:
        try:
            channel.sendall(raw)
        except OSError:  # the server is gone: nobody is left to answer
            exit_now(EXIT_SERVER_GONE)


class _WorkerRequest(InferRequest):
    """A request inside the worker: its cancel flag lives in the server's input block.

    Built with ``InferRequest``'s constructor; ``watch_flag`` completes it.
    """

    __slots__ = ("_flags", "_flag_offset", "_finished")

    def watch_flag(self, flags: ArenaView, flag_offset: int) -> None:
        self._flags = flags
        self._flag_offset = flag_offset
        self._finished = False

    def is_cancelled(self) -> bool:
        if not self.cancelled and not self._finished and self._flags.flag(self._flag_offset):
            self.cancelled = True
        return self.cancelled

    def _finish(self) -> None:
        """The final response is sent: the server may reuse the block from now on."""
        self.is_cancelled()
        self._finished = True


class _WorkerSender:
    """The engine's ``ResponseSender`` as the worker's requests see it: sends become frames.

    It lets go of its request with the final response: the two would otherwise form a
    reference cycle per request, left to the cyclic garbage collector.
    """

    __slots__ = ("_request", "_request_id", "_slot", "_outbox", "_late")

    def __init__(self, request: _WorkerRequest, slot: int, outbox: _Outbox) -> None:
        self._request: _WorkerRequest | None = request
        self._request_id = request.id
        self._slot = slot
        self._outbox = outbox
        self._late = False

    def answer_later(self) -> None:
        """The backend answers this request after its ``execute`` returns (backend.py)."""
        if not self._late and self._request is not None:
            self._late = True
            self._outbox.answer_later(self._slot)

    @property
    def closed(self) -> bool:
        return self._request is None

    def _open_request(self) -> _WorkerRequest:
        request = self._request
        if request is None:
            raise InternalError(
                f"response sender of request '{self._request_id}' for model "
                f"'{self._outbox.model_name}' is closed: the final response was already sent"
            )
        return request

    def send(self, outputs: dict[str, CoreTensor] | None = None, *,
             parameters: dict[str, Any] | None = None, error: TritonError | None = None,
             final: bool = True, fails: bool = True) -> None:
        request = self._open_request()
        if final:
            self._request = None
            request._finish()
        flags = FLAG_RESPONSE | (FLAG_FINAL if final else 0)
        if error is not None and fails:
            flags |= FLAG_FAILED
        wanted = request.requested_outputs
        if outputs is None:
            chosen: Mapping[str, CoreTensor] = {}
        elif wanted is None:
            chosen = outputs  # only read, and copied into the ring before this returns
        else:  # only what was asked for crosses
            chosen = {name: tensor for name, tensor in outputs.items() if name in wanted}
        coded = None if error is None else (int(error.code), error.message)
        try:
            self._outbox.respond(self._slot, flags, dict(parameters) if parameters else None,
                                 coded, chosen, self._late)
        except TritonError as exc:  # an output that cannot cross (a GPU tensor)
            if final:  # still end the request, with the reason
                self._outbox.respond(self._slot, flags | FLAG_FAILED, None,
                                     (int(exc.code), exc.message), {})
            raise

    def close(self) -> None:
        request = self._open_request()
        self._request = None
        request._finish()
        self._outbox.respond(self._slot, FLAG_FINAL, None, None, {}, self._late)


def _refuse_reschedule(request: InferRequest) -> None:
    """A process-isolated model's request cannot be rescheduled yet: answered instead."""
    sender = request.sender
    if sender is not None and not sender.closed:
        sender.send(error=InternalError(
            "request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) is not "
            "available to process-isolated Python models; run the model in-thread"))


class _ForwardingHandler(logging.Handler):
    """Sends each log record to the server, which logs it under the same logger."""

    def __init__(self, outbox: _Outbox) -> None:
        super().__init__()
        self._outbox = outbox
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = record.exc_text or ""
            if record.exc_info and not exc_text:
                exc_text = self._formatter.formatException(record.exc_info)
            model = getattr(record, "model_name", None)
            extra = None if model is None else (
                model, getattr(record, "model_version", -1), getattr(record, "instance_name", "")
            )
            self._outbox.send_event((LOG, record.levelno, record.name, record.getMessage(),
                                     record.pathname, record.lineno, record.funcName,
                                     exc_text, extra))
        except Exception:  # noqa: BLE001 - logging must never break the model
            self.handleError(record)


class WorkerRuntime:
    """The worker's main loop over its data channel."""

    def __init__(self, data: socket.socket, answers: socket.socket, events: socket.socket,
                 input_fd: int, output_fd: int, bls_fd: int) -> None:
        self._data = data  # the server's payloads, read here
        self._answers = answers  # our answers to them, written here
        self._events = events
        self._input_fd = input_fd
        self._output_fd = output_fd
        self._bls_fd = bls_fd
        self._levels: tuple[int, ...] = ()
        # Set at INIT, before anything that the server answers on the event channel.
        self._bls: BlsClient | None = None
        self._control: RemoteControl | None = None
        self._metrics: RemoteMetrics | None = None
        self._iterative = False  # set at INIT: the model's sequence_batching.iterative_sequence

    def run(self) -> int:
        """Serve until FINALIZE (exit code 0) or until the server is gone."""
        reader_thread = threading.Thread(target=self._read_server, daemon=True,
                                         name="infercore-worker-reader")
        reader_thread.start()
        reader = FrameReader(self._data)
        frames = reader.read()
        if not frames or frames[0][0] != INIT:
            return EXIT_SERVER_GONE
        settings: dict[str, Any] = frames[0][1]
        self._inputs = ArenaView(self._input_fd, settings["input_size"])
        ring = OutputRing(self._output_fd, settings["output_size"], settings["growth"])
        self._model_name: str = settings["model_name"]
        self._outbox = _Outbox(self._answers, self._events, ring, settings["decoupled"],
                              self._model_name)
        self._decoupled: bool = settings["decoupled"]
        self._install_logging(settings["log_levels"])
        bls_arena = InputArena("", settings["bls_size"], settings["growth"], fd=self._bls_fd)
        self._bls = BlsClient(self._outbox.send_event, bls_arena, self._inputs)
        self._control = RemoteControl(self._outbox.send_event)
        self._metrics = RemoteMetrics(self._outbox.send_event)
        use_metrics_backend(self._metrics)
        if not self._create(settings):
            return 0
        while True:
            frames = reader.read()
            if not frames:
                return EXIT_SERVER_GONE
            for frame in frames:
                if frame[0] == EXECUTE:
                    self._execute(frame)
                elif frame[0] == FINALIZE:
                    self._finalize()
                    return 0

    def _read_server(self) -> None:
        """The reader thread: BLS responses and metric replies, until the server is gone."""
        reader = FrameReader(self._events)
        while True:
            frames = reader.read()
            if not frames:
                break
            for frame in frames:
                try:
                    if frame[0] == BLS_RESPONSE:
                        self._bls.deliver(frame)  # type: ignore[union-attr]
                    elif frame[0] == CONTROL_REPLY:
                        self._control.reply(frame)  # type: ignore[union-attr]
                    elif frame[0] == METRIC_REPLY:
                        self._metrics.reply(frame)  # type: ignore[union-attr]
                    elif frame[0] == READY_CHECK:
                        self._check_ready(frame[1])
                except Exception:  # noqa: BLE001 - one bad frame must not end the thread
                    logger.exception("worker %d: failed to handle a frame from the server",
                                     os.getpid())
        exit_now(EXIT_SERVER_GONE)

    def _check_ready(self, call: int) -> None:
        """A READY_CHECK (reader thread): start the model's is_ready() (or join the one
        under way, readiness.py) and answer when it has; never waits here."""
        probe = self._instance.readiness_probe()  # made before READY: asked only after it
        if probe is None:
            self._outbox.send_event((READY_ANSWER, call, True))
            return
        probe.start().add_done_callback(
            lambda answer: self._outbox.send_event((READY_ANSWER, call, answer.result())))

    def _install_logging(self, levels: tuple[int, ...]) -> None:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(_ForwardingHandler(self._outbox))
        self._apply_levels(levels)

    def _apply_levels(self, levels: tuple[int, ...]) -> None:
        """Match the server's levels (root, infercore, infercore.model), so records it
        would drop never cross."""
        if levels != self._levels:
            self._levels = levels
            for name, level in zip(("", "infercore", "infercore.model"), levels, strict=False):
                logging.getLogger(name).setLevel(level)

    def _create(self, settings: dict[str, Any]) -> bool:
        from ..backend import PythonBackend  # the in-thread runtime, reused as is

        config = model_config_pb2.ModelConfig()
        config.ParseFromString(settings["config"])
        context = ModelContext(
            name=self._model_name,
            version=settings["model_version"],
            config=config,
            model_dir=Path(settings["model_dir"]),
            version_dir=Path(settings["version_dir"]),
            repository=Path(settings["repository"]),
            backend_config=settings["backend_config"],
            infer=self._bls.infer,  # type: ignore[union-attr]
            control=self._control,
        )
        name, group, index, kind, device_id, passive, profiles, secondary, policy = (
            settings["instance"]
        )
        info = InstanceInfo(name, group, index, kind, device_id, passive, tuple(profiles),
                            tuple(tuple(s) for s in secondary), policy)
        self._iterative = config.sequence_batching.iterative_sequence
        try:
            self._model = PythonBackend().create_in_thread_model(context)
            self._instance = self._model.create_instance(info)
        except TritonError as exc:
            self._outbox.send_data((INIT_FAILED, int(exc.code), exc.message))
            return False
        except BaseException as exc:  # noqa: BLE001 - any failure fails the load, with its text
            self._outbox.send_data((INIT_FAILED, 1, python_error_text(exc, skip_frames=0)))
            return False
        self._outbox.send_data((READY, os.getpid(),
                                self._instance.readiness_probe() is not None))
        return True

    def _execute(self, frame: tuple[Any, ...]) -> None:
        _, exec_id, levels, input_size, records = frame
        self._apply_levels(levels)
        requests: list[InferRequest] = []
        model_name, arena, outbox = self._model_name, self._inputs, self._outbox
        for (slot, block, request_id, correlation_id, sequence_start, sequence_end,
             timeout_us, parameters, requested, batch_size, inputs) in records:
            request = _WorkerRequest(
                model_name,
                read_inputs(arena, input_size, inputs),
                id=request_id,
                requested_outputs=requested,
                parameters=parameters,
                timeout_us=timeout_us,
                correlation_id=correlation_id,
                sequence_start=sequence_start,
                sequence_end=sequence_end,
            )
            request.watch_flag(arena, block)
            request.batch_size = batch_size
            request.sender = _WorkerSender(request, slot, outbox)  # type: ignore[assignment]
            if self._iterative:
                request.rescheduler = _refuse_reschedule
            requests.append(request)
        if not self._decoupled:
            self._outbox.hold()
        try:
            self._instance.execute(Payload(requests, time.monotonic_ns))
        except Exception as exc:  # noqa: BLE001 - the runtime's own failure: answer, go on
            logger.exception("execute of model instance in worker %d failed", os.getpid())
            for unanswered in requests:
                sender = unanswered.sender
                if sender is not None and not sender.closed:
                    sender.send(error=InternalError(f"{type(exc).__name__}: {exc}"))
        finally:
            self._outbox.release(exec_id)

    def _finalize(self) -> None:
        self._instance.finalize()
        self._model.finalize()
        self._outbox.send_data((FINALIZED,))
