"""Runs grpc_core's loop handlers (``LoopUnary``, ``LoopStream``) on an event loop.

grpc/core.py serves ModelInfer on its completion-queue thread; every other method is a
coroutine taking request bytes and a ``CallContext``. ``LoopBridge`` starts such a
handler as a task on the frontend's loop and gives it a ``BridgedContext``, the
``CallContext`` over one gRPC core call (``invocation_metadata``, ``abort``,
``set_compression``, ``write``).

Threads: gRPC core's completion events arrive on the queue thread, which only resolves
futures on the loop (``call_soon_threadsafe``); the handler, its reads and writes and the
final status all start from the loop. Starting a batch is thread-safe in gRPC core.

Per call: a ReceiveCloseOnServer batch watches for cancellation (client cancel, deadline,
server shutdown), which cancels the handler's task; the handler's end (return, abort,
exception, cancellation) sends the status, always, so the server counts the call ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc
from grpc._cython import cygrpc

from .core import (
    BatchGate,
    LoopHandler,
    LoopStream,
    Metadata,
    compression_metadata,
    cygrpc_status,
)

__all__ = ["BridgedContext", "CallClosedError", "LoopBridge"]

logger = logging.getLogger(__name__)

_FLAGS = 0
_OK = grpc.StatusCode.OK


class _Aborted(Exception):
    """Raised by ``BridgedContext.abort``: ends the handler with a status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class CallClosedError(Exception):
    """A write to a call that has ended (the client went away or cancelled)."""


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class BridgedContext:
    """What a loop handler may do with its call (grpc_core.CallContext)."""

    def __init__(self, call: cygrpc.Call, metadata: Metadata, gate: BatchGate,
                 loop: asyncio.AbstractEventLoop, serializer: Callable[[Any], bytes] | None
                 ) -> None:
        self._call = call
        self._gate = gate
        self._metadata = metadata
        self._loop = loop
        self._serializer = serializer
        self._compression: grpc.Compression | None = None
        self.initial_metadata_sent = False

    def invocation_metadata(self) -> Metadata:
        return self._metadata

    def set_compression(self, compression: grpc.Compression) -> None:
        self._compression = compression

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise _Aborted(code, details)

    def initial_metadata(self) -> Any:
        """The SendInitialMetadata operation, the first time only."""
        if self.initial_metadata_sent:
            return None
        self.initial_metadata_sent = True
        return cygrpc.SendInitialMetadataOperation(
            compression_metadata(self._compression), _FLAGS)

    def serialize(self, message: Any) -> bytes:
        serializer = self._serializer
        return serializer(message) if serializer is not None else message  # type: ignore[no-any-return]

    async def write(self, message: Any) -> None:
        """Send one response message of a streaming call."""
        operations = [cygrpc.SendMessageOperation(self.serialize(message), _FLAGS)]
        first = self.initial_metadata()
        if first is not None:
            operations.insert(0, first)
        if not await self._batch(tuple(operations)):
            raise CallClosedError("the call has ended")

    async def read(self) -> bytes | None:
        """The next request message; None once the client has half-closed (or left)."""
        future = self._loop.create_future()
        loop = self._loop

        def received(event: Any) -> None:
            try:
                loop.call_soon_threadsafe(_resolve, future,
                                          event.batch_operations[0].message())
            except RuntimeError:  # the loop has closed: nobody reads any more
                pass

        if not self._gate.start(self._call, (cygrpc.ReceiveMessageOperation(_FLAGS),),
                                received):
            return None  # the server has closed its queue
        return await future  # type: ignore[no-any-return]

    async def _batch(self, operations: tuple[Any, ...]) -> bool:
        future = self._loop.create_future()
        loop = self._loop

        def done(event: Any) -> None:
            try:
                loop.call_soon_threadsafe(_resolve, future, event.success)
            except RuntimeError:
                pass

        if not self._gate.start(self._call, operations, done):
            return False
        return await future  # type: ignore[no-any-return]


class _BridgedCall:
    """One call of a bridged method, from its start on the queue thread to its status."""

    def __init__(self, call: cygrpc.Call, metadata: Metadata, handler: LoopHandler,
                 ended: Callable[[Any], None], gate: BatchGate,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._call = call
        self._handler = handler
        self._ended = ended
        self._gate = gate
        self._loop = loop
        self._context = BridgedContext(call, metadata, gate, loop, handler.serialize)
        self._task: asyncio.Task[None] | None = None
        self._cancelled = False

    # queue thread
    def start(self) -> None:
        self._gate.start(self._call, (cygrpc.ReceiveCloseOnServerOperation(_FLAGS),),
                         self._closed)
        try:
            self._loop.call_soon_threadsafe(self._begin)
        except RuntimeError:  # the loop has closed (the frontend is stopping)
            self._send_status(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")

    def _closed(self, event: Any) -> None:
        if event.batch_operations[0].cancelled():
            try:
                self._loop.call_soon_threadsafe(self._cancel)
            except RuntimeError:  # the loop has closed; the task went with it
                pass

    # loop thread
    def _begin(self) -> None:
        if self._cancelled:
            self._send_status(grpc.StatusCode.CANCELLED, "cancelled")
            return
        self._task = self._loop.create_task(self._run())

    def _cancel(self) -> None:
        self._cancelled = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()

    async def _run(self) -> None:
        handler, context = self._handler, self._context
        try:
            if isinstance(handler, LoopStream):
                await handler.behavior(self._requests(), context)
                self._send_status(_OK, "")
                return
            data = await context.read()
            if data is None:
                self._send_status(grpc.StatusCode.UNIMPLEMENTED,
                                  "requires exactly one request message")
                return
            response = await handler.behavior(data, context)
            self._send_status(_OK, "", context.serialize(response))
        except _Aborted as aborted:
            self._send_status(aborted.code, aborted.details)
        except asyncio.CancelledError:
            self._send_status(grpc.StatusCode.CANCELLED, "cancelled")
        except CallClosedError:
            self._send_status(grpc.StatusCode.CANCELLED, "cancelled")
        except Exception as exc:  # noqa: BLE001 - answered as grpc.aio answers a bug
            logger.exception("gRPC: unexpected error in a method handler")
            self._send_status(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")

    async def _requests(self) -> AsyncIterator[bytes]:
        context = self._context
        while True:
            data = await context.read()
            if data is None:
                return
            yield data

    def _send_status(self, code: grpc.StatusCode, details: str,
                     message: bytes | None = None) -> None:
        """End the call (on a call that has ended already the batch just fails)."""
        operations: list[Any] = []
        first = self._context.initial_metadata()
        if first is not None:
            operations.append(first)
        if message is not None:
            operations.append(cygrpc.SendMessageOperation(message, _FLAGS))
        operations.append(cygrpc.SendStatusFromServerOperation(
            None, cygrpc_status(code), details.encode("utf-8", "replace"), _FLAGS))
        self._gate.start(self._call, tuple(operations), self._ended)


class LoopBridge:
    """Starts bridged calls on ``loop`` (grpc_core.Bridge)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def __call__(self, call: cygrpc.Call, metadata: Metadata, handler: LoopHandler,
                 ended: Callable[[Any], None], gate: BatchGate) -> None:
        _BridgedCall(call, metadata, handler, ended, gate, self._loop).start()
