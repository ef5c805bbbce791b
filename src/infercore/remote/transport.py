"""The seam between RemoteServer and a wire protocol, and where responses are delivered.

A ``Transport`` (gRPC or HTTP) is created on, and only ever used from, the RemoteServer's
event-loop thread. It speaks Triton's protocol and returns Triton's JSON forms; typed
errors (``infercore.errors``) are raised from transport statuses in ``status.py``.
Inference answers through a ``ResponseSink``, which feeds the caller's ResponseStream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tritonclient.grpc import model_config_pb2

from ..errors import TritonError
from ..request import InferRequest
from ..response import InferResponse, ResponseStream
from .wire import ModelInfo

__all__ = ["ResponseSink", "Transport"]


class ResponseSink:
    """Delivers one remote request's responses to its stream, from the loop's thread.

    The stream is the in-process ``ResponseStream``: the same iteration, awaiting,
    ``result()`` and ``cancel()`` whichever side of a network the engine is on.
    """

    __slots__ = ("_stream", "_request")

    def __init__(self, stream: ResponseStream) -> None:
        self._stream = stream
        self._request = stream.request

    @property
    def done(self) -> bool:
        return self._stream.done

    def send(self, response: InferResponse) -> None:
        """One response; ``response.final`` ends the stream."""
        wanted = self._request.requested_outputs
        if wanted is not None and any(name not in wanted for name in response.outputs):
            response.outputs = {n: t for n, t in response.outputs.items() if n in wanted}
        # ResponseStream's producer side (what ResponseSender calls): thread-safe, and a
        # no-op once the stream is done.
        self._stream._push(response, response.final)

    def close(self) -> None:
        """The final flag without a response (a decoupled model's bare end)."""
        self._stream._push(None, True)

    def fail(self, error: TritonError) -> None:
        """End the request with ``error`` (ignored if it already ended)."""
        request = self._request
        self._stream._push(InferResponse(request.model_name, request.model_version, request.id,
                                         error=error), True)


class Transport(Protocol):
    """One connection to a KServe v2 server; every method runs on the loop's thread."""

    async def live(self) -> bool: ...

    async def ready(self) -> bool: ...

    async def server_metadata(self) -> dict[str, Any]: ...

    async def model_ready(self, name: str, version: int) -> bool: ...

    async def model_metadata(self, name: str, version: int) -> dict[str, Any]: ...

    async def model_config(self, name: str, version: int) -> dict[str, Any]:
        """Triton's JSON rendering of the configuration."""
        ...

    async def model_config_proto(self, name: str, version: int
                                 ) -> model_config_pb2.ModelConfig: ...

    async def repository_index(self, ready_only: bool) -> list[dict[str, Any]]: ...

    async def load(self, name: str, config: str | None, files: Mapping[str, bytes]) -> None:
        """``files`` keys are paths inside the model folder, without the "file:" prefix."""
        ...

    async def unload(self, name: str, unload_dependents: bool) -> None: ...

    async def statistics(self, name: str, version: int) -> list[dict[str, Any]]:
        """Triton's ``model_stats`` entries."""
        ...

    async def log_settings(self, changes: Mapping[str, bool | int | str]) -> dict[str, Any]:
        """Apply ``changes`` (none: only read), as Triton's logging extension; the
        settings in force after them."""
        ...

    async def trace_settings(self, model: str, changes: Mapping[str, list[str] | None]
                             ) -> dict[str, Any]:
        """Apply ``changes`` (each setting's values; None clears it) to ``model``'s trace
        settings ("" the global ones), as Triton's trace extension; the settings in force
        after them, each a string (``trace_level`` a list of them)."""
        ...

    async def infer(self, request: InferRequest, info: ModelInfo, sink: ResponseSink) -> None:
        """Send ``request``, deliver its responses to ``sink`` and end it; raise TritonError
        for a request that fails as a whole. Cancelling the task cancels the call."""
        ...

    async def close(self) -> None: ...
