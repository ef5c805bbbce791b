"""The SageMaker frontend: Triton's routes for Amazon SageMaker, on their own port.

``--allow-sagemaker=true`` serves, at 0.0.0.0 and ``--sagemaker-port`` (8080):

- ``GET /ping``: the server's readiness (``SAGEMAKER_TRITON_PING_MODE=live``: liveness),
  200 or 400, as Triton's health routes answer.
- ``POST /invocations``: inference on ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``
  (``SAGEMAKER_TRITON_INFERENCE_TYPE`` ``generate`` or ``generate_stream``: the generate
  extension instead), answered as ``/v2/models/<model>/infer`` is.
- The multi-model endpoint API (EXPLICIT model control mode): ``POST /models`` loads
  the archive folder at ``url`` as ``model_name`` (``X-Amzn-SageMaker-Target-Model``, when
  given, is the name the model loads and runs under); ``GET /models`` lists the loaded
  ones, ``GET /models/<name>`` one, ``DELETE /models/<name>`` unloads it and forgets its
  archive, ``POST /models/<name>/invoke`` runs it. A failure that mentions memory
  ("out of memory", "MemoryError", ...) is answered 507, as SageMaker expects.

Bodies are framed as Triton's SageMaker frontend frames them: a binary body gives the
size of its JSON header in ``Content-Type:
application/vnd.sagemaker-triton.binary+json;json-header-size=<n>``, a binary answer
says it the same way, and bodies are never compressed. Everything else answers 400 with
no body. Statuses, bodies and content types are Triton's (tests/conformance/cases/
sagemaker.py), including the current ones where 2.51 differs: a ``url`` under /dev/,
/proc/ or /sys/ is refused, and a load body that does not parse is answered 400 (2.51
dies on it).

``add_arguments`` adds tritonserver's flags with its value types and defaults;
``options_from_args`` gives the ``SageMakerOptions`` they set (the command line checks
the port against the other services', ``--sagemaker-safe-port-range`` included, as
tritonserver does); ``from_args`` builds the frontend. ``--sagemaker-thread-count``
sizes the pool that runs model loads and unloads (requests are served by one event
loop, as in the HTTP frontend).

Threads: as the HTTP frontend (the loop thread ``infercore-sagemaker`` and the admin
pool ``infercore-sagemaker-admin-*``). The table of multi-model endpoint models is
touched on the loop thread only; a load or unload runs on the pool and records its
result when it is back on the loop.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from ..errors import AlreadyExistsError, InvalidArgumentError, TritonError
from ..server import Server
from ..triton_order import triton_order
from .flag_types import boolean, integer, pair
from .http.infer import InferDialect
from .http.json import JsonObject, parse_json
from .http.messages import HttpRequest, HttpResponse, error_response
from .http.protocol import WANTED_HEADERS
from .http.routes import HttpRouter, Result
from .http.server import HttpFrontend, HttpOptions

__all__ = ["SageMakerFrontend", "SageMakerOptions", "SageMakerSettings", "add_arguments",
           "from_args", "options_from_args", "split_model_url"]

logger = logging.getLogger(__name__)

ADDRESS = "0.0.0.0"  # Triton's SageMaker frontend has no address flag
DEFAULT_PORT = 8080
SAGEMAKER_MIME = b"application/vnd.sagemaker-triton.binary+json;json-header-size="
INFERENCE_TYPES = ("infer", "generate", "generate_stream")
_TARGET_MODEL = b"x-amzn-sagemaker-target-model"
_MODELS = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
# /opt/ml/models/<hash>/model[/<subdir>]: where SageMaker unpacks an archive
_MODEL_PATH = re.compile(r"(/opt/ml/models/[0-9A-Za-z._]+)/(model)/?([0-9A-Za-z._]+)?")
_ENSEMBLE = re.compile(r'platform:(\s)*"ensemble"')
_FORBIDDEN = ("/dev/", "/proc/", "/sys/")
# Triton's SageMakerMMECheckOOMError: texts that make a failure a 507
_OUT_OF_MEMORY = ("CUDA out of memory", "CUDA_OUT_OF_MEMORY", "Out of memory", "Out Of Memory",
                  "out of memory", "MemoryError", "OutOfMemory", "OOM",
                  "Dst tensor is not initialized", "Src tensor is not initialized",
                  "CNMEM_STATUS_OUT_OF_MEMORY", "CUDNN_STATUS_NOT_INITIALIZED",
                  "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED",
                  "Failed to allocate memory", "failed to allocate memory",
                  "No space left on device")
_EMPTY = HttpResponse(200, (), b"text/plain")
_BAD_REQUEST = HttpResponse(400, (), b"text/plain")
_NOT_FOUND = HttpResponse(404, (), b"text/plain")


@dataclass(frozen=True, slots=True)
class SageMakerSettings:
    """What Triton's SageMaker frontend reads from its environment."""

    default_model: str = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
    ping_mode: str = "ready"  # SAGEMAKER_TRITON_PING_MODE: "live" or (anything else) ready
    inference_type: str = "infer"  # SAGEMAKER_TRITON_INFERENCE_TYPE

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> SageMakerSettings:
        default = cls()
        return cls(environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", default.default_model),
                   environ.get("SAGEMAKER_TRITON_PING_MODE", default.ping_mode),
                   environ.get("SAGEMAKER_TRITON_INFERENCE_TYPE", default.inference_type))


@dataclass(frozen=True, slots=True)
class SageMakerOptions:
    """What tritonserver's SageMaker frontend listens on (its defaults)."""

    enabled: bool = False
    address: str = ADDRESS  # tritonserver has no flag for it
    port: int = DEFAULT_PORT
    # --sagemaker-safe-port-range: the ports the other services may use (None: any)
    safe_port_range: tuple[int, int] | None = None
    thread_count: int = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's SageMaker flags."""
    defaults = SageMakerOptions()
    group = parser.add_argument_group("Sagemaker", "Amazon SageMaker's routes (/ping, "
                                      "/invocations, /models) on their own port.")
    group.add_argument("--allow-sagemaker", type=boolean, default=defaults.enabled,
                       metavar="BOOL", help="serve SageMaker requests (default false)")
    group.add_argument("--sagemaker-port", type=integer, default=defaults.port, metavar="PORT",
                       help=f"default {defaults.port}")
    group.add_argument("--sagemaker-safe-port-range", type=pair(integer, integer, "-"),
                       default=None, metavar="LOW-HIGH",
                       help="the ports the other services at its address may listen on")
    group.add_argument("--sagemaker-thread-count", type=integer,
                       default=defaults.thread_count, metavar="N",
                       help=f"threads for model loads and unloads (default "
                            f"{defaults.thread_count}); requests are served by one "
                            "event-loop thread")


def options_from_args(args: argparse.Namespace) -> SageMakerOptions:
    return SageMakerOptions(enabled=args.allow_sagemaker, port=args.sagemaker_port,
                            safe_port_range=args.sagemaker_safe_port_range,
                            thread_count=args.sagemaker_thread_count)


def from_args(server: Server, args: argparse.Namespace) -> SageMakerFrontend | None:
    options = options_from_args(args)
    if not options.enabled:
        return None
    return SageMakerFrontend(server, HttpOptions(
        address=options.address, port=options.port,
        thread_count=max(1, options.thread_count),  # tritonserver takes 0 too
        max_input_size=args.http_max_input_size, busy_poll_us=args.http_busy_poll_us,
        allow_client_shm=args.allow_client_shm))


def split_model_url(url: str) -> tuple[str, str]:
    """(repository, model folder) of the archive folder ``url`` (already absolute), as
    Triton's SageMaker frontend picks them: a folder whose config.pbtxt is at its root is
    the ``model`` folder of /opt/ml/models/<hash> (outside that layout no repository is
    found: ""); otherwise the folder is the repository and its model is the ensemble
    among its subfolders, or else the last of them."""
    folder = Path(url)
    try:
        subfolders = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError:
        subfolders = []
    model = subfolders[-1] if subfolders else ""
    for name in subfolders:
        try:
            config = (folder / name / "config.pbtxt").read_text(errors="replace")
        except OSError:
            continue
        if _ENSEMBLE.search(config):
            model = name
    if (folder / "config.pbtxt").exists():
        match = _MODEL_PATH.fullmatch(url)
        return (match.group(1), match.group(2)) if match else ("", "")
    return url, model


def _out_of_memory(message: str) -> bool:
    return any(text in message for text in _OUT_OF_MEMORY)


class SageMakerFrontend(HttpFrontend):
    """Serves SageMaker's routes for ``server`` until ``stop``."""

    kind = "sagemaker"
    label = "SageMaker"
    service_name = "Sagemaker HTTPService"
    dialect = InferDialect(SAGEMAKER_MIME, binary_reply_mime=True)
    wanted_headers = WANTED_HEADERS | {b"content-type", _TARGET_MODEL}

    def __init__(self, server: Server, options: HttpOptions | None = None,
                 settings: SageMakerSettings | None = None) -> None:
        super().__init__(server, options or HttpOptions(address=ADDRESS, port=DEFAULT_PORT))
        self.settings = settings or SageMakerSettings.from_environment()

    def _handler(self, router: HttpRouter) -> Callable[[HttpRequest], Result]:
        return _SageMakerRoutes(self._server, router, self.settings).handle


class _SageMakerRoutes:
    """The SageMaker routes; KServe's handlers do the work (on the loop thread)."""

    def __init__(self, server: Server, router: HttpRouter, settings: SageMakerSettings) -> None:
        self._server = server
        self._router = router
        self._settings = settings
        self._health = "/v2/health/live" if settings.ping_mode == "live" else "/v2/health/ready"
        # multi-model endpoint models: name posted -> the repository it was loaded from
        self._models: dict[str, str] = {}

    def handle(self, request: HttpRequest) -> Result:
        path = request.path
        if path == "/ping":
            return self._router.handle(replace(request, path=self._health))
        if path == "/invocations":
            return self._invocations(request)
        match = _MODELS.fullmatch(path)
        if match is None:
            return _BAD_REQUEST
        name, invoke = match.group(1) or "", match.group(2)
        if request.method == "GET":
            return self._get(name) if name else self._list()
        if request.method == "POST":
            return self._invoke(request, name) if invoke else self._load(request)
        if request.method == "DELETE":
            return self._unload(request, name)
        return _BAD_REQUEST

    def _invocations(self, request: HttpRequest) -> Result:
        kind = self._settings.inference_type
        model = self._settings.default_model
        if kind == "infer":
            return self._router.handle(replace(request, path=f"/v2/models/{model}/infer"))
        if kind in INFERENCE_TYPES:
            return self._router.handle(replace(request, path=f"/v2/models/{model}/{kind}"))
        return error_response(
            f"Server has invalid inference type '{kind}'. Must be one of: infer, generate, "
            "generate_stream.", 400)

    # -- the multi-model endpoint ----------------------------------------------------------
    async def _list(self) -> HttpResponse:
        models = []
        for name in triton_order(self._models):  # Triton keeps them in an unordered_map
            try:
                # awaited: a model's own readiness check (is_ready()) runs off this loop
                ready = await self._server.model(name, 1).aready()
            except TritonError:
                ready = False
            # a model that is not ready is listed as an empty object, as Triton lists it
            models.append({"modelName": name, "modelUrl": self._models[name]} if ready else {})
        return HttpResponse(200, (orjson.dumps({"models": models}),), b"text/plain")

    def _get(self, name: str) -> HttpResponse:
        url = self._models.get(name)
        if url is None:
            return _NOT_FOUND
        return HttpResponse(200, (orjson.dumps({"modelName": name, "modelUrl": url}),),
                            b"text/plain")

    async def _invoke(self, request: HttpRequest, name: str) -> HttpResponse:
        if name not in self._models:
            return _NOT_FOUND
        target = request.header(_TARGET_MODEL)
        model = target.decode("latin-1") if target is not None else name
        logger.info("Invoking SageMaker TargetModel: %s", model)
        response = await self._router.infer.infer(request, model, -1,
                                                  json_request_errors=True)
        if response.status == 200:
            return response
        # Triton answers every failed invocation 400, or 507 when it ran out of memory
        message = orjson.loads(b"".join(response.parts)).get("error", "")
        return replace(response, status=507 if _out_of_memory(message) else 400)

    async def _load(self, request: HttpRequest) -> HttpResponse:
        try:
            fields = _load_fields(request.body)
        except TritonError as exc:
            return error_response(exc.message, 400, content_type=b"text/plain")
        name, url = fields
        absolute = os.path.abspath(url) if url else os.getcwd()
        if absolute.startswith(_FORBIDDEN):
            logger.error('Invalid URL: %s. "url" property value cannot start with /dev/, '
                         '/proc/, or /sys/.', url)
            return _BAD_REQUEST
        target_header = request.header(_TARGET_MODEL)
        target = target_header.decode("latin-1") if target_header is not None else name
        logger.info("Loading SageMaker TargetModel: %s", target)
        repository, folder = split_model_url(absolute)
        try:
            await self._router.run_blocking(
                lambda: self._server.register_model_repository(repository, {folder: target}))
        except TritonError as exc:
            status = 409 if isinstance(exc, AlreadyExistsError) else 400
            return error_response(exc.message, status, content_type=b"text/plain")
        try:
            await self._router.run_blocking(lambda: self._server.load(target))
        except TritonError as exc:
            await self._router.run_blocking(
                lambda: self._server.unregister_model_repository(repository))
            status = (409 if isinstance(exc, AlreadyExistsError)
                      else 507 if _out_of_memory(exc.message) else 400)
            return error_response(exc.message, status, content_type=b"text/plain")
        self._models[name] = repository
        return _EMPTY

    async def _unload(self, request: HttpRequest, name: str) -> HttpResponse:
        repository = self._models.get(name)
        if repository is None:
            return _NOT_FOUND
        target_header = request.header(_TARGET_MODEL)
        target = target_header.decode("latin-1") if target_header is not None else name
        logger.info("Unloading SageMaker TargetModel: %s", target)
        try:
            # Triton unloads the dependents too, and waits until the model is gone
            await self._router.run_blocking(
                lambda: self._server.unload(target, unload_dependents=True))
        except TritonError as exc:
            logger.error("Error when unloading SageMaker Model with dependents for model: "
                         "%s", target)
            return error_response(exc.message, 400, content_type=b"text/plain")
        del self._models[name]  # forgotten, whether unregistering works or not
        try:
            await self._router.run_blocking(
                lambda: self._server.unregister_model_repository(repository))
        except TritonError as exc:
            return error_response(exc.message, 400, content_type=b"text/plain")
        return _EMPTY


def _load_fields(body: bytes) -> tuple[str, str]:
    """``model_name`` and ``url`` of a load request ("" when absent)."""
    if not body:
        return "", ""
    document: Any = parse_json(body)
    if not isinstance(document, JsonObject):
        return "", ""
    values = []
    for key in ("model_name", "url"):
        value = document.first(key, "")
        if not isinstance(value, str):
            raise InvalidArgumentError("attempt to access JSON non-string as string")
        values.append(value)
    return values[0], values[1]
