"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate[_stream]``.

The request is one flat JSON object, read as Triton reads it (``http_json``: duplicate
keys kept, each looked up by its first value). ``"id"`` is the request id. A key that
names an input of the model becomes that input: a scalar or a list, shaped from the
model's metadata (fixed dimensions keep their size, the innermost variable one takes the
elements left, other variable ones are 1), its elements checked one by one with Triton's
texts. Any other key becomes a request parameter (string, integer, boolean or double),
and the keys of a ``"parameters"`` object are mapped the same way. The response is a
flat JSON object too, its keys in byte order as Triton's std::map leaves them:
``model_name``, ``model_version``, ``id`` when the request had one, the response's
parameters, and each output by name (one element as a scalar, more as a list); the
first of a name wins.

Errors before inference carry the status of their code, as Triton's HandleGenerate
answers them: what Triton's JSON reader refuses is INTERNAL (500), a value the schema
cannot shape is INVALID_ARG (400). Once the request runs, Triton has started a chunked
reply with the status of the first response: 200, or 400 when it is an error.
``generate`` then waits for the final flag and answers the one response, or, when the
model sent none or several (a decoupled model), Triton's error text "generate expects
model to produce exactly 1 response ..." with that status. ``generate_stream`` answers
server-sent events, ``data: {json}\\n\\n`` per response and an error in-band as ``data:
{"error": "..."}``, until the final flag. A client that goes away cancels the request.

Runs on the frontend's event-loop thread, as a coroutine the connection starts at once.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np
import orjson

from ...caller import Caller
from ...errors import InternalError, InvalidArgumentError, TritonError
from ...generate_schema import generate_shape
from ...kserve.status import as_triton_error
from ...request import InferRequest, ParameterValue
from ...response import InferResponse, ResponseStream
from ...server import Server
from ...tensor import DataType, Tensor
from .busy_poll import BusyPoll, hold_while_a_thread_answers
from .json import JsonObject, json_double, json_string, parse_json, utf8
from .messages import HttpRequest, HttpResponse, error_response

__all__ = ["GenerateHandler", "decode_generate", "encode_generate"]

EXACTLY_ONE = ("generate expects model to produce exactly 1 response, use generate stream "
               "for model that generates various number of responses")
_EVENT_STREAM = b"text/event-stream; charset=utf-8"
_NESTED = "parameters"  # the one key whose object is mapped like the top level
_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_ABSENT: Any = object()
_AFTER_FIRST_ERROR = 400  # Triton's status for a reply whose first response is an error
_ODD_CONTROL = re.compile("[\x00-\x07\x0b\x0e-\x1f]")  # rapidjson: \u00XX, upper case
_BAD_TYPE = "parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'."
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"
# TritonJson's texts for a value of the wrong JSON type
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_NOT_STRING = "attempt to access JSON non-string as string"


class GenerateHandler:
    """Serves ``generate`` and ``generate_stream`` for one server."""

    def __init__(self, server: Server, *, busy_poll: BusyPoll | None = None,
                 caller: Caller = Caller.LOOP) -> None:
        self._server = server
        self._caller = caller  # the loop's: requests started on it (dispatch.py)
        self._busy_poll = busy_poll

    async def generate(self, request: HttpRequest, model: str, version: int, *,
                       stream: bool) -> HttpResponse:
        try:
            infer_request = self._decode(request, model, version)
            # caller: read right below, so no instance thread is woken in vain
            responses = self._server.infer(infer_request, raise_on_error=False,
                                           caller=self._caller)
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
        encoding = request.headers.get(b"content-encoding")
        if encoding is not None and encoding != b"identity":
            raise InvalidArgumentError(
                "Unsupported content-encoding, only 'identity' is supported.")
        return decode_generate(model, version, parse_json(request.body), inputs)


async def _nothing() -> AsyncIterator[bytes]:
    """No further body: the reply is chunked all the same, as Triton's is."""
    return
    yield  # pragma: no cover - makes this an async generator


async def _single(responses: ResponseStream) -> HttpResponse:
    """``generate``: the one response, or Triton's error when there are none or several;
    the status is the first response's, as Triton has sent it by then."""
    first: bytes | None = None
    status = 200
    count = 0
    try:
        async for response in responses:
            if count == 0:  # the others are only counted
                first, error = _body(response)
                status = 200 if error is None else _AFTER_FIRST_ERROR
            count += 1
    except TritonError as exc:  # the request ended without its final flag
        if count == 0:
            status = _AFTER_FIRST_ERROR
            first = orjson.dumps({"error": exc.message})
        count += 1
    if count != 1 or first is None:
        first = orjson.dumps({"error": EXACTLY_ONE})
    return HttpResponse(status, (first,), stream=_nothing())


async def _stream(responses: ResponseStream) -> HttpResponse:
    """``generate_stream``: the first response decides the status; the rest streams."""
    try:
        first = await responses.__anext__()
    except StopAsyncIteration:  # a decoupled model that sent only its final flag
        return HttpResponse(200, (), _EVENT_STREAM, stream=_nothing())
    except TritonError as exc:
        return HttpResponse(_AFTER_FIRST_ERROR, (_event(orjson.dumps({"error": exc.message})),),
                            _EVENT_STREAM, stream=_nothing())
    body, error = _body(first)
    status = 200 if error is None else _AFTER_FIRST_ERROR
    return HttpResponse(status, (_event(body),), _EVENT_STREAM, stream=_events(responses),
                        cancel=responses.cancel)


async def _events(responses: ResponseStream) -> AsyncIterator[bytes]:
    """One server-sent event per further response, until the final flag."""
    try:
        async for response in responses:
            yield _event(_body(response)[0])
    except TritonError as exc:  # the request ended without its final flag
        yield _event(orjson.dumps({"error": exc.message}))
    finally:
        # Closed early: the client went away (or the write failed); stop the model.
        responses.cancel()


def _event(body: bytes) -> bytes:
    return b"data: " + body + b"\n\n"


def _body(response: InferResponse) -> tuple[bytes, TritonError | None]:
    """The JSON object of one response, or of its error (and the error)."""
    error = response.error
    if error is None:
        try:
            return encode_generate(response), None
        except TritonError as exc:
            error = exc
        except orjson.JSONEncodeError as exc:  # e.g. an id that is not UTF-8
            error = InternalError(f"failed to write the response as JSON: {exc}")
    return orjson.dumps({"error": error.message}), error


# -- request and response mapping (pure functions) -----------------------------------------

def decode_generate(model: str, version: int, document: Any,
                    inputs: Mapping[str, Mapping[str, Any]]) -> InferRequest:
    """The InferRequest of a generate request body (as ``http_json.parse_json`` read
    it); ``inputs`` is the model's metadata ``inputs`` by name. Raises with Triton's
    texts and codes, in the order Triton's HandleGenerate meets them."""
    request_id = ""
    if isinstance(document, JsonObject):
        given = document.first("id", _ABSENT)
        if given is not _ABSENT:
            if not isinstance(given, str):
                raise InternalError(f"Unable to parse 'id': {_NOT_STRING}")
            request_id = given
    else:
        raise InternalError("attempt to get members for non-object")
    mapping = _Mapping(model, request_id, inputs)
    for key, _ in document.members:
        if key != _NESTED:
            mapping.add(key, document.first(key))
            continue
        if key in inputs:
            raise InvalidArgumentError(
                f"Keyword '{key}' for nested schema also given as input tensor name")
        nested = document.first(key)
        if not isinstance(nested, JsonObject):
            raise InternalError(f"Expected JSON object for keyword: '{key}': attempt to "
                                "access JSON non-object as object")
        try:
            for name, _ in nested.members:
                mapping.add(name, nested.first(name))
        except TritonError as exc:
            raise type(exc)(f"Converting keyword: '{key}': {exc.message}") from None
    mapping.check_strings()
    return InferRequest(model, mapping.tensors, model_version=version, id=request_id,
                        parameters=mapping.parameters)


class _Mapping:
    """The inputs and parameters of one request as its keys are mapped."""

    def __init__(self, model: str, request_id: str,
                 inputs: Mapping[str, Mapping[str, Any]]) -> None:
        self.model = model
        # Triton core's errors name the request: "[request id: <id_unknown>] ..."
        self.prefix = f"[request id: {request_id or '<id_unknown>'}] "
        self.inputs = inputs
        self.tensors: dict[str, Tensor] = {}
        self.parameters: dict[str, ParameterValue] = {}
        self.strings: list[tuple[str, int, int]] = []  # BYTES inputs: name, given, shaped

    def add(self, name: str, value: Any) -> None:
        spec = self.inputs.get(name)
        if spec is None:
            self.parameters[name] = _parameter(name, value)
            return
        data_type = _TYPES[str(spec["datatype"])]
        count = len(value) if type(value) is list else 1
        strings = _strings(value) if data_type is DataType.BYTES else None
        shape = generate_shape([int(d) for d in spec["shape"]], count)
        if shape is None:
            raise InvalidArgumentError(
                f"The schema can not convert input '{name}' to tensor with proper shape")
        if data_type in (DataType.FP16, DataType.BF16):
            raise InvalidArgumentError(
                f"receiving {data_type.value} data via JSON is not supported. Please use "
                f"the binary data format for input {name}")
        if strings is not None:
            elements = int(np.prod(shape))
            if len(strings) != elements:  # Triton core refuses it once the request runs
                self.strings.append((name, len(strings), elements))
                shape = [len(strings)]
            array = np.empty(len(strings), dtype=np.object_)
            array[:] = strings
        else:
            array = _numbers(data_type, value, count)
        if name in self.tensors:
            raise InvalidArgumentError(f"{self.prefix}input '{name}' already exists in request")
        self.tensors[name] = Tensor(data_type, array.reshape(shape))

    def check_strings(self) -> None:
        if self.strings:
            name, given, elements = self.strings[0]
            raise InvalidArgumentError(
                f"{self.prefix}unexpected number of string elements {given} for inference "
                f"input '{name}' for model '{self.model}', expecting {elements}")


def _parameter(name: str, value: Any) -> ParameterValue:
    """A request parameter, typed as Triton's SetTritonParameterFromJsonParameter does."""
    kind = type(value)
    if kind is str or kind is bool or kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return value if value <= _INT64_MAX else float(value)  # beyond int64: a double
    raise InvalidArgumentError(_BAD_TYPE.format(name))


def _leaves(value: Any) -> list[Any]:
    """The scalars of a value, nested lists walked depth first."""
    if type(value) is not list:
        return [value]
    if not any(type(item) is list for item in value):
        return value
    flat: list[Any] = []
    stack = [iter(value)]
    while stack:
        for item in stack[-1]:
            if type(item) is list:
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _strings(value: Any) -> list[bytes]:
    """A BYTES input's elements; any nesting is accepted, as Triton counts bytes only."""
    leaves = _leaves(value)
    if not all(type(item) is str for item in leaves):
        raise InternalError(f"Unable to parse JSON bytes array: {_NOT_STRING}")
    return [utf8(item) for item in leaves]


def _numbers(data_type: DataType, value: Any, count: int) -> np.ndarray:
    """A numeric input's ``count`` elements, each checked as Triton's ReadDataFromJson
    does (the first bad one decides the error); out-of-range integers wrap, as in C."""
    leaves = _leaves(value)
    kind = data_type.numpy_dtype.kind
    wide: type[np.generic]
    if data_type is DataType.BOOL:
        wide, text = np.bool_, _NOT_BOOL
        ok = [type(item) is bool for item in leaves]
    elif kind == "i":
        wide, text = np.int64, _NOT_INT
        ok = [type(item) is int and _INT64_MIN <= item <= _INT64_MAX for item in leaves]
    elif kind == "u":
        wide, text = np.uint64, _NOT_UINT
        ok = [type(item) is int and 0 <= item <= _UINT64_MAX for item in leaves]
    else:
        wide, text = np.float64, _NOT_NUMBER
        ok = [type(item) is int or type(item) is float for item in leaves]
    for index, good in enumerate(ok[:count + 1]):
        if index == count:  # more values than the shape holds
            raise InternalError(_SHAPE_MISMATCH)
        if not good:
            raise InternalError(f"Unable to parse 'data': {text}")
    if len(leaves) != count:
        raise InternalError(_SHAPE_MISMATCH)
    return np.array(leaves, dtype=wide).astype(data_type.numpy_dtype, copy=False)


def encode_generate(response: InferResponse) -> bytes:
    """The JSON object of one successful response.

    Names are not repeated: ``id``, ``model_name`` and ``model_version`` come first, then
    response parameters, then outputs, and the first of a name wins, as in Triton; the
    keys are written in byte order.
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
        body[name] = _output(tensor)
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS)


def _output(tensor: Tensor) -> Any:
    """One output's JSON value: one element as the value itself, more as a list. Floats
    and odd strings are written as rapidjson writes them (orjson's shortest digits and
    escapes differ), the rest by orjson."""
    data_type = tensor.data_type
    if data_type in (DataType.FP16, DataType.BF16):
        raise InvalidArgumentError(
            f"sending {data_type.value} data via JSON is not supported. Please use the "
            "binary data format for output")
    array = tensor.to_numpy().reshape(-1)
    if data_type in (DataType.FP32, DataType.FP64):  # FP32: each float as its double
        items = [json_double(value).encode() for value in array.tolist()]
    elif data_type is DataType.BYTES:
        strings = [_string(value) for value in array]
        if all(type(item) is str for item in strings):
            return strings[0] if len(strings) == 1 else strings
        items = [item if isinstance(item, bytes) else orjson.dumps(item) for item in strings]
    else:
        return array[0].item() if len(array) == 1 else array
    if len(items) == 1:
        return orjson.Fragment(items[0])
    return orjson.Fragment(b"[" + b",".join(items) + b"]")


def _string(value: bytes | str) -> str | bytes:
    """A BYTES element as orjson may write it (text), or as rapidjson's writer must
    (bytes: not UTF-8, or a control character orjson escapes otherwise)."""
    if isinstance(value, str):  # a model may leave str in an object array
        value = value.encode("utf-8", "surrogateescape")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return json_string(value)
    if _ODD_CONTROL.search(text):
        return json_string(value)
    return text
