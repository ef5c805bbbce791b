"""Inside a worker: BLS, a model's calls to other models, run by the server.

As Triton's stubs do, a worker sends the requests its model builds
(``pb_utils.InferenceRequest(...).exec()``, ``async_exec``, ``exec(decoupled=True)``) to the
server, which runs them through its own ``infer`` and sends the responses back
(isolation/bls.py). ``BlsClient.infer`` is the ``infer`` of the worker's ``ModelContext``, so
pb_utils/request.py drives it exactly as it drives the server's ``infer`` in-thread:

    infer(request)   copy the inputs into a leased block of the BLS arena (the server reads
                     them there without a copy, for as long as the called model keeps
                     them), send BLS_REQUEST, return a ``ResponseStream`` at once
    BLS_RESPONSE     (reader thread) the response's outputs are views over a leased block
                     of the input arena, kept as long as the model keeps them; it goes to
                     the call's stream, where the model's thread is waiting
    cancel           cancelling the stream (``ResponseIterator.cancel()``) sends BLS_CANCEL

Several calls may be in flight at once, from any threads (``async_exec`` runs each on an
executor thread); each has a number, and responses name it. Errors come back as error
responses with their codes and texts (an unknown model, a bad input, a timeout), so
``response.has_error()`` and ``response.error().message()`` read as in-thread. A worker
whose server is gone exits (the reader thread sees EOF), so no call waits forever for it.

The model's ``pb_utils.load_model``, ``unload_model`` and ``is_model_ready`` travel the
same way: ``RemoteControl`` (the worker's ``ModelControl``) sends a CONTROL frame and waits
for its CONTROL_REPLY, which carries the server's error (code and text) or the value.

Threads: model threads call ``infer``, cancel and ``RemoteControl``'s operations; the
worker's reader thread calls ``deliver`` and ``reply``. ``_lock`` guards ``_calls`` (call
number -> the stream's sender); RemoteControl's calls wait in a ``PendingCalls``
(worker/calls.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ....errors import TritonError, error_from_code
from ....request import InferRequest
from ....response import ResponseSender, ResponseStream
from ..ipc.arena import ArenaView, InputArena
from ..ipc.protocol import (
    BLS_CANCEL,
    BLS_REQUEST,
    CONTROL,
    CONTROL_IS_READY,
    CONTROL_LOAD,
    CONTROL_UNLOAD,
    FLAG_FINAL,
    FLAG_RESPONSE,
    read_leased,
    release_block,
    stage_leased,
)
from .calls import PendingCalls

__all__ = ["BlsClient", "RemoteControl"]


class BlsClient:
    """The BLS calls of one worker."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], arena: InputArena,
                 responses: ArenaView) -> None:
        self._send = send
        self._arena = arena  # the BLS arena: this worker allocates, the server reads
        self._responses = responses  # the input arena, where the server puts outputs
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._calls: dict[int, ResponseSender] = {}

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._calls)

    def infer(self, request: InferRequest) -> ResponseStream:
        """Send ``request`` to the server; its responses arrive on the returned stream.

        Raises:
            TritonError: an input cannot cross (a GPU tensor).
        """
        stream = ResponseStream(request)
        sender = ResponseSender(request, stream, request.model_name, request.model_version)
        request.sender = sender
        block, block_size, descriptors = stage_leased(self._arena, request.inputs, "input")
        call = next(self._numbers)
        with self._lock:
            self._calls[call] = sender
        request.on_cancel(lambda: self._send((BLS_CANCEL, call)))
        self._send((
            BLS_REQUEST, call, request.model_name, request.model_version, request.id,
            request.correlation_id, request.sequence_start, request.sequence_end,
            request.timeout_us, request.parameters, request.requested_outputs,
            request.single_response, self._arena.size, block, block_size, descriptors,
        ))
        return stream

    def deliver(self, frame: tuple[Any, ...]) -> None:
        """A BLS_RESPONSE frame (on the reader thread): pass it to its call's stream."""
        _, call, flags, parameters, error, size, block, block_size, descriptors = frame
        final = bool(flags & FLAG_FINAL)
        with self._lock:
            sender = self._calls.pop(call, None) if final else self._calls.get(call)
        if sender is None:  # unknown call: nobody will read the block
            if block >= 0:
                release_block(self._responses, size, block)
            return
        outputs = read_leased(self._responses, size, block, block_size, descriptors) if (
            block >= 0) else {}
        try:
            if flags & FLAG_RESPONSE:
                sender.send(outputs, parameters=parameters, final=final,
                            error=None if error is None else error_from_code(*error))
            else:
                sender.close()
        except TritonError:  # the stream ended already (it cannot, but never kill the reader)
            pass


class RemoteControl:
    """The worker's ``ModelControl``: each operation runs in the server."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._calls = PendingCalls(send)

    def load(self, name: str, config: str, files: Mapping[str, bytes]) -> None:
        self._call(CONTROL_LOAD, name, (config, dict(files)))

    def unload(self, name: str, unload_dependents: bool) -> None:
        self._call(CONTROL_UNLOAD, name, unload_dependents)

    def is_ready(self, name: str, version: int) -> bool:
        return bool(self._call(CONTROL_IS_READY, name, version))

    def _call(self, operation: int, name: str, arguments: Any) -> Any:
        """Run one operation in the server; raises the server's error."""
        return self._calls.call(CONTROL, operation, name, arguments)

    def reply(self, frame: tuple[Any, ...]) -> None:
        """A CONTROL_REPLY frame (on the reader thread): wake its caller."""
        self._calls.reply(frame)
