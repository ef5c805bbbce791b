"""HandleEngine: the in-process side of ``handle.ModelEngine``, the seam of Model handles.

``Server`` inherits it: each method resolves the handle's version through the server
(``_resolve``: the repository manager's serving version) and answers from the loaded
model. Nothing here blocks, so the async twins answer at once. Errors found on entry
(unknown model, inputs that cannot be converted) raise at once, as Triton's in-process
API raises them.

Threads: any caller's; the repository manager and the loaded models guard their state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError, NotFoundError, TritonError, UnavailableError
from .inference_request import InferenceRequest
from .request import InferRequest
from .request_trace import Trace, bind_trace
from .response import InferResponse, ResponseStream
from .stats import ModelStatistics
from .tensor import tensors_from_inputs

if TYPE_CHECKING:
    from .caller import Caller
    from .handle import Model
    from .model import LoadedModel
    from .repository.manager import RepositoryManager

__all__ = ["HandleEngine"]


class HandleEngine:
    """What a ``Model`` handle of an in-process server asks of it (a mixin of Server)."""

    _manager: RepositoryManager

    def _resolve(self, name: str, version: int) -> LoadedModel:
        raise NotImplementedError

    def _require_initialized(self) -> None:
        raise NotImplementedError

    def _infer_on(self, loaded: LoadedModel, request: InferRequest, *,
                  raise_on_error: bool = True,
                  callback: Callable[[InferResponse | None, bool], None] | None = None,
                  caller: Caller | None = None) -> ResponseStream:
        raise NotImplementedError

    def _model_infer(self, request: InferRequest, inputs: Mapping[str, Any], *,
                     raise_on_error: bool, trace: Trace | None) -> ResponseStream:
        loaded = self._resolve(request.model_name, request.model_version)
        request.inputs = tensors_from_inputs(inputs, loaded.config)
        if trace is not None:
            bind_trace(request, trace)
        # Through _infer_on, which hands a request that meets a reload's swap to the
        # version serving now.
        return self._infer_on(loaded, request, raise_on_error=raise_on_error)

    def _model_submit(self, model: Model, request: InferenceRequest,
                      raise_on_error: bool) -> ResponseStream:
        if not isinstance(request, InferenceRequest):
            raise InvalidArgumentError(
                "inputs must map input names to values, or be an InferenceRequest; got "
                f"{type(request).__name__}")
        return request._submit(self, model, raise_on_error)

    def _model_create_request(self, model: Model, fields: Mapping[str, Any]
                              ) -> InferenceRequest:
        return InferenceRequest(model, **fields)

    def _model_decoupled(self, name: str, version: int) -> bool:
        return self._resolve(name, version).context.decoupled

    def _model_max_batch_size(self, name: str, version: int) -> int:
        return int(self._resolve(name, version).config.max_batch_size)

    def _model_ready(self, name: str, version: int) -> bool:
        self._require_initialized()  # "Server not ready" answers, it is not a False
        try:
            loaded = self._resolve(name, version)
        except TritonError:
            return False
        # not serving while every instance is down (on Ray, docs/ray.md); then the
        # model's own answer (a Python model's is_ready(), bounded by its backend)
        return loaded.serving and loaded.check_ready()

    async def _amodel_ready(self, name: str, version: int) -> bool:
        self._require_initialized()  # as _model_ready's
        try:
            loaded = self._resolve(name, version)
        except TritonError:
            return False
        if not loaded.serving:
            return False
        if not loaded.checks_readiness:
            return True
        # the model's check blocks (as long as its backend's bound): off the caller's loop
        return await asyncio.to_thread(loaded.check_ready)

    def _model_metadata(self, name: str, version: int) -> dict[str, Any]:
        loaded = self._resolve(name, version)
        # Triton lists every ready version, or only the one asked for.
        versions = [loaded.version] if version >= 0 else self._manager.ready_versions(name)
        return loaded.metadata(versions)

    async def _amodel_metadata(self, name: str, version: int) -> dict[str, Any]:
        return self._model_metadata(name, version)

    def _model_config(self, name: str, version: int) -> dict[str, Any]:
        from .config import model_config_to_json

        return model_config_to_json(self._resolve(name, version).config)

    async def _amodel_config(self, name: str, version: int) -> dict[str, Any]:
        return self._model_config(name, version)

    def _model_config_proto(self, name: str, version: int) -> model_config_pb2.ModelConfig:
        copy = model_config_pb2.ModelConfig()
        copy.CopyFrom(self._resolve(name, version).config)
        return copy

    async def _amodel_config_proto(self, name: str, version: int
                                   ) -> model_config_pb2.ModelConfig:
        return self._model_config_proto(name, version)

    def _model_labels(self, name: str, version: int, output_name: str) -> list[str]:
        return list(self._resolve(name, version).labels.get(output_name, []))

    def _model_statistics(self, name: str, version: int) -> list[ModelStatistics]:
        self._require_initialized()  # before the refusals below turn it into another
        manager = self._manager
        try:
            if version >= 0:
                return [self._resolve(name, version).stats.snapshot()]
            versions = manager.ready_versions(name)
            if not versions:
                self._resolve(name, -1)  # raises: nothing is available
            return [manager.get(name, v).stats.snapshot() for v in versions]
        except (NotFoundError, UnavailableError):
            if version >= 0 and manager.ready_versions(name):
                raise InvalidArgumentError("requested model version is not available for "
                                           f"model '{name}'") from None
            raise InvalidArgumentError(
                f"requested model '{name}' is not available") from None

    async def _amodel_statistics(self, name: str, version: int) -> list[ModelStatistics]:
        return self._model_statistics(name, version)
