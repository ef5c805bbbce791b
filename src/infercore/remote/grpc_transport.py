"""KServe v2 over gRPC: tritonclient's GRPCInferenceService stubs on a grpc.aio channel.

Requests are built and responses read here rather than through tritonclient's
InferInput/InferResult, so tensors keep infercore's datatypes exactly (BF16 through
ml_dtypes, BYTES as bytes objects) whatever tritonclient version is installed.

- A model that is not decoupled gets one unary ModelInfer call; cancelling its task
  cancels the call, which cancels the request in the server.
- A decoupled model's request opens its own ModelStreamInfer call with the parameter
  ``triton_enable_empty_final_response`` (so the final flag always arrives); the client
  half-closes after its one request and reads until the server ends the call. Errors
  travel in-band there, as a message without a code: they become UnknownError. (The
  header ``triton_grpc_error: true`` would bring the code, but ends the call at the
  first error, and Triton 2.51 crashes when a decoupled model then sends more.)

Threads: created and used on the RemoteServer's loop thread only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from ..config import model_config_to_json
from ..errors import InvalidArgumentError, UnsupportedError
from ..kserve.params import from_infer_parameter, to_infer_parameter
from ..kserve.status import error_from_grpc
from ..kserve.tensors import CONTENTS_FIELD
from ..request import InferRequest, ParameterValue
from ..response import InferResponse
from ..tensor import DataType, Tensor
from .transport import ResponseSink
from .wire import (
    ModelInfo,
    check_parameters,
    tensor_from_buffer,
    tensor_from_values,
    tensor_to_bytes,
)

__all__ = ["GrpcTransport"]

# tritonclient's limits: messages up to 2 GiB - 1 each way
_MAX_MESSAGE = 2**31 - 1
_FINAL = "triton_final_response"


class GrpcTransport:
    """One gRPC channel to a KServe v2 server."""

    def __init__(self, url: str, *, credentials: grpc.ChannelCredentials | None = None,
                 headers: Mapping[str, str] | None = None,
                 channel_options: Sequence[tuple[str, Any]] = ()) -> None:
        options = [("grpc.max_send_message_length", _MAX_MESSAGE),
                   ("grpc.max_receive_message_length", _MAX_MESSAGE), *channel_options]
        self._channel = (grpc.aio.insecure_channel(url, options=options) if credentials is None
                         else grpc.aio.secure_channel(url, credentials, options=options))
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._metadata = tuple((key.lower(), value) for key, value in (headers or {}).items())

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_grpc(exc.code(), exc.details() or str(exc.code())) from None

    # -- health and descriptions -----------------------------------------------------------
    async def live(self) -> bool:
        reply = await self._unary(self._stub.ServerLive, service_pb2.ServerLiveRequest())
        return bool(reply.live)

    async def ready(self) -> bool:
        reply = await self._unary(self._stub.ServerReady, service_pb2.ServerReadyRequest())
        return bool(reply.ready)

    async def server_metadata(self) -> dict[str, Any]:
        reply = await self._unary(self._stub.ServerMetadata,
                                  service_pb2.ServerMetadataRequest())
        return {"name": reply.name, "version": reply.version,
                "extensions": list(reply.extensions)}

    async def model_ready(self, name: str, version: int) -> bool:
        reply = await self._unary(self._stub.ModelReady, service_pb2.ModelReadyRequest(
            name=name, version=_version(version)))
        return bool(reply.ready)

    async def model_metadata(self, name: str, version: int) -> dict[str, Any]:
        reply = await self._unary(self._stub.ModelMetadata, service_pb2.ModelMetadataRequest(
            name=name, version=_version(version)))

        def tensors(items: Any) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]}
                    for t in items]

        return {"name": reply.name, "versions": list(reply.versions),
                "platform": reply.platform, "inputs": tensors(reply.inputs),
                "outputs": tensors(reply.outputs)}

    async def model_config_proto(self, name: str, version: int
                                 ) -> model_config_pb2.ModelConfig:
        reply = await self._unary(self._stub.ModelConfig, service_pb2.ModelConfigRequest(
            name=name, version=_version(version)))
        return reply.config

    async def model_config(self, name: str, version: int) -> dict[str, Any]:
        return model_config_to_json(await self.model_config_proto(name, version))

    async def statistics(self, name: str, version: int) -> list[dict[str, Any]]:
        reply = await self._unary(self._stub.ModelStatistics,
                                  service_pb2.ModelStatisticsRequest(
                                      name=name, version=_version(version)))
        return [json_format.MessageToDict(stats, preserving_proto_field_name=True)
                for stats in reply.model_stats]

    # -- repository ------------------------------------------------------------------------
    async def repository_index(self, ready_only: bool) -> list[dict[str, Any]]:
        reply = await self._unary(self._stub.RepositoryIndex,
                                  service_pb2.RepositoryIndexRequest(ready=ready_only))
        return [{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
                for m in reply.models]

    async def load(self, name: str, config: str | None, files: Mapping[str, bytes]) -> None:
        request = service_pb2.RepositoryModelLoadRequest(model_name=name)
        if config is not None:
            request.parameters["config"].string_param = config
        for path, content in files.items():
            request.parameters["file:" + path].bytes_param = content
        await self._unary(self._stub.RepositoryModelLoad, request)

    async def unload(self, name: str, unload_dependents: bool) -> None:
        request = service_pb2.RepositoryModelUnloadRequest(model_name=name)
        request.parameters["unload_dependents"].bool_param = unload_dependents
        await self._unary(self._stub.RepositoryModelUnload, request)

    # -- log and trace settings ------------------------------------------------------------
    async def log_settings(self, changes: Mapping[str, bool | int | str]) -> dict[str, Any]:
        request = service_pb2.LogSettingsRequest()
        for key, value in changes.items():
            setting = request.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        reply = await self._unary(self._stub.LogSettings, request)
        return {key: getattr(value, value.WhichOneof("parameter_choice"))
                for key, value in reply.settings.items()
                if value.WhichOneof("parameter_choice") is not None}

    async def trace_settings(self, model: str, changes: Mapping[str, list[str] | None]
                             ) -> dict[str, Any]:
        request = service_pb2.TraceSettingRequest(model_name=model)
        for key, values in changes.items():
            request.settings[key].value.extend(values or ())  # no values: clear it
        reply = await self._unary(self._stub.TraceSetting, request)
        # As the HTTP form: trace_level a list, each other setting its one (last) value
        return {key: list(value.value) if key == "trace_level"
                else (value.value[-1] if value.value else "")
                for key, value in reply.settings.items()}

    # -- inference -------------------------------------------------------------------------
    async def infer(self, request: InferRequest, info: ModelInfo, sink: ResponseSink) -> None:
        message = encode_request(request)
        if info.decoupled:
            await self._stream(message, sink)
            return
        reply = await self._unary(self._stub.ModelInfer, message)
        sink.send(decode_response(reply, final=True))

    async def _stream(self, message: service_pb2.ModelInferRequest, sink: ResponseSink
                      ) -> None:
        message.parameters["triton_enable_empty_final_response"].bool_param = True
        call = self._stub.ModelStreamInfer(iter((message,)), metadata=self._metadata)
        try:
            async for reply in call:
                response = reply.infer_response
                final = _FINAL in response.parameters and response.parameters[_FINAL].bool_param
                if reply.error_message:
                    sink.send(InferResponse(
                        response.model_name or message.model_name, _response_version(response),
                        response.id or message.id,
                        error=error_from_grpc(None, reply.error_message), final=final))
                    continue
                if final and not response.outputs:
                    sink.close()
                else:
                    sink.send(decode_response(response, final=final))
        except grpc.aio.AioRpcError as exc:
            raise error_from_grpc(exc.code(), exc.details() or str(exc.code())) from None
        finally:
            if not call.done():
                call.cancel()  # the caller went away: the server cancels the request
        sink.close()  # ended without a final flag (an older server): the end is the flag

    async def close(self) -> None:
        await self._channel.close()


def _version(version: int) -> str:
    return str(version) if version >= 0 else ""


# -- messages --------------------------------------------------------------------------------

def encode_request(request: InferRequest) -> service_pb2.ModelInferRequest:
    """The ModelInferRequest of ``request``: raw tensor contents, Triton's parameters."""
    message = service_pb2.ModelInferRequest(
        model_name=request.model_name, model_version=_version(request.model_version),
        id=request.id)
    raw = message.raw_input_contents
    for name, tensor in request.inputs.items():
        spec = message.inputs.add()
        spec.name = name
        spec.datatype = tensor.data_type.value
        spec.shape.extend(tensor.shape)
        raw.append(tensor_to_bytes(name, tensor))
    if request.requested_outputs is not None:
        for name in request.requested_outputs:
            message.outputs.add().name = name
    parameters = message.parameters
    correlation_id = request.correlation_id
    if isinstance(correlation_id, str):
        if correlation_id:
            parameters["sequence_id"].string_param = correlation_id
    elif correlation_id:
        parameters["sequence_id"].int64_param = correlation_id
    if request.sequence_start:
        parameters["sequence_start"].bool_param = True
    if request.sequence_end:
        parameters["sequence_end"].bool_param = True
    if request.priority:
        parameters["priority"].uint64_param = request.priority
    if request.timeout_us:
        parameters["timeout"].int64_param = request.timeout_us
    if request.parameters:
        check_parameters(request.parameters)
        for key, value in request.parameters.items():
            to_infer_parameter(value, parameters[key])
    return message


def decode_response(message: service_pb2.ModelInferResponse, *, final: bool) -> InferResponse:
    """An InferResponse of infercore Tensors from a ModelInferResponse."""
    outputs: dict[str, Tensor] = {}
    raw = message.raw_output_contents
    for index, output in enumerate(message.outputs):
        try:
            data_type = DataType.from_wire(output.datatype)
        except InvalidArgumentError:
            raise UnsupportedError(
                f"output '{output.name}' has datatype '{output.datatype}', which infercore "
                "does not know") from None
        shape = [int(d) for d in output.shape]
        if index < len(raw):
            outputs[output.name] = tensor_from_buffer(output.name, data_type, shape, raw[index])
        else:
            outputs[output.name] = _from_contents(output.name, data_type, shape,
                                                  output.contents)
    parameters: dict[str, ParameterValue] = {}
    for key, parameter in message.parameters.items():
        if key != _FINAL:
            parameters[key] = from_infer_parameter(parameter)
    return InferResponse(message.model_name, _response_version(message), message.id,
                         outputs, parameters, None, final)


def _response_version(message: service_pb2.ModelInferResponse) -> int:
    return int(message.model_version) if message.model_version else -1


def _from_contents(name: str, data_type: DataType, shape: list[int],
                   contents: service_pb2.InferTensorContents) -> Tensor:
    """An output sent in the typed ``contents`` fields (servers that do not send raw)."""
    field = CONTENTS_FIELD.get(data_type)
    if field is None:
        raise UnsupportedError(f"output '{name}' of datatype {data_type} came without raw "
                               "contents")
    return tensor_from_values(name, data_type, shape, list(getattr(contents, field)))

