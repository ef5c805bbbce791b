"""The HTTP frontend's endpoints: KServe v2 core plus Triton's extensions.

``HttpRouter.handle`` maps a request to its endpoint with the path patterns Triton's
frontend uses. Most endpoints answer at once (an HttpResponse); inference and model
load/unload answer through a coroutine, which the connection starts at once and finishes
as a task if it has to wait. Load and unload block while models load or drain, so they
run on the frontend's admin thread pool, never on the event loop.

Threads: ``handle`` and every endpoint run on the frontend's event-loop thread; the
blocking repository calls run on the admin pool's threads.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any

from ...caller import Caller
from ...errors import (
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    UnsupportedError,
)
from ...kserve.status import as_triton_error
from ...log_settings import LOG_FORMATS
from ...server import Server
from ...trace_settings import stoi
from ..large_requests import LargeRequests
from ..shm import SystemSharedMemory
from .busy_poll import BusyPoll
from .generate import GenerateHandler
from .infer import KSERVE, InferDialect, InferHandler
from .json import JsonObject, parse_json, utf8
from .messages import HttpRequest, HttpResponse, error_response, json_response
from .params import is_uint

__all__ = ["HttpRouter"]

logger = logging.getLogger(__name__)

Result = HttpResponse | Coroutine[Any, Any, HttpResponse]

_MODEL = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
                    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?")
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(?:index|models/([^/]+)/(load|unload))")
_SHARED_MEMORY = re.compile(
    r"/v2/(systemsharedmemory|cudasharedmemory)(?:/region/([^/]+))?/(status|register|unregister)")
_TRACE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
# in the order Triton applies them
_LOG_KEYS = {"log_info": bool, "log_warning": bool, "log_error": bool,
             "log_verbose_level": int, "log_format": str}
_JSON_TYPE_NAMES = {bool: "boolean", str: "string", int: "unsigned-integer"}

# Content types as Triton's answers carry them (tests/conformance/cases/health.py): the
# health and readiness routes and unknown paths answer text/plain, errors included.
_TEXT = b"text/plain"
_OK_EMPTY = HttpResponse(200, (), _TEXT)
_NOT_READY = HttpResponse(400, (), _TEXT)
_MODEL_NOT_READY = error_response("Model version not ready", 400, content_type=_TEXT)
_NOT_FOUND = error_response("Not Found", 404, content_type=_TEXT)
_NOT_ALLOWED = error_response("Method Not Allowed", 405)
_NOT_ALLOWED_TEXT = error_response("Method Not Allowed", 405, content_type=_TEXT)


class HttpRouter:
    """Maps each request to its endpoint and answers it."""

    def __init__(self, server: Server, shm: SystemSharedMemory, executor: Executor, *,
                 max_input_size: int, header_forward_pattern: str = "",
                 busy_poll: BusyPoll | None = None, dialect: InferDialect = KSERVE,
                 large: LargeRequests | None = None, caller: Caller = Caller.LOOP) -> None:
        self._server = server
        self._shm = shm
        self._executor = executor
        self._generate = GenerateHandler(server, busy_poll=busy_poll, caller=caller)
        self.infer = InferHandler(server, shm, max_input_size=max_input_size,
                                  header_forward_pattern=header_forward_pattern,
                                  busy_poll=busy_poll, dialect=dialect, large=large,
                                  caller=caller)

    def handle(self, request: HttpRequest) -> Result:
        try:
            return self._route(request)
        except TritonError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001 - a bug answers 500, the server stays up
            return error_response(as_triton_error(exc))

    def _route(self, request: HttpRequest) -> Result:
        path = request.path  # as Triton: not percent-decoded ('..%2Fm' names no model)
        method = request.method
        if path.startswith("/v2/models/") and path != "/v2/models/stats":
            match = _MODEL.fullmatch(path)
            if match is None:
                return _NOT_FOUND
            name, version_text, kind = match.groups()
            version = int(version_text) if version_text else -1
            if kind == "infer":
                if method != "POST":
                    return _NOT_ALLOWED_TEXT  # refused before the JSON content type
                return self.infer.infer(request, name, version)
            if kind == "generate" or kind == "generate_stream":
                if method != "POST":
                    return _NOT_ALLOWED
                return self._generate.generate(request, name, version,
                                                stream=kind == "generate_stream")
            if kind == "trace/setting":
                if version_text:
                    return _NOT_FOUND  # trace settings are per model, not per version
                return self._model_trace(request, name)
            if method != "GET":
                return _NOT_ALLOWED_TEXT if kind == "ready" else _NOT_ALLOWED
            if kind == "ready":
                return self._model_ready(name, version)
            if kind == "config":
                return json_response(self._server.model(name, version).config())
            if kind == "stats":
                return self._statistics(name, version)
            return json_response(self._server.model(name, version).metadata())
        handler = self._FIXED.get(path)
        if handler is not None:
            return handler(self, request)
        match = _REPOSITORY.fullmatch(path)
        if match is not None:
            return self._repository(request, *match.groups())
        match = _SHARED_MEMORY.fullmatch(path)
        if match is not None:
            kind, region, action = match.groups()
            if (action == "status") != (method == "GET") or method not in ("GET", "POST"):
                return _NOT_ALLOWED
            if kind == "cudasharedmemory":
                return self._cuda_shared_memory(request, region or "", action)
            return self._system_shared_memory(request, region or "", action)
        return _NOT_FOUND

    # -- server --------------------------------------------------------------------------
    def _server_metadata(self, request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            return _NOT_ALLOWED
        return json_response(self._server.metadata())

    def _live(self, request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            return _NOT_ALLOWED_TEXT
        return _OK_EMPTY if self._server.live() else _NOT_READY

    def _startup(self, request: HttpRequest) -> HttpResponse:
        # infercore's own: a Kubernetes startup probe (tritonserver opens its ports only
        # once its startup loads end, so it needs none)
        if request.method != "GET":
            return _NOT_ALLOWED_TEXT
        return _OK_EMPTY if self._server.started_up() else _NOT_READY

    def _ready(self, request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            return _NOT_ALLOWED_TEXT
        return _OK_EMPTY if self._server.ready() else _NOT_READY

    def _all_statistics(self, request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            return _NOT_ALLOWED
        return self._statistics("", -1)

    def _statistics(self, name: str, version: int) -> HttpResponse:
        stats = self._server.statistics(name, version)
        return json_response({"model_stats": [s.to_dict() for s in stats]})

    # -- repository ----------------------------------------------------------------------
    def _repository(self, request: HttpRequest, repository: str | None, model: str | None,
                    action: str | None) -> Result:
        """Index, load and unload, reading the body as Triton's frontend reads it: its
        TritonJson accessors fail as INTERNAL errors, and an unload reads what it can."""
        if request.method != "POST":
            return _NOT_ALLOWED
        if model is None:  # Triton's HTTP index ignores a repository name
            document = _repository_json(request.body)
            ready = document.first("ready", False) if isinstance(document, JsonObject) \
                else False
            if not isinstance(ready, bool):
                raise InternalError("attempt to access JSON non-boolean as boolean")
            index = self._server.repository_index(ready_only=ready)
            return json_response([entry.to_dict() for entry in index])
        if repository:
            raise UnsupportedError("'repository_name' specification is not supported")
        if action == "load":
            config, files = _load_parameters(_repository_json(request.body))
            return self._blocking(lambda: self._server.load(model, config, files))
        try:
            document = _repository_json(request.body)
        except InternalError:  # Triton unloads whatever the body says
            document = None
        parameters = document.first("parameters") if isinstance(document, JsonObject) else None
        unload_dependents = (isinstance(parameters, JsonObject)
                             and parameters.first("unload_dependents") is True)
        return self._blocking(lambda: self._server.unload(
            model, unload_dependents=unload_dependents))

    async def _run_blocking(self, call: Callable[[], Any]) -> HttpResponse:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, call)
        except TritonError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001
            return error_response(as_triton_error(exc))
        return HttpResponse(200, ())

    def _blocking(self, call: Callable[[], Any]) -> Coroutine[Any, Any, HttpResponse]:
        return self._run_blocking(call)

    async def run_blocking(self, call: Callable[[], Any]) -> Any:
        """``call()`` on the admin pool (model control blocks); its result or error."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    # -- logging and trace settings ------------------------------------------------------
    def _logging(self, request: HttpRequest) -> HttpResponse:
        if request.method == "GET":
            return json_response(self._server.log_settings())
        if request.method != "POST":
            return _NOT_ALLOWED
        document = _json_members(request.body)
        if document.get("log_file") is not None:
            raise UnsupportedError(
                "log file location can not be updated through network protocol")
        # Triton applies each setting as it reads it: a bad one leaves those before it set
        for key, kind in _LOG_KEYS.items():
            value = document.get(key)
            if value is None:
                continue
            if (kind is int and (isinstance(value, bool) or not is_uint(value))) or (
                    kind is not int and not isinstance(value, kind)):
                name = _JSON_TYPE_NAMES[kind]
                raise InternalError(f"attempt to access JSON non-{name} as {name}")
            if key == "log_format" and value not in LOG_FORMATS:
                # Triton's HTTP frontend answers this one with UNAVAILABLE
                raise UnavailableError(f"invalid argument for --log_format, got: {value}")
            self._server.update_log_settings(**{key: value})
        return json_response(self._server.log_settings())

    def _global_trace(self, request: HttpRequest) -> HttpResponse:
        return self._trace(request, "")

    async def _model_ready(self, name: str, version: int) -> HttpResponse:
        # awaited: a model's own readiness check (is_ready()) runs off this loop
        try:
            ready = await self._server.model(name, version).aready()
        except TritonError as exc:  # "Server not ready": text/plain as the rest
            return error_response(exc, content_type=_TEXT)
        return _OK_EMPTY if ready else _MODEL_NOT_READY

    async def _model_trace(self, request: HttpRequest, model: str) -> HttpResponse:
        try:
            if request.method in ("GET", "POST") and not await self._server.model(model).aready():
                raise InvalidArgumentError(f"Request for unknown model : {model}")
            return self._trace(request, model)
        except TritonError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001 - a bug answers 500, the server stays up
            return error_response(as_triton_error(exc))

    def _trace(self, request: HttpRequest, model: str) -> HttpResponse:
        """The trace settings of ``model`` ("": the global ones), known to be ready."""
        if request.method not in ("GET", "POST"):
            return _NOT_ALLOWED
        if request.method == "POST":
            document = _json_members(request.body)
            if "trace_file" in document:
                raise UnsupportedError(
                    "trace file location can not be updated through network protocol")
            changes: dict[str, Any] = {}
            for key in _TRACE_KEYS:
                if key not in document:
                    continue
                value = document[key]
                if key == "trace_level" and value is not None:
                    if not isinstance(value, list):
                        raise InternalError("attempt to access JSON non-array as array")
                    if not all(isinstance(level, str) for level in value):
                        raise InternalError("attempt to access JSON non-string as string")
                elif value is not None and not isinstance(value, str):
                    raise InternalError("attempt to access JSON non-string as string")
                elif key == "trace_count" and value is not None and _below_minus_one(value):
                    # the engine's wording has a space after "got:"; the HTTP frontend's not
                    raise InvalidArgumentError(
                        f"Unable to parse 'trace_count'. Expecting value >= -1, got:{value}")
                changes[key] = value
            if changes:
                self._server.update_trace_settings(model, **changes)
        settings = self._server.trace_settings(model)
        # Triton writes a repeated setting (opentelemetry's resource) as repeated JSON keys:
        # a reader keeps the last
        return json_response({key: value[-1] if isinstance(value, list) and key != "trace_level"
                              else value for key, value in settings.items()})

    # -- shared memory -------------------------------------------------------------------
    # Read as Triton's handlers read them: a body that is no object has no members, and a
    # member of the wrong type is TritonJson's INTERNAL error.
    def _system_shared_memory(self, request: HttpRequest, region: str,
                              action: str) -> HttpResponse:
        if action == "status":
            return json_response(self._shm.status(region))
        if action == "unregister":
            self._shm.unregister(region)
            return HttpResponse(200, ())
        if not region:
            raise InvalidArgumentError(
                "'region name' is necessary to register system shared memory region")
        document = _json_members(request.body)
        key = document.get("key")
        if key is None:
            raise InvalidArgumentError("Shared memory register request has no 'key' field")
        if not isinstance(key, str):
            raise InternalError("attempt to access JSON non-string as string")
        offset = document.get("offset", 0)
        if "byte_size" not in document:
            raise InvalidArgumentError(
                "Shared memory register request has no 'byte_size' field")
        byte_size = document["byte_size"]
        if not is_uint(offset) or not is_uint(byte_size):
            raise InternalError(
                "attempt to access JSON non-unsigned-integer as unsigned-integer")
        self._shm.register(region, key, offset, byte_size)
        return HttpResponse(200, ())

    def _cuda_shared_memory(self, request: HttpRequest, region: str,
                            action: str) -> HttpResponse:
        if action == "status":
            return json_response(self._shm.cuda_status(region))
        if action == "unregister":
            self._shm.cuda_unregister(region)
            return HttpResponse(200, ())
        if not region:
            raise InvalidArgumentError(
                "'region name' is necessary to register cuda shared memory region")
        if "raw_handle" not in _json_members(request.body):
            raise InvalidArgumentError(
                "Shared memory register request has no 'raw_handle' field")
        self._shm.cuda_register(region)
        return HttpResponse(200, ())

    _FIXED: dict[str, Callable[[HttpRouter, HttpRequest], Result]] = {
        "/v2": _server_metadata,
        "/v2/health/live": _live,
        "/v2/health/ready": _ready,
        "/v2/health/startup": _startup,
        "/v2/models/stats": _all_statistics,
        "/v2/logging": _logging,
        "/v2/trace/setting": _global_trace,
    }


def _json_members(body: bytes) -> dict[str, Any]:
    """The members of a JSON body where Triton's handlers look members up (register,
    logging, trace settings): a document that is not an object has none; one that does not
    parse is rapidjson's INTERNAL error. A member named twice: its first value, as
    rapidjson's Find gives."""
    document = parse_json(body)
    if not isinstance(document, JsonObject):
        return {}
    members: dict[str, Any] = {}
    for name, value in document.members:
        members.setdefault(name, value)
    return members


def _below_minus_one(text: str) -> bool:
    try:
        return stoi(text) < -1
    except (ValueError, OverflowError):
        return False  # the engine says what is wrong with it


def _repository_json(body: bytes) -> Any:
    """A repository request's JSON (None for no body), read as Triton reads it."""
    return parse_json(body) if body else None


def _load_parameters(document: Any) -> tuple[str | None, dict[str, bytes]]:
    """A load request's config override and its model files, as Triton reads them: every
    parameter a string, "config" the override, "file:<path>" base64 contents."""
    parameters = document.first("parameters") if isinstance(document, JsonObject) else None
    if parameters is None:
        return None, {}
    if not isinstance(parameters, JsonObject):
        raise InternalError("attempt to get members for non-object")
    config = None
    files: dict[str, bytes] = {}
    for key, value in parameters.members:
        if not isinstance(value, str):
            raise InternalError("attempt to access JSON non-string as string")
        if key == "config":
            config = value
        elif key.startswith("file:"):
            files[key] = _base64_decode(value)
        else:  # Triton's HTTP frontend makes string parameters of these two only
            raise InternalError("unexpected error on creating Triton parameter")
    return config, files


_BASE64 = re.compile(rb"[^A-Za-z0-9+/]")


def _base64_decode(text: str) -> bytes:
    """Base64 as Triton's frontend decodes it (libb64): characters outside the alphabet,
    padding included, are skipped, and a last incomplete group gives what bits it holds."""
    data = _BASE64.sub(b"", utf8(text))
    if len(data) % 4 == 1:
        data = data[:-1]  # six bits: not a byte
    return base64.b64decode(data + b"=" * (-len(data) % 4))
