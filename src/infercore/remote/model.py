"""RemoteModel: the handle of one model on a RemoteServer, with the methods of ``Model``.

Like the in-process handle it is cheap and never stale: a name and a version (-1 for the
latest), resolved by the server on each call. Each blocking method has an a-prefixed
async twin, since every call here crosses a network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..errors import TritonError, UnsupportedError
from ..request import InferRequest, ParameterValue
from ..response import ResponseStream
from ..stats import ModelStatistics
from ..tensor import Tensor
from .convert import statistics_from_json

if TYPE_CHECKING:
    from .server import RemoteServer

__all__ = ["RemoteModel"]


class RemoteModel:
    """One model of a RemoteServer; get it with ``server.model(name, version)``."""

    __slots__ = ("_server", "name", "version")

    def __init__(self, server: RemoteServer, name: str, version: int = -1) -> None:
        self._server = server
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        return f"RemoteModel(name={self.name!r}, version={self.version})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RemoteModel) and other._server is self._server
                and other.name == self.name and other.version == self.version)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    # -- inference -------------------------------------------------------------------------
    def infer(
        self,
        inputs: Mapping[str, Any] | None = None,
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
        trace: object | None = None,
    ) -> ResponseStream:
        """Start one inference on the remote server; as ``Model.infer``.

        The request is sent at once and never blocks the caller. Its errors, including an
        unknown model or invalid inputs, arrive on the stream (raised when it is read),
        whereas the in-process API raises those at once. ``trace`` (an in-process
        per-request trace) has no remote counterpart: UnsupportedError.
        """
        if trace is not None:
            raise UnsupportedError(
                "per-request traces are in-process only; a remote server traces requests "
                "through its own trace settings")
        tensors: dict[str, Tensor] = {}
        pending: dict[str, Any] = {}
        for name, value in (inputs or {}).items():
            if isinstance(value, Tensor):
                tensors[name] = value
            elif isinstance(value, np.ndarray):
                tensors[name] = Tensor.from_numpy(value)
            elif hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
                tensors[name] = Tensor.from_dlpack(value)
            else:
                pending[name] = value  # lists and scalars take the configured datatype
        request = InferRequest(
            self.name,
            tensors,
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
        return self._server._submit(request, raise_on_error, pending)

    # Triton's API returns an async iterator from async_infer; the stream is one already.
    async_infer = infer

    # -- descriptions ----------------------------------------------------------------------
    @property
    def decoupled(self) -> bool:
        """Whether the model may send zero or several responses per request."""
        return self._server._model_info(self.name, self.version).decoupled

    @property
    def max_batch_size(self) -> int:
        return self._server._model_info(self.name, self.version).max_batch_size

    def ready(self) -> bool:
        try:
            return self._server._call(lambda t: t.model_ready(self.name, self.version))
        except TritonError:
            return False

    async def aready(self) -> bool:
        try:
            return await self._server._acall(lambda t: t.model_ready(self.name, self.version))
        except TritonError:
            return False

    def metadata(self) -> dict[str, Any]:
        """Triton's model metadata: name, versions, platform, inputs and outputs."""
        return self._server._call(lambda t: t.model_metadata(self.name, self.version))

    async def ametadata(self) -> dict[str, Any]:
        return await self._server._acall(lambda t: t.model_metadata(self.name, self.version))

    def config(self) -> dict[str, Any]:
        """The model configuration as Triton renders it in JSON."""
        return self._server._call(lambda t: t.model_config(self.name, self.version))

    async def aconfig(self) -> dict[str, Any]:
        return await self._server._acall(lambda t: t.model_config(self.name, self.version))

    def config_proto(self) -> model_config_pb2.ModelConfig:
        """The model configuration protobuf (ModelConfig)."""
        return self._server._call(lambda t: t.model_config_proto(self.name, self.version))

    def statistics(self) -> list[ModelStatistics]:
        """Statistics of this version, or of every ready version when the version is -1."""
        rows = self._server._call(lambda t: t.statistics(self.name, self.version))
        return [statistics_from_json(row) for row in rows]

    async def astatistics(self) -> list[ModelStatistics]:
        rows = await self._server._acall(lambda t: t.statistics(self.name, self.version))
        return [statistics_from_json(row) for row in rows]
