"""infercore's gRPC transport: gRPC core's server driven from one thread on its
completion queue (no grpc.aio), and the handler interface every method implements.

grpc.aio hands each of a unary call's three completion events (new call, request
message, status sent) from gRPC core's poller thread to the event loop and builds
several Python objects per call: about 75 us of loop time per call here, which caps a
Python process below Triton's C++ frontend (docs/grpc.md). This server polls gRPC core's
completion queue itself, on its own thread, and handles every event where it arrives.

Handlers (``Handler``): every method is one of three kinds, all taking the request as
bytes (each service parses its own messages, so a malformed one is its own status):

- ``DirectUnary`` (ModelInfer) runs on the completion-queue thread: the handler gets the
  request bytes and answers through its ``UnaryCall``, at once (the engine ran a short
  model inline) or later from any thread (an instance thread finishing the request
  starts the send itself). No thread crossing of ours per call.
- ``LoopUnary`` and ``LoopStream`` (every other method) are coroutines run on the
  frontend's event loop by the bridge (grpc/bridge.py), with a ``CallContext``: the
  call's metadata, ``abort``, ``set_compression`` and, for streams, ``write``.

It uses grpcio's Cython layer (``grpc._cython.cygrpc``), the layer under grpc's own
synchronous server, which grpcio does not document as public: pyproject.toml pins the
grpcio releases checked, and tests/frontends/test_grpc_internals.py names what changed
if a release moves it.

Threads: one ``infercore-grpc-cq`` thread polls the queue and handles its events; handlers
may answer from any thread (gRPC core's batch start is thread-safe). The counters of calls
in flight are touched on the queue thread only.

Per call, the queue thread sees: the new call (tagged with its method's ``_Waiting``),
then each finished batch (tagged with the bound method to run). A call ends when the
batch carrying its status finishes.

Shutdown (``shutdown`` then ``cancel_all`` then ``close``): gRPC core refuses new calls,
the calls in flight finish or are cancelled (their handlers see it), the queue drains
and the thread exits. Every batch starts through the server's ``BatchGate``: gRPC core
aborts the process when a batch starts on a queue that has shut down, and an engine
request that outlives the exit timeout (a model that ignores cancellation) answers late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeAlias

import grpc
from grpc._cython import cygrpc

__all__ = ["BatchGate", "CallContext", "CoreServer", "DirectUnary", "Handler", "LoopHandler",
           "LoopStream", "LoopUnary", "UnaryCall", "cygrpc_status"]

logger = logging.getLogger(__name__)

_FLAGS = 0
_COMPRESSION_KEY = cygrpc.GRPC_COMPRESSION_REQUEST_ALGORITHM_MD_KEY
_COMPRESSION_NAMES = {grpc.Compression.Gzip: "gzip", grpc.Compression.Deflate: "deflate"}
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_OK = grpc.StatusCode.OK.value[0]

Metadata = tuple[tuple[str, Any], ...]


def cygrpc_status(code: grpc.StatusCode) -> int:
    """gRPC core's number for ``code``."""
    return int(code.value[0])


def compression_metadata(compression: grpc.Compression | None) -> Metadata | None:
    """Initial metadata asking gRPC core to compress a call's responses."""
    name = _COMPRESSION_NAMES.get(compression) if compression is not None else None
    return ((_COMPRESSION_KEY, name),) if name is not None else None


class BatchGate:
    """Starts batches on the calls of one completion queue until it shuts the queue down;
    later batches are dropped (their calls were cancelled by then). Any thread."""

    __slots__ = ("_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True

    def start(self, call: cygrpc.Call, operations: tuple[Any, ...],
              tag: Callable[[Any], None]) -> bool:
        """Start ``operations`` on ``call``; False (nothing started) once closed."""
        with self._lock:
            if self._open:
                call.start_server_batch(operations, tag)
                return True
        return False

    def shut_down(self, queue: cygrpc.CompletionQueue) -> None:
        """Shut ``queue`` down; no batch starts after this."""
        with self._lock:
            self._open = False
            queue.shutdown()


class DirectUnary:
    """A unary method handled on the completion-queue thread: ``behavior(call, data)``
    must answer ``call`` (now, or later from any thread) and must not block."""

    __slots__ = ("behavior",)

    def __init__(self, behavior: Callable[[UnaryCall, bytes], None]) -> None:
        self.behavior = behavior


class CallContext(Protocol):
    """What a loop handler may do with its call (grpc_bridge.BridgedContext)."""

    def invocation_metadata(self) -> Metadata:
        """The call's request metadata (keys lower-case)."""

    def set_compression(self, compression: grpc.Compression) -> None:
        """Compress the responses not yet sent with ``compression``."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        """End the call with ``code`` and ``details``; raises, never returns."""

    async def write(self, message: Any) -> None:
        """Send one response message of a streaming call."""


class LoopUnary:
    """A unary method run on the event loop: ``await behavior(data, context)`` returns the
    response, serialized by ``serialize`` (None: it is bytes already)."""

    __slots__ = ("behavior", "serialize")

    def __init__(self, behavior: Callable[[bytes, CallContext], Awaitable[Any]],
                 serialize: Callable[[Any], bytes] | None = None) -> None:
        self.behavior = behavior
        self.serialize = serialize


class LoopStream:
    """A bidirectional-streaming method run on the event loop: ``await behavior(requests,
    context)`` reads request bytes from ``requests`` and writes responses with
    ``context.write``, each serialized by ``serialize`` (None: bytes already)."""

    __slots__ = ("behavior", "serialize")

    def __init__(self, behavior: Callable[[AsyncIterator[bytes], CallContext],
                                          Awaitable[None]],
                 serialize: Callable[[Any], bytes] | None = None) -> None:
        self.behavior = behavior
        self.serialize = serialize


Handler: TypeAlias = DirectUnary | LoopUnary | LoopStream
LoopHandler: TypeAlias = LoopUnary | LoopStream


class UnaryCall:
    """One call of a ``DirectUnary`` method: answer it once, from any thread."""

    __slots__ = ("_call", "metadata", "_watching", "_answered", "_ended", "_gate")

    def __init__(self, call: cygrpc.Call, metadata: Metadata,
                 ended: Callable[[Any], None], gate: BatchGate) -> None:
        self._call = call
        self.metadata = metadata
        self._ended = ended  # the tag of the batch carrying the status
        self._gate = gate
        self._watching = False  # a ReceiveCloseOnServer batch is out (watch_cancel)
        self._answered = False

    def watch_cancel(self, on_cancel: Callable[[], None]) -> None:
        """Call ``on_cancel`` (on the queue thread) if the client cancels or the deadline
        passes before the answer. Call before anything may answer on another thread."""
        self._watching = True

        def closed(event: Any) -> None:
            if event.batch_operations[0].cancelled():
                on_cancel()

        self._gate.start(self._call, (cygrpc.ReceiveCloseOnServerOperation(_FLAGS),), closed)

    def reply(self, message: bytes, metadata: Metadata | None = None) -> None:
        """Send ``message`` and OK."""
        self._finish((cygrpc.SendInitialMetadataOperation(metadata, _FLAGS),
                      cygrpc.SendMessageOperation(message, _FLAGS),
                      cygrpc.SendStatusFromServerOperation(None, _OK, b"", _FLAGS)))

    def fail(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with an error status."""
        self._finish((cygrpc.SendInitialMetadataOperation(None, _FLAGS),
                      cygrpc.SendStatusFromServerOperation(
                          None, cygrpc_status(code), details.encode("utf-8", "replace"),
                          _FLAGS)))

    def _finish(self, operations: tuple[Any, ...]) -> None:
        if self._answered:  # the handler answers once; this only guards a failing bug
            return
        self._answered = True
        if not self._watching:  # one batch does it all: one completion event per answer
            operations += (cygrpc.ReceiveCloseOnServerOperation(_FLAGS),)
        self._gate.start(self._call, operations, self._ended)


class _Waiting:
    """The tag of an outstanding request for a call of one method (None: any method)."""

    __slots__ = ("method", "handler")

    def __init__(self, method: str | None, handler: Any) -> None:
        self.method = method
        self.handler = handler


# Starts a loop handler for a new call: (call, metadata, handler, the tag for the batch
# that sends its status, the gate every batch of the call starts through).
Bridge = Callable[[cygrpc.Call, Metadata, LoopHandler, Callable[[Any], None], BatchGate],
                  None]


class CoreServer:
    """gRPC core's server with one completion-queue thread; see the module doc."""

    def __init__(self, channel_args: Sequence[tuple[str, Any]],
                 handlers: Mapping[str, Handler], bridge: Bridge) -> None:
        """``handlers`` by full method name (``/package.Service/Method``); ``bridge``
        starts a loop handler on the event loop (grpc/bridge.py)."""
        self._queue = cygrpc.CompletionQueue()
        self._gate = BatchGate()
        self._server = cygrpc.Server(tuple(channel_args), False)
        self._server.register_completion_queue(self._queue)
        self._waiting = {method: _Waiting(method, handler) for method, handler in handlers.items()}
        for method in self._waiting:
            self._server.register_method(method)
        self._any_method = _Waiting(None, None)
        self._bridge = bridge
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._shutdown_done = threading.Event()
        self.active = 0  # calls without their status sent (queue thread only)

    def add_port(self, address: str, credentials: grpc.ServerCredentials | None) -> int:
        """Bind ``address``; the port bound, 0 when it could not be bound."""
        if credentials is None:
            return int(self._server.add_http2_port(address.encode()))
        return int(self._server.add_http2_port(
            address.encode(), credentials._credentials))  # grpc's own server does this

    def start(self) -> None:
        self._server.start()
        self._accepting = True
        for waiting in self._waiting.values():
            self._request(waiting)
        self._request(self._any_method)
        self._thread = threading.Thread(target=self._poll, name="infercore-grpc-cq",
                                        daemon=True)
        self._thread.start()

    def _request(self, waiting: _Waiting) -> None:
        if waiting.method is None:
            self._server.request_call(self._queue, self._queue, waiting)
        else:
            self._server.request_registered_call(self._queue, self._queue, waiting.method,
                                                 waiting)

    # -- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Refuse new calls; calls in flight go on. Idempotent."""
        if not self._accepting:
            return
        self._accepting = False
        self._server.shutdown(self._queue, self._shutdown_done)

    def cancel_all(self) -> None:
        """Cancel every call still in flight (their handlers see the cancellation)."""
        self._server.cancel_all_calls()

    def close(self, timeout: float) -> bool:
        """After ``shutdown``: wait for gRPC core to finish its calls, end the thread.
        False if that took longer than ``timeout`` seconds."""
        finished = self._shutdown_done.wait(timeout)
        self._gate.shut_down(self._queue)
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            finished = finished and not thread.is_alive()
        if finished:
            self._server.destroy()
        return finished

    # -- the completion-queue thread ------------------------------------------------------
    def _poll(self) -> None:
        queue = self._queue
        shutdown_type = cygrpc.CompletionType.queue_shutdown
        while True:
            event = queue.poll()
            if event.completion_type == shutdown_type:
                return
            tag = event.tag
            try:
                if tag is self._shutdown_done:
                    self._shutdown_done.set()
                elif type(tag) is _Waiting:
                    self._new_call(tag, event)
                else:
                    tag(event)
            except Exception:  # noqa: BLE001 - one call's failure must not end the thread
                logger.exception("gRPC: failed to handle a completion event")
            event = None  # noqa: F841 - drop the call's references before blocking again

    def _new_call(self, waiting: _Waiting, event: Any) -> None:
        if not event.success:  # the server is shutting down
            return
        if self._accepting:
            self._request(waiting)
        self.active += 1
        call = event.call
        metadata = event.invocation_metadata
        handler = waiting.handler
        if handler is None:  # a method nobody registered
            unknown = UnaryCall(call, metadata, self._call_ended, self._gate)
            unknown.fail(grpc.StatusCode.UNIMPLEMENTED, "")  # as gRPC C++ answers it
        elif type(handler) is DirectUnary:
            behavior = handler.behavior
            unary = UnaryCall(call, metadata, self._call_ended, self._gate)

            def received(received_event: Any) -> None:
                data = received_event.batch_operations[0].message()
                if data is None:  # cancelled, or the client sent no message
                    unary.fail(grpc.StatusCode.UNIMPLEMENTED,
                               "requires exactly one request message")
                    return
                try:
                    behavior(unary, data)
                except Exception as exc:  # a bug: still answer, or the call would hang
                    logger.exception("gRPC: unexpected error in a method handler")
                    unary.fail(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")

            self._gate.start(call, (cygrpc.ReceiveMessageOperation(_FLAGS),), received)
        else:
            self._bridge(call, metadata, handler, self._call_ended, self._gate)

    def _call_ended(self, event: Any) -> None:
        """The tag of every batch that sends a call's status (the bridge's too)."""
        self.active -= 1
