"""Model: the public handle of one model (a name and a version, -1 for the latest), one class
for an in-process ``Server`` and a ``RemoteServer``.

A handle is cheap and never stale: each call resolves the version through its server, so a
handle for the latest version follows reloads. Inference builds an InferRequest from
keyword arguments named as Triton's in-process API names them.

What a handle asks of its server is the seam ``ModelEngine``, which both servers implement;
where the two differ it is the seam's behaviour, not the handle's:
- in process, errors found on entry (unknown model, inputs that cannot be converted) raise
  at once; remotely they arrive on the stream, since the request is sent without waiting;
- per-request traces (``trace=``), request objects (``create_request``) and ``labels`` are
  in-process only: a RemoteServer raises UnsupportedError for them.

This module imports values only (the contract "handle" in .importlinter), so the remote
side can use it without the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tritonclient.grpc import model_config_pb2

from .request import InferRequest, ParameterValue
from .response import ResponseStream
from .stats import ModelStatistics

if TYPE_CHECKING:
    from .inference_request import InferenceRequest
    from .request_trace import Trace

__all__ = ["Model", "ModelEngine"]


class ModelEngine(Protocol):
    """The server side of a ``Model`` handle (``Server`` and ``RemoteServer``).

    Each method takes the handle's name and version (-1: the latest ready version). The
    a-prefixed twins are for event loops: remotely they await the network, in process
    they answer at once (nothing there blocks).
    """

    def _model_infer(self, request: InferRequest, inputs: Mapping[str, Any], *,
                     raise_on_error: bool, trace: Trace | None) -> ResponseStream:
        """Start ``request`` (its fields set, its inputs empty) with ``inputs`` converted
        to Tensors as the model's configuration says."""
        ...

    def _model_submit(self, model: Model, request: InferenceRequest,
                      raise_on_error: bool) -> ResponseStream:
        """Start a request object built with ``_model_create_request``."""
        ...

    def _model_create_request(self, model: Model, fields: Mapping[str, Any]
                              ) -> InferenceRequest: ...

    def _model_decoupled(self, name: str, version: int) -> bool: ...

    def _model_max_batch_size(self, name: str, version: int) -> int: ...

    def _model_ready(self, name: str, version: int) -> bool: ...

    async def _amodel_ready(self, name: str, version: int) -> bool: ...

    def _model_metadata(self, name: str, version: int) -> dict[str, Any]: ...

    async def _amodel_metadata(self, name: str, version: int) -> dict[str, Any]: ...

    def _model_config(self, name: str, version: int) -> dict[str, Any]: ...

    async def _amodel_config(self, name: str, version: int) -> dict[str, Any]: ...

    def _model_config_proto(self, name: str, version: int) -> model_config_pb2.ModelConfig:
        """A copy the caller may change."""
        ...

    async def _amodel_config_proto(self, name: str, version: int
                                   ) -> model_config_pb2.ModelConfig: ...

    def _model_statistics(self, name: str, version: int) -> list[ModelStatistics]: ...

    async def _amodel_statistics(self, name: str, version: int
                                 ) -> list[ModelStatistics]: ...

    def _model_labels(self, name: str, version: int, output_name: str) -> list[str]: ...


class Model:
    """One model of a running server; get it with ``server.model(name, version)``."""

    __slots__ = ("_server", "name", "version")

    def __init__(self, server: ModelEngine, name: str, version: int = -1) -> None:
        self._server = server
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        # RemoteModel (remote/model.py) keeps its own name here
        return f"{type(self).__name__}(name={self.name!r}, version={self.version})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Model) and other._server is self._server
                and other.name == self.name and other.version == self.version)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    # -- inference -------------------------------------------------------------------------
    def create_request(self, **fields: Any) -> InferenceRequest:
        """A reusable request for this model (keywords: InferenceRequest's fields).
        In process only."""
        return self._server._model_create_request(self, fields)

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
        In process, errors found on entry (unknown model, invalid inputs) raise at once;
        remotely the request is sent without waiting and they arrive on the stream.
        ``trace`` (an ``infercore.Trace``, in process only) reports this request's
        activities to the caller's callbacks (see request_trace.py).
        An ``InferenceRequest`` (positionally or as ``inference_request``) is submitted as
        it is set up; the other keywords then do not apply (see inference_request.py).
        """
        prepared = inference_request if inference_request is not None else (
            inputs if inputs is not None and not isinstance(inputs, Mapping) else None)
        if prepared is not None:
            return self._server._model_submit(self, prepared, raise_on_error)
        request = InferRequest(
            self.name,
            {},
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
        return self._server._model_infer(request, inputs or {},  # type: ignore[arg-type]
                                         raise_on_error=raise_on_error, trace=trace)

    # Triton's API returns an async iterator from async_infer; our stream is one already.
    async_infer = infer

    # -- descriptions ----------------------------------------------------------------------
    @property
    def decoupled(self) -> bool:
        """Whether the model may send zero or several responses per request."""
        return self._server._model_decoupled(self.name, self.version)

    @property
    def max_batch_size(self) -> int:
        return self._server._model_max_batch_size(self.name, self.version)

    def ready(self) -> bool:
        """Whether this version (the latest: any version) is ready; False when unknown."""
        return self._server._model_ready(self.name, self.version)

    async def aready(self) -> bool:
        return await self._server._amodel_ready(self.name, self.version)

    def metadata(self) -> dict[str, Any]:
        """Triton's model metadata: name, versions, platform, inputs and outputs."""
        return self._server._model_metadata(self.name, self.version)

    async def ametadata(self) -> dict[str, Any]:
        return await self._server._amodel_metadata(self.name, self.version)

    def config(self) -> dict[str, Any]:
        """The model configuration as Triton renders it in JSON."""
        return self._server._model_config(self.name, self.version)

    async def aconfig(self) -> dict[str, Any]:
        return await self._server._amodel_config(self.name, self.version)

    def config_proto(self) -> model_config_pb2.ModelConfig:
        """A copy of the model configuration protobuf (ModelConfig)."""
        return self._server._model_config_proto(self.name, self.version)

    async def aconfig_proto(self) -> model_config_pb2.ModelConfig:
        return await self._server._amodel_config_proto(self.name, self.version)

    def labels(self, output_name: str) -> list[str]:
        """The classification labels of an output (its config label_filename), or [].
        In process only: no protocol carries them."""
        return self._server._model_labels(self.name, self.version, output_name)

    def statistics(self) -> list[ModelStatistics]:
        """Statistics of this version, or of every ready version when the version is -1.

        Raises InvalidArgumentError when the model (or the version) is not available, with
        Triton's texts (statistics are a query, not a request for a model: not NOT_FOUND).
        """
        return self._server._model_statistics(self.name, self.version)

    async def astatistics(self) -> list[ModelStatistics]:
        return await self._server._amodel_statistics(self.name, self.version)
