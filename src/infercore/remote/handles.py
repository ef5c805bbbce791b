"""RemoteHandleEngine: a RemoteServer's side of ``handle.ModelEngine``, the seam of Model
handles (a mixin of RemoteServer).

Each call crosses the network through the server's loop (``_call`` blocks for the
answer, ``_acall`` awaits it). Inference never blocks: the request is handed to the loop
and every error, an unknown model or invalid inputs included, arrives on its stream.
What has no protocol counterpart (per-request traces, request objects, labels) raises
UnsupportedError before anything is sent.

Threads: any caller's; the server's loop thread does the calls.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..errors import TritonError, UnsupportedError
from ..request import InferRequest
from ..response import ResponseStream
from ..stats import ModelStatistics
from ..tensor import Tensor
from .convert import statistics_from_json

if TYPE_CHECKING:
    from ..handle import Model
    from .transport import Transport
    from .wire import ModelInfo

__all__ = ["RemoteHandleEngine"]

T = TypeVar("T")


class RemoteHandleEngine:
    """What a ``Model`` handle of a RemoteServer asks of it."""

    def _call(self, make: Callable[[Transport], Coroutine[Any, Any, T]]) -> T:
        raise NotImplementedError

    async def _acall(self, make: Callable[[Transport], Coroutine[Any, Any, T]]) -> T:
        raise NotImplementedError

    def _submit(self, request: InferRequest, raise_on_error: bool, pending: dict[str, Any]
                ) -> ResponseStream:
        raise NotImplementedError

    def _model_info(self, name: str, version: int) -> ModelInfo:
        raise NotImplementedError

    def _model_infer(self, request: InferRequest, inputs: Mapping[str, Any], *,
                     raise_on_error: bool, trace: object | None) -> ResponseStream:
        """Send at once, never blocking the caller: every error of the request, an unknown
        model or invalid inputs included, arrives on the stream."""
        if trace is not None:
            raise UnsupportedError(
                "per-request traces are in-process only; a remote server traces requests "
                "through its own trace settings")
        pending: dict[str, Any] = {}
        for name, value in inputs.items():
            if isinstance(value, Tensor):
                request.inputs[name] = value
            elif isinstance(value, np.ndarray):
                request.inputs[name] = Tensor.from_numpy(value)
            elif hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
                request.inputs[name] = Tensor.from_dlpack(value)
            else:
                pending[name] = value  # lists and scalars take the configured datatype
        return self._submit(request, raise_on_error, pending)

    def _model_submit(self, model: Model, request: Any, raise_on_error: bool
                      ) -> ResponseStream:
        raise _in_process_only("request objects (InferenceRequest)")

    def _model_create_request(self, model: Model, fields: Mapping[str, Any]) -> Any:
        raise _in_process_only("request objects (InferenceRequest)")

    def _model_labels(self, name: str, version: int, output_name: str) -> list[str]:
        raise UnsupportedError("classification labels have no protocol counterpart: "
                               "Model.labels() is in-process only")

    def _model_decoupled(self, name: str, version: int) -> bool:
        return self._model_info(name, version).decoupled

    def _model_max_batch_size(self, name: str, version: int) -> int:
        return self._model_info(name, version).max_batch_size

    def _model_ready(self, name: str, version: int) -> bool:
        try:
            return self._call(lambda t: t.model_ready(name, version))
        except TritonError:
            return False

    async def _amodel_ready(self, name: str, version: int) -> bool:
        try:
            return await self._acall(lambda t: t.model_ready(name, version))
        except TritonError:
            return False

    def _model_metadata(self, name: str, version: int) -> dict[str, Any]:
        return self._call(lambda t: t.model_metadata(name, version))

    async def _amodel_metadata(self, name: str, version: int) -> dict[str, Any]:
        return await self._acall(lambda t: t.model_metadata(name, version))

    def _model_config(self, name: str, version: int) -> dict[str, Any]:
        return self._call(lambda t: t.model_config(name, version))

    async def _amodel_config(self, name: str, version: int) -> dict[str, Any]:
        return await self._acall(lambda t: t.model_config(name, version))

    def _model_config_proto(self, name: str, version: int) -> model_config_pb2.ModelConfig:
        return self._call(lambda t: t.model_config_proto(name, version))

    async def _amodel_config_proto(self, name: str, version: int
                                   ) -> model_config_pb2.ModelConfig:
        return await self._acall(lambda t: t.model_config_proto(name, version))

    def _model_statistics(self, name: str, version: int) -> list[ModelStatistics]:
        rows = self._call(lambda t: t.statistics(name, version))
        return [statistics_from_json(row) for row in rows]

    async def _amodel_statistics(self, name: str, version: int) -> list[ModelStatistics]:
        rows = await self._acall(lambda t: t.statistics(name, version))
        return [statistics_from_json(row) for row in rows]


def _in_process_only(what: str) -> UnsupportedError:
    return UnsupportedError(f"{what} are in-process only; a RemoteServer takes inputs "
                            "as Model.infer(inputs=...) does")
