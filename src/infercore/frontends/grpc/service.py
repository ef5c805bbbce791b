"""The non-inference RPCs of GRPCInferenceService, and grpc.health.v1's Check.

Health, metadata, model configuration, statistics, the model repository, system and CUDA
shared memory, trace settings and log settings, each answered as Triton's gRPC frontend
answers them (same fields, same status codes, close to the same error texts).

Threads: every method runs on the frontend's event-loop thread. All of them return at
once except RepositoryModelLoad / RepositoryModelUnload, which block while a model loads
or drains and therefore run on the frontend's repository executor. Errors become gRPC
statuses through ``kserve.grpc_status``, the project's one mapping.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from ...errors import InvalidArgumentError, UnsupportedError
from ...kserve.status import as_triton_error, grpc_status
from ...server import Server
from ...stats import Duration, ModelStatistics
from ..shm import SystemSharedMemory
from .codec import parse_version
from .core import CallContext, LoopUnary

__all__ = ["HEALTH_SERVICE", "SERVICE", "CommonService",
           "health_handlers"]

SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"

# the settings a client may change, in the order Triton applies them
_LOG_TYPES = {"log_info": "bool_param", "log_warning": "bool_param", "log_error": "bool_param",
              "log_verbose_level": "uint32_param", "log_format": "string_param"}
_TRACE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
_LOG_TYPE_NAMES = {"string_param": "string", "bool_param": "boolean", "uint32_param": "int32"}


def _rpc(method: Callable[[Any, Any], Any]) -> Callable[[Any, Any, CallContext],
                                                          Awaitable[Any]]:
    """Run ``method(self, request)`` (sync or async); its errors become gRPC statuses."""

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: CallContext) -> Any:
        try:
            result = method(self, request)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
            error = as_triton_error(exc)
            await context.abort(grpc_status(error), error.message)

    return handler


class CommonService:
    """Answers the RPCs that do not run inference."""

    def __init__(self, server: Server, shm: SystemSharedMemory, repository: Executor) -> None:
        self._server = server
        self._shm = shm
        self._repository = repository  # where blocking load / unload calls run

    def handlers(self) -> dict[str, LoopUnary]:
        """The method handlers of this service, by RPC name."""

        def unary(method: Callable[..., Any], request: Any, response: Any) -> LoopUnary:
            parse = request.FromString

            # Requests arrive as bytes and are parsed here, so that a malformed message is
            # INVALID_ARGUMENT (grpc's own deserializer would make it UNKNOWN).
            async def handler(data: bytes, context: CallContext) -> Any:
                try:
                    message = parse(data)
                except DecodeError as exc:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                        f"failed to parse the request: {exc}")
                return await method(message, context)

            return LoopUnary(handler, response.SerializeToString)

        table = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest,
                               pb.ServerMetadataResponse),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest,
                              pb.ModelMetadataResponse),
            "ModelConfig": (self.model_config, pb.ModelConfigRequest, pb.ModelConfigResponse),
            "ModelStatistics": (self.model_statistics, pb.ModelStatisticsRequest,
                                pb.ModelStatisticsResponse),
            "RepositoryIndex": (self.repository_index, pb.RepositoryIndexRequest,
                                pb.RepositoryIndexResponse),
            "RepositoryModelLoad": (self.repository_model_load, pb.RepositoryModelLoadRequest,
                                    pb.RepositoryModelLoadResponse),
            "RepositoryModelUnload": (self.repository_model_unload,
                                      pb.RepositoryModelUnloadRequest,
                                      pb.RepositoryModelUnloadResponse),
            "SystemSharedMemoryStatus": (self.system_shm_status,
                                         pb.SystemSharedMemoryStatusRequest,
                                         pb.SystemSharedMemoryStatusResponse),
            "SystemSharedMemoryRegister": (self.system_shm_register,
                                           pb.SystemSharedMemoryRegisterRequest,
                                           pb.SystemSharedMemoryRegisterResponse),
            "SystemSharedMemoryUnregister": (self.system_shm_unregister,
                                             pb.SystemSharedMemoryUnregisterRequest,
                                             pb.SystemSharedMemoryUnregisterResponse),
            "CudaSharedMemoryStatus": (self.cuda_shm_status, pb.CudaSharedMemoryStatusRequest,
                                       pb.CudaSharedMemoryStatusResponse),
            "CudaSharedMemoryRegister": (self.cuda_shm_register,
                                         pb.CudaSharedMemoryRegisterRequest,
                                         pb.CudaSharedMemoryRegisterResponse),
            "CudaSharedMemoryUnregister": (self.cuda_shm_unregister,
                                           pb.CudaSharedMemoryUnregisterRequest,
                                           pb.CudaSharedMemoryUnregisterResponse),
            "TraceSetting": (self.trace_setting, pb.TraceSettingRequest,
                             pb.TraceSettingResponse),
            "LogSettings": (self.log_settings, pb.LogSettingsRequest, pb.LogSettingsResponse),
        }
        return {name: unary(*entry) for name, entry in table.items()}

    # -- health and metadata -----------------------------------------------------------------
    @_rpc
    def server_live(self, request: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._server.live())

    @_rpc
    def server_ready(self, request: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._server.ready())

    @_rpc
    async def model_ready(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        # As Triton: an unknown model is not an error here, only not ready. Awaited: a
        # model's own readiness check (is_ready()) runs off this loop.
        version = parse_version(request.version)
        ready = await self._server.model(request.name, version).aready()
        return pb.ModelReadyResponse(ready=ready)

    @_rpc
    def server_metadata(self, request: pb.ServerMetadataRequest) -> pb.ServerMetadataResponse:
        metadata = self._server.metadata()
        return pb.ServerMetadataResponse(name=metadata["name"], version=metadata["version"],
                                         extensions=metadata["extensions"])

    @_rpc
    def model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        version = parse_version(request.version)
        metadata = self._server.model(request.name, version).metadata()
        response = pb.ModelMetadataResponse(name=metadata["name"],
                                            versions=metadata["versions"],
                                            platform=metadata["platform"])
        for key, target in (("inputs", response.inputs), ("outputs", response.outputs)):
            for tensor in metadata[key]:
                target.add(name=tensor["name"], datatype=tensor["datatype"],
                           shape=tensor["shape"])
        return response

    @_rpc
    def model_config(self, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
        version = parse_version(request.version)
        return pb.ModelConfigResponse(
            config=self._server.model(request.name, version).config_proto())

    @_rpc
    def model_statistics(self, request: pb.ModelStatisticsRequest
                         ) -> pb.ModelStatisticsResponse:
        version = parse_version(request.version)
        response = pb.ModelStatisticsResponse()
        for stats in self._server.statistics(request.name, version):
            _statistics(stats, response.model_stats.add())
        return response

    # -- model repository --------------------------------------------------------------------
    @_rpc
    def repository_index(self, request: pb.RepositoryIndexRequest
                         ) -> pb.RepositoryIndexResponse:
        _no_repository_name(request.repository_name)
        response = pb.RepositoryIndexResponse()
        for entry in self._server.repository_index(ready_only=request.ready):
            row = response.models.add(name=entry.name)
            if not entry.name_only:
                row.version = entry.version
                row.state = entry.state.value
                row.reason = entry.reason
        return response

    @_rpc
    async def repository_model_load(self, request: pb.RepositoryModelLoadRequest
                                    ) -> pb.RepositoryModelLoadResponse:
        _no_repository_name(request.repository_name)
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, param in request.parameters.items():
            kind = param.WhichOneof("parameter_choice")
            if key == "config":
                if kind != "string_param":
                    raise InvalidArgumentError(
                        f"invalid value type for load parameter '{key}', expected string_param."
                    )
                config = param.string_param
            elif key.startswith("file:"):
                if kind != "bytes_param":
                    raise InvalidArgumentError(
                        f"invalid value type for load parameter '{key}', expected bytes_param."
                    )
                files[key] = param.bytes_param
            else:
                raise InvalidArgumentError(f"unrecognized load parameter '{key}'.")
        await self._blocking(functools.partial(self._server.load, request.model_name,
                                               config=config, files=files))
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def repository_model_unload(self, request: pb.RepositoryModelUnloadRequest
                                      ) -> pb.RepositoryModelUnloadResponse:
        _no_repository_name(request.repository_name)
        dependents = request.parameters.get("unload_dependents")
        if dependents is not None and dependents.WhichOneof("parameter_choice") != "bool_param":
            raise InvalidArgumentError(
                "invalid value type for 'unload_dependents' parameter, expected bool_param."
            )
        await self._blocking(functools.partial(
            self._server.unload, request.model_name,
            unload_dependents=dependents is not None and dependents.bool_param))
        return pb.RepositoryModelUnloadResponse()

    async def _blocking(self, call: Callable[[], object]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._repository, call)

    # -- shared memory -----------------------------------------------------------------------
    @_rpc
    def system_shm_status(self, request: pb.SystemSharedMemoryStatusRequest
                          ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self._shm.status(request.name):
            name = str(region["name"])
            status = response.regions[name]
            status.name = name
            status.key = str(region["key"])
            status.offset = int(region["offset"])  # type: ignore[call-overload]
            status.byte_size = int(region["byte_size"])  # type: ignore[call-overload]
        return response

    @_rpc
    def system_shm_register(self, request: pb.SystemSharedMemoryRegisterRequest
                            ) -> pb.SystemSharedMemoryRegisterResponse:
        self._shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    def system_shm_unregister(self, request: pb.SystemSharedMemoryUnregisterRequest
                              ) -> pb.SystemSharedMemoryUnregisterResponse:
        self._shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # CUDA regions: see SystemSharedMemory.cuda_status (none on this host).
    @_rpc
    def cuda_shm_status(self, request: pb.CudaSharedMemoryStatusRequest
                        ) -> pb.CudaSharedMemoryStatusResponse:
        self._shm.cuda_status(request.name)  # lists none, or raises
        return pb.CudaSharedMemoryStatusResponse()

    @_rpc
    def cuda_shm_register(self, request: pb.CudaSharedMemoryRegisterRequest
                          ) -> pb.CudaSharedMemoryRegisterResponse:
        self._shm.cuda_register(request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    @_rpc
    def cuda_shm_unregister(self, request: pb.CudaSharedMemoryUnregisterRequest
                            ) -> pb.CudaSharedMemoryUnregisterResponse:
        self._shm.cuda_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and log settings --------------------------------------------------------------
    @_rpc
    async def trace_setting(self, request: pb.TraceSettingRequest) -> pb.TraceSettingResponse:
        model = request.model_name
        if model and not await self._server.model(model).aready():
            raise InvalidArgumentError(f"Request for unknown model : {model}")
        settings = request.settings
        # the network never chooses where a server writes (Triton's rule)
        if "trace_file" in settings:
            raise UnsupportedError(
                "trace file location can not be updated through network protocol")
        changes: dict[str, Any] = {}
        for key in _TRACE_KEYS:  # other names, trace_mode included, are ignored
            if key not in settings:
                continue
            values = list(settings[key].value)
            if not values:
                changes[key] = None  # clear: back to the global (or start-up) value
            elif key == "trace_level":
                changes[key] = values
            elif len(values) == 1:
                changes[key] = values[0]
            else:
                raise InvalidArgumentError(f"expect only 1 value for '{key}'")
        if changes:
            self._server.update_trace_settings(model, **changes)
        response = pb.TraceSettingResponse()
        for key, value in self._server.trace_settings(model).items():
            values = value if isinstance(value, list) else [value]
            response.settings[key].value.extend(str(v) for v in values)
        return response

    @_rpc
    def log_settings(self, request: pb.LogSettingsRequest) -> pb.LogSettingsResponse:
        settings = request.settings
        if "log_file" in settings:  # the network never chooses where a server writes
            raise UnsupportedError(
                "log file location can not be updated through network protocol")
        # in Triton's order, each applied as it is read: a bad one leaves those before it
        for key, expected in _LOG_TYPES.items():
            if key not in settings:
                continue  # and names Triton does not know are ignored
            setting = settings[key]
            if setting.WhichOneof("parameter_choice") != expected:
                raise InvalidArgumentError(
                    f"expect {_LOG_TYPE_NAMES[expected]} for '{key}'")
            self._server.update_log_settings(**{key: getattr(setting, expected)})
        current = self._server.log_settings()
        response = pb.LogSettingsResponse()
        for key, kind in {"log_file": "string_param", **_LOG_TYPES}.items():
            setattr(response.settings[key], kind, current[key])
        return response


def _no_repository_name(name: str) -> None:
    if name:
        raise UnsupportedError("'repository_name' specification is not supported")


def _duration(source: Duration, target: pb.StatisticDuration) -> None:
    target.count = source.count
    target.ns = source.ns


def _statistics(stats: ModelStatistics, out: pb.ModelStatistics) -> None:
    """Triton's ModelStatistics message for one model version."""
    out.name = stats.name
    out.version = str(stats.version)
    out.last_inference = stats.last_inference_ms
    out.inference_count = stats.inference_count
    out.execution_count = stats.execution_count
    inference = out.inference_stats
    for field in ("success", "fail", "queue", "compute_input", "compute_infer",
                  "compute_output", "cache_hit", "cache_miss"):
        _duration(getattr(stats, field), getattr(inference, field))
    for batch in stats.batch_stats:
        row = out.batch_stats.add(batch_size=batch.batch_size)
        _duration(batch.compute_input, row.compute_input)
        _duration(batch.compute_infer, row.compute_infer)
        _duration(batch.compute_output, row.compute_output)


# grpc.health.v1.Health/Check, which Triton also serves: HealthCheckResponse is one enum
# field (1: SERVING, 2: NOT_SERVING), so it is written as bytes rather than pulling in the
# grpcio-health-checking package for two constant messages.
_SERVING = b"\x08\x01"
_NOT_SERVING = b"\x08\x02"


def health_handlers(server: Server) -> dict[str, LoopUnary]:
    """grpc.health.v1's Check: SERVING while ``server`` is ready (whatever service is named)."""

    async def check(request: bytes, context: CallContext) -> bytes:
        return _SERVING if server.ready() else _NOT_SERVING

    return {"Check": LoopUnary(check)}
