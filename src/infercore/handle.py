"""Model: the public handle of one model (a name and a version, -1 for the latest).

A handle is cheap and never stale: each call resolves the version through the server, so
a handle for the latest version follows reloads. Inference builds an InferRequest from
keyword arguments named as Triton's in-process API names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError, NotFoundError, TritonError, UnavailableError
from .inference_request import InferenceRequest
from .request import InferRequest, ParameterValue
from .request_trace import Trace, bind_trace
from .response import ResponseStream
from .stats import ModelStatistics
from .tensor import tensors_from_inputs

if TYPE_CHECKING:
    from .server import Server

__all__ = ["Model"]


class Model:
    """One model of a running Server; get it with ``server.model(name, version)``."""

    __slots__ = ("_server", "name", "version")

    def __init__(self, server: Server, name: str, version: int = -1) -> None:
        self._server = server
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, version={self.version})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Model) and other._server is self._server
                and other.name == self.name and other.version == self.version)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    # -- inference -------------------------------------------------------------------------
    def create_request(self, **fields: Any) -> InferenceRequest:
        """A reusable request for this model (keywords: InferenceRequest's fields)."""
        return InferenceRequest(self, **fields)

    def infer(
        self,
        inputs: Mapping[str, Any] | InferenceRequest | None = None,
        *,
        outputs: Sequence[str] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        priority: int = 0,
        timeout: int = 0,
        parameters: Mapping[str, ParameterValue] | None = None,
        sequence_start: bool = False,
        sequence_end: bool = False,
        raise_on_error: bool = True,
        trace: Trace | None = None,
        inference_request: InferenceRequest | None = None,
    ) -> ResponseStream:
        """Start one inference; its responses arrive on the returned stream.

        ``inputs`` maps input names to numpy arrays, lists, scalars, ``Tensor`` or DLPack
        producers (lists and scalars take the configured datatype). ``outputs`` limits the
        outputs returned. ``timeout`` is in microseconds, as in Triton's API.
        The stream is iterable, async-iterable and awaitable (see ResponseStream).
        Errors found on entry (unknown model, invalid inputs) raise at once.
        ``trace`` (an ``infercore.Trace``) reports this request's activities to the
        caller's callbacks (see request_trace.py).
        An ``InferenceRequest`` (positionally or as ``inference_request``) is submitted as
        it is set up; the other keywords then do not apply (see inference_request.py).
        """
        if inference_request is not None or type(inputs) is InferenceRequest:
            return (inference_request or inputs)._submit(  # type: ignore[union-attr]
                self, raise_on_error)
        loaded = self._server._resolve(self.name, self.version)
        request = InferRequest(
            self.name,
            tensors_from_inputs(inputs or {}, loaded.config),  # type: ignore[arg-type]
            model_version=self.version,
            id=request_id,
            requested_outputs=outputs,
            parameters=parameters,
            priority=priority,
            timeout_us=timeout,
            correlation_id=correlation_id,
            sequence_start=sequence_start,
            sequence_end=sequence_end,
        )
        if trace is not None:
            bind_trace(request, trace)
        # Through the server, which hands a request that meets a reload's swap to the
        # version serving now.
        return self._server._infer_on(loaded, request, raise_on_error=raise_on_error)

    # Triton's API returns an async iterator from async_infer; our stream is one already.
    async_infer = infer

    # -- descriptions ----------------------------------------------------------------------
    @property
    def decoupled(self) -> bool:
        """Whether the model may send zero or several responses per request."""
        return self._server._resolve(self.name, self.version).context.decoupled

    @property
    def max_batch_size(self) -> int:
        return int(self._server._resolve(self.name, self.version).config.max_batch_size)

    def ready(self) -> bool:
        try:
            loaded = self._server._resolve(self.name, self.version)
        except TritonError:
            return False
        return loaded.serving  # False while every instance is down (on Ray, docs/ray.md)

    def metadata(self) -> dict[str, Any]:
        """Triton's model metadata: name, versions, platform, inputs and outputs."""
        loaded = self._server._resolve(self.name, self.version)
        # Triton lists every ready version, or only the one asked for.
        versions = ([loaded.version] if self.version >= 0
                    else self._server._manager.ready_versions(self.name))
        return loaded.metadata(versions)

    def config(self) -> dict[str, Any]:
        """The model configuration as Triton renders it in JSON."""
        from .config import model_config_to_json

        return model_config_to_json(self._server._resolve(self.name, self.version).config)

    def config_proto(self) -> model_config_pb2.ModelConfig:
        """A copy of the model configuration protobuf (ModelConfig)."""
        copy = model_config_pb2.ModelConfig()
        copy.CopyFrom(self._server._resolve(self.name, self.version).config)
        return copy

    def labels(self, output_name: str) -> list[str]:
        """The classification labels of an output (its config label_filename), or []."""
        return list(self._server._resolve(self.name, self.version).labels.get(output_name, []))

    def statistics(self) -> list[ModelStatistics]:
        """Statistics of this version, or of every ready version when the version is -1.

        Raises InvalidArgumentError when the model (or the version) is not available, with
        Triton's texts (statistics are a query, not a request for a model: not NOT_FOUND).
        """
        manager = self._server._manager
        try:
            if self.version >= 0:
                return [self._server._resolve(self.name, self.version).stats.snapshot()]
            versions = manager.ready_versions(self.name)
            if not versions:
                self._server._resolve(self.name, -1)  # raises: nothing is available
            return [manager.get(self.name, v).stats.snapshot() for v in versions]
        except (NotFoundError, UnavailableError):
            if self.version >= 0 and manager.ready_versions(self.name):
                raise InvalidArgumentError("requested model version is not available for "
                                           f"model '{self.name}'") from None
            raise InvalidArgumentError(
                f"requested model '{self.name}' is not available") from None
