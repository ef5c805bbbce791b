"""The server's side of BLS from a worker: run its requests, send back their responses.

A process-isolated model's BLS calls (worker/bls.py) arrive as BLS_REQUEST frames on the
worker's event channel. For each, the event thread builds an ``InferRequest`` whose inputs
are views over the worker's leased block in the BLS arena (no copy; the block is released
when the last view is gone, however long the called model keeps them) and hands it to the
server's ``infer`` (the one in-thread BLS uses) in callback mode, so no thread of ours waits
on it. Each response is then copied once into a leased block of the worker's input arena
and described in a BLS_RESPONSE frame, on the thread that produced it; errors travel as
their code and text. A BLS_CANCEL frame cancels the call's stream.

When the instance is unloaded, ``abort`` answers the calls still running with an
UNAVAILABLE error, so a worker waiting on one can finish and run ``finalize``; when the
worker ends (crash, unload) ``close`` cancels what still runs. Either way the called models
see ``is_cancelled()``, queued requests are dropped, and late responses are ignored.

A CONTROL frame (the model's ``pb_utils.load_model``, ``unload_model``, ``is_model_ready``)
runs on a thread of its own against the server's ``ModelControl`` (a load takes seconds,
and the event thread must keep reading the worker's frames meanwhile); its CONTROL_REPLY
carries the error's code and text, or the value.

Threads: the worker's event thread calls ``start``, ``cancel``, ``control`` and ``close``;
the threads answering the called models' requests call ``_answer`` (the callback must not
block: it copies and writes one frame). ``_lock`` guards ``_calls`` and ``_closed``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ....errors import ErrorCode, InternalError, TritonError, UnavailableError
from ....request import NO_TRACE, InferRequest
from ....response import InferResponse, ResponseStream
from ...base import ModelControl
from ..ipc.arena import ArenaView, InputArena
from ..ipc.protocol import (
    BLS_RESPONSE,
    CONTROL_IS_READY,
    CONTROL_LOAD,
    CONTROL_REPLY,
    CONTROL_UNLOAD,
    FLAG_FINAL,
    FLAG_RESPONSE,
    read_leased,
    release_block,
    stage_leased,
)
from ..pb_utils.request import bls_entry_error

__all__ = ["BlsCalls"]

logger = logging.getLogger(__name__)

Infer = Callable[..., ResponseStream]  # Server.infer(request, *, callback=...)


class _Call:
    __slots__ = ("request", "stream")

    def __init__(self, request: InferRequest) -> None:
        self.request = request
        self.stream: ResponseStream | None = None


class BlsCalls:
    """The BLS calls of one worker that run in this process."""

    def __init__(self, instance_name: str, infer: Infer | None, requests: ArenaView,
                 responses: InputArena, send: Callable[[tuple[Any, ...]], None],
                 control: ModelControl | None = None) -> None:
        self._name = instance_name
        self._infer = infer
        self._control = control
        self._requests = requests  # the BLS arena (the worker allocates, we read)
        self._responses = responses  # the worker's input arena (we allocate, it reads)
        self._send = send
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._closed = False

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._calls)

    def start(self, frame: tuple[Any, ...]) -> None:
        """A BLS_REQUEST frame (event thread): run it on the server."""
        (_, number, model, version, request_id, correlation_id, sequence_start, sequence_end,
         timeout_us, parameters, requested, single_response, size, block, block_size,
         descriptors) = frame
        try:
            inputs = read_leased(self._requests, size, block, block_size, descriptors)
        except Exception as exc:  # noqa: BLE001 - a malformed frame fails its call only
            release_block(self._requests, size, block)
            self._fail(number, InternalError(f"BLS request inputs unreadable: {exc}"))
            return
        infer = self._infer
        if infer is None:
            self._fail(number, InternalError(
                "Unable to execute the inference request: BLS needs the model to be served "
                "by an infercore server, and none is attached to this model."))
            return
        request = InferRequest(
            model, inputs, model_version=version, id=request_id, requested_outputs=requested,
            parameters=parameters, timeout_us=timeout_us, correlation_id=correlation_id,
            sequence_start=sequence_start, sequence_end=sequence_end,
        )
        request.single_response = single_response
        request.trace = NO_TRACE  # traces do not cross the process boundary
        del inputs
        call = _Call(request)
        with self._lock:
            if self._closed:
                return
            self._calls[number] = call
        try:
            stream = infer(request, callback=lambda response, final: self._answer(
                number, response, final))
        except TritonError as exc:  # refused on entry: unknown model, bad input ...
            self._forget(number, request)
            self._fail(number, bls_entry_error(model, exc))  # in-thread's words
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not end the event thread
            logger.exception("instance %s: a BLS request failed", self._name)
            self._forget(number, request)
            self._fail(number, InternalError(f"{type(exc).__name__}: {exc}"))
            return
        with self._lock:
            running = self._calls.get(number) is call
            if running:  # cancellable from now on
                call.stream = stream
        if not running:  # finished already (a no-op then), or aborted meanwhile
            stream.cancel()

    def cancel(self, number: int) -> None:
        """A BLS_CANCEL frame (event thread)."""
        with self._lock:
            call = self._calls.get(number)
        if call is not None and call.stream is not None:
            call.stream.cancel()

    def control(self, frame: tuple[Any, ...]) -> None:
        """A CONTROL frame (event thread): run it on a thread of its own."""
        threading.Thread(target=self._run_control, args=(frame,), daemon=True,
                         name=f"infercore-{self._name}-control").start()

    def _run_control(self, frame: tuple[Any, ...]) -> None:
        _, call, operation, name, arguments = frame
        error, value = None, None
        try:
            if self._control is None:
                raise UnavailableError("model control needs the model to be served by an "
                                       "infercore server, and none is attached to this model")
            if operation == CONTROL_LOAD:
                config, files = arguments
                self._control.load(name, config, files)
            elif operation == CONTROL_UNLOAD:
                self._control.unload(name, bool(arguments))
            elif operation == CONTROL_IS_READY:
                value = self._control.is_ready(name, int(arguments))
            else:
                raise InternalError(f"unknown model control operation {operation}")
        except TritonError as exc:
            error = (int(exc.code), exc.message)
        except Exception as exc:  # noqa: BLE001 - the worker waits for a reply, whatever
            logger.exception("instance %s: a model control call failed", self._name)
            error = (int(ErrorCode.INTERNAL), f"{type(exc).__name__}: {exc}")
        try:
            self._send((CONTROL_REPLY, call, error, value))
        except Exception:  # noqa: BLE001 - the worker is gone: nobody waits
            logger.debug("instance %s: a model control reply could not be sent", self._name)

    def abort(self) -> None:
        """The instance is being unloaded: end the calls in flight with an error now."""
        with self._lock:
            calls, self._calls = self._calls, {}
        for number, call in calls.items():  # outside the lock: a cancel may answer at once
            if call.stream is not None:
                call.stream.cancel()
            self._fail(number, UnavailableError(
                f"BLS request to model '{call.request.model_name}' was cancelled: model instance "
                f"'{self._name}' is being unloaded"))

    def close(self) -> None:
        """The worker is gone (event thread): cancel what still runs; answer nothing more."""
        with self._lock:
            self._closed = True
            calls, self._calls = self._calls, {}
        for call in calls.values():
            if call.stream is not None:
                call.stream.cancel()

    def _forget(self, number: int, request: InferRequest) -> None:
        with self._lock:
            self._calls.pop(number, None)
        request.inputs = {}  # never ran: its block is free once nobody holds the arrays

    def _fail(self, number: int, error: TritonError) -> None:
        self._send((BLS_RESPONSE, number, FLAG_FINAL | FLAG_RESPONSE, None,
                    (int(error.code), error.message), 0, -1, 0, ()))

    def _answer(self, number: int, response: InferResponse | None, final: bool) -> None:
        """One response of a call, on the thread that produced it: copy it, send it."""
        with self._lock:
            call = self._calls.get(number)
            if call is None:  # aborted, or the worker is gone
                return
            if final:
                del self._calls[number]
                # The engine's request and its sender refer to each other, so the request
                # lives until the cyclic garbage collector finds it: drop its inputs now,
                # as Triton's backends release a request with its final response. Whoever
                # still holds the arrays keeps their block (the lease); else it is free.
                call.request.inputs = {}
        flags = (FLAG_FINAL if final else 0) | (FLAG_RESPONSE if response is not None else 0)
        parameters = error = None
        block, block_size = -1, 0
        descriptors: tuple[Any, ...] = ()
        if response is not None:
            parameters = response.parameters or None
            if response.error is not None:
                error = (int(response.error.code), response.error.message)
            try:
                if response.outputs:
                    block, block_size, descriptors = stage_leased(
                        self._responses, response.outputs, "output")
            except TritonError as exc:  # an output that cannot cross (a GPU tensor)
                error = (int(exc.code), exc.message)
            except (ValueError, OSError):  # the worker's memory is gone: so is the worker
                return
        try:
            self._send((BLS_RESPONSE, number, flags, parameters, error,
                        self._responses.size, block, block_size, descriptors))
        except Exception:  # noqa: BLE001 - the producer is another model: never fail it
            logger.exception("instance %s: a BLS response could not be sent", self._name)
