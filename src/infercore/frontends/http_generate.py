"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate[_stream]``.

The request is one flat JSON object. A key that names an input of the model becomes
that input: a scalar or a flat list, shaped from the model's metadata (fixed dimensions
keep their size, the innermost variable one takes the elements left, other variable ones
are 1). Any other key becomes a request parameter (string, integer, float or boolean),
and the keys of a ``"parameters"`` object are mapped the same way. The response is a
flat JSON object too: ``model_name``, ``model_version``, ``id`` when the request had one,
the response's parameters, and each output by name (one element as a scalar, more as a
flat list).

``generate`` answers one JSON object; a model that sends no response or several is an
error, with Triton's text. ``generate_stream`` answers server-sent events, ``data:
{json}\\n\\n`` per response and an error in-band as ``data: {"error": "..."}``; as in
Triton the HTTP status is that of the first response, so an error after it comes with
200, and the stream ends with the request's final flag. A request that fails before it
runs (unknown model, a body that is not a JSON object, inputs that do not convert or
validate) is answered with a plain JSON error and Triton's status. A client that goes
away cancels the request.

Runs on the frontend's event-loop thread, as a coroutine the connection starts at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np
import orjson

from ..errors import InternalError, InvalidArgumentError, TritonError
from ..generate_schema import generate_shape
from ..request import InferRequest, ParameterValue
from ..response import InferResponse, ResponseStream
from ..server import Server
from ..tensor import DataType, Tensor
from .busy_poll import BusyPoll, hold_while_a_thread_answers
from .http_decode import _from_json
from .http_encode import _json_data
from .http_messages import HttpRequest, HttpResponse, decompress, error_response
from .kserve import as_triton_error, http_status

__all__ = ["GenerateHandler", "decode_generate", "encode_generate"]

EXACTLY_ONE = ("generate expects model to produce exactly 1 response, use generate stream "
               "for model that generates various number of responses")
_EVENT_STREAM = b"text/event-stream; charset=utf-8"
_NESTED = "parameters"  # the one key whose object is mapped like the top level
_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}


class GenerateHandler:
    """Serves ``generate`` and ``generate_stream`` for one server."""

    def __init__(self, server: Server, *, max_input_size: int,
                 busy_poll: BusyPoll | None = None) -> None:
        self._server = server
        self._max_input_size = max_input_size
        self._busy_poll = busy_poll

    async def generate(self, request: HttpRequest, model: str, version: int, *,
                       stream: bool) -> HttpResponse:
        try:
            infer_request = self._decode(request, model, version)
            # consume_now: read right below, so no instance thread is woken in vain
            responses = self._server.infer(infer_request, raise_on_error=False,
                                           consume_now=True)
        except TritonError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001 - any failure becomes a 500, never a crash
            return error_response(as_triton_error(exc))
        # a thread of ours answers: the loop must leave it the GIL meanwhile
        held = hold_while_a_thread_answers(self._busy_poll, responses)
        try:
            if stream:
                return await _stream(responses)
            return await _single(responses)
        finally:
            if held is not None:
                held.release()

    def _decode(self, request: HttpRequest, model: str, version: int) -> InferRequest:
        # Triton reads the model's metadata before the body: an unknown model is a 404
        # whatever the body holds.
        metadata = self._server.model(model, version).metadata()
        inputs = {str(spec["name"]): spec for spec in metadata["inputs"]}
        body = request.body
        encoding = request.headers.get(b"content-encoding")
        if encoding is not None:
            body = decompress(body, encoding, self._max_input_size)
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"failed to parse the request JSON buffer: {exc}") from None
        if not isinstance(document, dict):
            raise InvalidArgumentError(
                "failed to parse the request JSON buffer: the request must be a JSON object")
        return decode_generate(model, version, document, inputs)


async def _single(responses: ResponseStream) -> HttpResponse:
    """``generate``: the one response, or Triton's error when there are none or several."""
    only: InferResponse | None = None
    try:
        async for response in responses:
            if only is not None:
                responses.cancel()  # several already: the rest would be thrown away
                return error_response(InternalError(EXACTLY_ONE))
            only = response
    except TritonError as exc:
        return error_response(exc)
    if only is None:
        return error_response(InternalError(EXACTLY_ONE))
    if only.error is not None:
        return error_response(only.error)
    try:
        return HttpResponse(200, (encode_generate(only),))
    except TritonError as exc:
        return error_response(exc)


async def _stream(responses: ResponseStream) -> HttpResponse:
    """``generate_stream``: the first response decides the status; the rest streams."""
    try:
        first = await responses.__anext__()
    except StopAsyncIteration:  # a decoupled model that sent only its final flag
        return HttpResponse(200, (), _EVENT_STREAM)
    event, error = _event(first)
    status = 200 if error is None else http_status(error)
    return HttpResponse(status, (event,), _EVENT_STREAM, stream=_events(responses),
                        cancel=responses.cancel)


async def _events(responses: ResponseStream) -> AsyncIterator[bytes]:
    """One server-sent event per further response, until the final flag."""
    try:
        async for response in responses:
            yield _event(response)[0]
    finally:
        # Closed early: the client went away (or the write failed); stop the model.
        responses.cancel()


def _event(response: InferResponse) -> tuple[bytes, TritonError | None]:
    """The server-sent event of one response, and its error if it is one."""
    error = response.error
    if error is None:
        try:
            return b"data: " + encode_generate(response) + b"\n\n", None
        except TritonError as exc:
            error = exc
    return b"data: " + orjson.dumps({"error": error.message}) + b"\n\n", error


# -- request and response mapping (pure functions) -----------------------------------------

def decode_generate(model: str, version: int, document: Mapping[str, Any],
                    inputs: Mapping[str, Mapping[str, Any]]) -> InferRequest:
    """The InferRequest of a generate request body; ``inputs`` is the model's metadata
    ``inputs`` by name. Raises InvalidArgumentError with Triton's texts."""
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError(
            "Unable to parse 'id': attempt to access JSON non-string as string")
    tensors: dict[str, Tensor] = {}
    parameters: dict[str, ParameterValue] = {}
    for key, value in document.items():
        if key != _NESTED:
            _map_key(key, value, inputs, tensors, parameters)
            continue
        if key in inputs:
            raise InvalidArgumentError(
                f"Keyword '{key}' for nested schema also given as input tensor name")
        if not isinstance(value, dict):
            raise InvalidArgumentError(
                f"Expected JSON object for keyword: '{key}': attempt to access JSON "
                "non-object as object")
        try:
            for name, item in value.items():
                _map_key(name, item, inputs, tensors, parameters)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"Converting keyword: '{key}': {exc.message}") from None
    return InferRequest(model, tensors, model_version=version, id=request_id,
                        parameters=parameters)


def _map_key(name: str, value: Any, inputs: Mapping[str, Mapping[str, Any]],
             tensors: dict[str, Tensor], parameters: dict[str, ParameterValue]) -> None:
    spec = inputs.get(name)
    if spec is None:
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise InvalidArgumentError(
                f"parameter '{name}' has invalid type. It should be either 'int', 'bool', "
                "or 'string'.")
        parameters[name] = value
        return
    if name in tensors:
        raise InvalidArgumentError(f"input '{name}' already exists in request")
    tensors[name] = _tensor(name, value, spec)


def _tensor(name: str, value: Any, spec: Mapping[str, Any]) -> Tensor:
    data_type = _TYPES[str(spec["datatype"])]
    items = value if isinstance(value, list) else [value]
    count = len(items)
    shape = _shape(name, [int(d) for d in spec["shape"]], count)
    array = _from_json(name, data_type, items, count)
    return Tensor(data_type, array.reshape(shape))


def _shape(name: str, dims: list[int], count: int) -> list[int]:
    shape = generate_shape(dims, count)
    if shape is None:
        raise InvalidArgumentError(
            f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


def encode_generate(response: InferResponse) -> bytes:
    """The JSON object of one successful response.

    Names are not repeated: ``id``, ``model_name`` and ``model_version`` come first, then
    response parameters, then outputs, and the first of a name wins, as in Triton.
    """
    body: dict[str, Any] = {}
    if response.request_id:
        body["id"] = response.request_id
    body["model_name"] = response.model
    body["model_version"] = str(response.model_version)
    for key, value in response.parameters.items():
        body.setdefault(key, value)
    for name, tensor in response.outputs.items():
        if name in body:
            continue
        data = _json_data(name, tensor)
        if len(data) == 1:  # one element: the value itself, not a list
            item = data[0]
            body[name] = item.item() if isinstance(item, np.generic) else item
        else:
            body[name] = data
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
