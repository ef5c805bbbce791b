"""ModelStreamInfer: many requests on one bidirectional stream, answered as Triton does.

One ``StreamSession`` serves one stream. Its reader task takes requests off the stream and
starts each one in the engine, then one task per request turns the request's responses
into ``ModelStreamInferResponse`` messages; the handler coroutine itself is the only
writer (gRPC allows one write at a time), taking messages from a queue.

- Requests for models that are not decoupled are answered in the order they arrived
  (each one's task waits for the previous one's turn); a decoupled model's responses go
  out as they come, several per request. Every response carries the parameter
  ``triton_final_response``; a decoupled request that ends with a bare final flag gets an
  empty final response only when it set ``triton_enable_empty_final_response``.
- Errors travel in-band (``error_message``, with the request id) and the stream goes on.
  With the header ``triton_grpc_error: true`` on the stream, the first failed response
  (an error the model or the engine answered after the request started) ends the stream
  with its gRPC status instead; a request that cannot start is still answered in-band,
  as Triton's frontend does.
- The stream ends with OK once the client has half-closed and every request is answered.
  When the client cancels or goes away, every in-flight request is cancelled and every
  task of the session is awaited before the handler returns: nothing outlives the RPC.

Threads: all of it runs on the frontend's event-loop thread.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import service_pb2 as pb

from ...errors import InternalError, TritonError, UnavailableError
from ...kserve.status import as_triton_error, grpc_status
from ...response import InferResponse, ResponseStream
from ...server import Server
from ..shm import SystemSharedMemory
from ..trace_stamps import (
    GRPC_SEND_END,
    GRPC_SEND_START,
    GRPC_WAITREAD_END,
    GRPC_WAITREAD_START,
    INFER_RESPONSE_COMPLETE,
    held_trace,
    release,
)
from .core import CallContext
from .encode import encode_response
from .infer import Prepared, parse_request, prepare

if TYPE_CHECKING:
    from ...observability.trace_record import Trace

__all__ = ["StreamSession"]

_SHUTTING_DOWN = ("GRPC server is shutting down and has stopped accepting new requests.")
_END = object()  # queued when the stream has nothing more to write


class _Failure:
    """A queued error that ends the stream with its status (``triton_grpc_error`` mode)."""

    __slots__ = ("error",)

    def __init__(self, error: TritonError) -> None:
        self.error = error


class _Traced:
    """A queued message of a traced request: the writer stamps its send."""

    __slots__ = ("message", "trace")

    def __init__(self, message: pb.ModelStreamInferResponse, trace: Trace) -> None:
        self.message = message
        self.trace = trace


class _TraceDone:
    """Queued after a traced request's last message: its trace may end once written."""

    __slots__ = ("trace",)

    def __init__(self, trace: Trace) -> None:
        self.trace = trace


class StreamSession:
    """Serves one ModelStreamInfer call."""

    def __init__(self, server: Server, shm: SystemSharedMemory,
                 context: CallContext, *, accepting: Callable[[], bool],
                 forward: re.Pattern[str] | None = None) -> None:
        self._server = server
        self._shm = shm
        self._context = context
        self._accepting = accepting
        self._forward = forward
        self._metadata: tuple[Any, ...] = tuple(context.invocation_metadata() or ())
        self._grpc_errors = any(key == "triton_grpc_error" and value == "true"
                                for key, value in self._metadata)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending = 0  # requests read and not yet fully answered
        self._reading = True
        self._tail: asyncio.Future[None] | None = None  # the last ordered request's turn
        self._tracer = server.tracer

    async def run(self, requests: AsyncIterator[bytes]) -> None:
        """Serve the stream until it ends; the handler's whole body."""
        reader = asyncio.ensure_future(self._read(requests))
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    break
                if isinstance(item, _Failure):
                    await self._context.abort(grpc_status(item.error), item.error.message)
                if type(item) is _Traced:
                    item.trace.frontend_stamp(GRPC_SEND_START)
                    await self._context.write(item.message)
                    item.trace.frontend_stamp(GRPC_SEND_END)
                elif type(item) is _TraceDone:
                    item.trace.frontend_done()
                else:
                    await self._context.write(item)
        finally:
            while not self._queue.empty():  # not written: the traces waiting on them end
                left = self._queue.get_nowait()
                if type(left) is _TraceDone:
                    left.trace.frontend_done()
            reader.cancel()
            for task in list(self._tasks):
                task.cancel()  # cancelling a task cancels its engine request
            await asyncio.gather(reader, *self._tasks, return_exceptions=True)

    # -- reading -------------------------------------------------------------------------------
    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            tracer = self._tracer
            async for data in requests:
                self._pending += 1
                self._start(data, tracer.now_ns() if tracer.active else 0)
        finally:
            self._reading = False
            self._answered(0)

    def _start(self, data: bytes, read_start: int = 0) -> None:
        """Start one request (or answer its error at once); never raises. ``read_start``:
        when its message came (trace clock; 0: not traced)."""
        request_id = ""
        trace = None
        try:
            msg = parse_request(data)
            request_id = msg.id
            if not self._accepting():
                raise UnavailableError(_SHUTTING_DOWN)
            prepared = prepare(self._server, self._shm, msg, self._forward,
                               self._metadata if self._forward is not None else None)
            request = prepared.decoded.request
            if read_start:
                request.frontend_stamps = [(GRPC_WAITREAD_START, read_start),
                                           (GRPC_WAITREAD_END, self._tracer.now_ns())]
            try:
                stream = self._server.infer(request, raise_on_error=False)
            except BaseException:
                prepared.regions.release()
                if read_start:
                    release(request)  # sampled, then refused: its trace ends now
                raise
            if read_start:
                trace = held_trace(request)
        except Exception as exc:  # noqa: BLE001 - answered in-band
            error = as_triton_error(exc)
            message = pb.ModelStreamInferResponse(error_message=error.message)
            message.infer_response.id = request_id
            previous, turn = self._take_turn()
            self._spawn(self._answer_error(message, previous, turn))
            return
        if prepared.decoupled:
            self._spawn(self._answer_decoupled(stream, prepared, trace))
        else:
            previous, turn = self._take_turn()
            self._spawn(self._answer(stream, prepared, previous, turn, trace))

    def _take_turn(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        previous = self._tail
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = turn
        return previous, turn

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _answered(self, count: int = 1) -> None:
        self._pending -= count
        if not self._reading and self._pending == 0:
            self._queue.put_nowait(_END)

    # -- answering -----------------------------------------------------------------------------
    async def _answer(self, stream: ResponseStream, prepared: Prepared,
                      previous: asyncio.Future[None] | None, turn: asyncio.Future[None],
                      trace: Trace | None = None) -> None:
        """A request for a model that is not decoupled: one response, in arrival order."""
        try:
            try:
                response = await anext(stream)
            except StopAsyncIteration:
                response = InferResponse(prepared.decoded.request.model_name, -1,
                                         error=InternalError("expected a single response, got 0"))
            if trace is not None:
                trace.frontend_stamp(INFER_RESPONSE_COMPLETE)
            message, error = self._message(response, prepared, final=True)
            if previous is not None and not previous.done():
                await previous
            self._put(message, error, trace)
        finally:
            prepared.regions.release()
            if not turn.done():
                turn.set_result(None)
            if trace is not None:
                self._queue.put_nowait(_TraceDone(trace))
            self._answered()

    async def _answer_decoupled(self, stream: ResponseStream, prepared: Prepared,
                                trace: Trace | None = None) -> None:
        """A decoupled model's responses, written as they come."""
        try:
            final = False
            first = True
            async for response in stream:
                if first and trace is not None:
                    # as Triton's stream handler: stamped at the first response only
                    trace.frontend_stamp(INFER_RESPONSE_COMPLETE)
                first = False
                final = response.final
                self._put(*self._message(response, prepared, final=final), trace)
            if not final and prepared.decoded.empty_final_response:
                self._put(*self._message(None, prepared, final=True), trace)
        finally:
            prepared.regions.release()
            if trace is not None:
                self._queue.put_nowait(_TraceDone(trace))
            self._answered()

    async def _answer_error(self, message: pb.ModelStreamInferResponse,
                            previous: asyncio.Future[None] | None,
                            turn: asyncio.Future[None]) -> None:
        """A request that could not start: its error, in arrival order (in-band even with
        ``triton_grpc_error``)."""
        try:
            if previous is not None and not previous.done():
                await previous
            self._put(message, None)
        finally:
            turn.set_result(None)
            self._answered()

    def _put(self, message: pb.ModelStreamInferResponse, error: TritonError | None,
             trace: Trace | None = None) -> None:
        if error is not None and self._grpc_errors:
            self._queue.put_nowait(_Failure(error))
        elif trace is not None:
            self._queue.put_nowait(_Traced(message, trace))
        else:
            self._queue.put_nowait(message)

    def _message(self, response: InferResponse | None, prepared: Prepared, *, final: bool
                 ) -> tuple[pb.ModelStreamInferResponse, TritonError | None]:
        """The stream message for one response (None: an empty final response)."""
        message = pb.ModelStreamInferResponse()
        infer = message.infer_response
        error = response.error if response is not None else None
        if response is not None and error is None:
            try:
                encode_response(response, infer, prepared.decoded.outputs, self._shm,
                                prepared.labels_for())
            except Exception as exc:  # noqa: BLE001 - answered in-band
                error = as_triton_error(exc)
                infer.Clear()
        if response is None or error is not None:
            # As Triton: a failed or empty response still names its request.
            request = prepared.decoded.request
            infer.id = request.id
            infer.model_name = request.model_name
            version = request.model_version
            infer.model_version = str(version) if version >= 0 else ""
        if error is not None:
            message.error_message = error.message
        infer.parameters["triton_final_response"].bool_param = final
        return message, error
