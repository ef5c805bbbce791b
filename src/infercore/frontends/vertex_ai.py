"""The Vertex AI frontend: Triton's prediction and health routes for Google Vertex AI.

``--allow-vertex-ai=true`` (the default when ``AIP_MODE=PREDICTION``, which also turns
the HTTP and gRPC frontends off by default) serves, at 0.0.0.0 and ``--vertex-ai-port``
(default ``AIP_HTTP_PORT``, else 8080; ``AIP_STORAGE_URI`` is the repository when no
``--model-repository`` is given, ``default_repository``):

- the health route, the pattern ``AIP_HEALTH_ROUTE``: the server's readiness;
- the prediction route, the pattern ``AIP_PREDICT_ROUTE``: inference on the default
  model (``--vertex-ai-default-model``; without it the repository must hold exactly one
  ready model, which is the default), answered as ``/v2/models/<model>/infer`` is. With
  the header ``X-Vertex-Ai-Triton-Redirect: <route>`` the request goes to the KServe
  route ``/<route>`` instead (only POST is accepted; it is read as the GET those routes
  take): model metadata, ready, config, stats and infer; server metadata and health;
  the shared-memory and repository routes; ``metrics``. Any other route answers 400
  with no body, as every other path does.

Both routes are regular expressions matched against the whole path, as Triton matches
them. Binary bodies give the size of their JSON header in ``Content-Type:
application/vnd.vertex-ai-triton.binary+json;json-header-size=<n>`` (binary answers carry
KServe's headers, as Triton's do), and bodies are never compressed.

The service is created once the startup loads are done, as Triton creates it (it needs
the ready models to pick its default): ``starts_after_load``. A missing route variable
or default model stops the server, with Triton's message.

Threads: as the HTTP frontend (``infercore-vertex_ai`` and its admin pool).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..errors import InvalidArgumentError, TritonError
from ..server import Server
from .flag_types import boolean, integer
from .http.infer import InferDialect
from .http.messages import HttpRequest, HttpResponse
from .http.protocol import WANTED_HEADERS
from .http.routes import HttpRouter, Result
from .http.server import HttpFrontend, HttpOptions
from .sagemaker import ADDRESS

__all__ = ["VertexAIOptions", "VertexAIFrontend", "VertexAISettings", "add_arguments",
           "default_repository", "from_args", "options_from_args"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8080
VERTEX_MIME = b"application/vnd.vertex-ai-triton.binary+json;json-header-size="
_REDIRECT = b"x-vertex-ai-triton-redirect"
# the KServe routes a redirect may reach, as Triton's Vertex AI frontend matches them
_MODEL = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
                    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?")
_READ_KINDS = ("ready", "config", "stats", None)  # read as GET; "infer" stays a POST
_HEALTH = re.compile(r"/v2/health/(live|ready)")
_SHARED_MEMORY = re.compile(
    r"/v2/(?:systemsharedmemory|cudasharedmemory)(?:/region/([^/]+))?/"
    r"(status|register|unregister)")
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(?:index|models/([^/]+)/(?:load|unload))")
_BAD_REQUEST = HttpResponse(400, (), b"text/plain")
_NOT_ALLOWED = HttpResponse(405, (), b"text/plain")


@dataclass(frozen=True, slots=True)
class VertexAISettings:
    """The routes, from Vertex AI's environment, and the default model ("": the only
    ready model)."""

    predict_route: str = ""
    health_route: str = ""
    default_model: str = ""

    @classmethod
    def from_environment(cls, default_model: str = "",
                         environ: Mapping[str, str] = os.environ) -> VertexAISettings:
        return cls(environ.get("AIP_PREDICT_ROUTE", ""), environ.get("AIP_HEALTH_ROUTE", ""),
                   default_model)


@dataclass(frozen=True, slots=True)
class VertexAIOptions:
    """What tritonserver's Vertex AI frontend listens on and serves (its defaults)."""

    enabled: bool = False
    address: str = ADDRESS  # tritonserver has no flag for it
    port: int = DEFAULT_PORT
    thread_count: int = 8
    default_model: str = ""  # "": the repository's only ready model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's Vertex AI flags, and the defaults Vertex AI's environment sets."""
    defaults = VertexAIOptions()
    group = parser.add_argument_group("Vertex", "Google Vertex AI's prediction and health "
                                      "routes on their own port.")
    group.add_argument("--allow-vertex-ai", type=boolean, default=defaults.enabled,
                       metavar="BOOL",
                       help="serve Vertex AI requests (default true if AIP_MODE=PREDICTION)")
    # a string default goes through the type, as a flag value would
    group.add_argument("--vertex-ai-port", type=integer,
                       default=os.environ.get("AIP_HTTP_PORT", str(defaults.port)),
                       metavar="PORT", help="default AIP_HTTP_PORT, else 8080")
    group.add_argument("--vertex-ai-thread-count", type=integer,
                       default=defaults.thread_count, metavar="N",
                       help=f"threads for the model loads and unloads reached through the "
                            f"redirect (default {defaults.thread_count}); requests are "
                            "served by one event-loop thread")
    group.add_argument("--vertex-ai-default-model", default=defaults.default_model,
                       metavar="NAME", help="the model the prediction route runs")
    if os.environ.get("AIP_MODE") == "PREDICTION":
        parser.set_defaults(allow_vertex_ai=True, allow_http=False, allow_grpc=False)


def default_repository() -> str | None:
    """The repository Vertex AI's environment names (AIP_STORAGE_URI), if any."""
    return os.environ.get("AIP_STORAGE_URI") or None


def options_from_args(args: argparse.Namespace) -> VertexAIOptions:
    return VertexAIOptions(enabled=args.allow_vertex_ai, port=args.vertex_ai_port,
                           thread_count=args.vertex_ai_thread_count,
                           default_model=args.vertex_ai_default_model)


def from_args(server: Server, args: argparse.Namespace) -> VertexAIFrontend | None:
    options = options_from_args(args)
    if not options.enabled:
        return None
    return VertexAIFrontend(
        server, HttpOptions(address=options.address, port=options.port,
                            thread_count=max(1, options.thread_count),
                            max_input_size=args.http_max_input_size,
                            busy_poll_us=args.http_busy_poll_us,
                            allow_client_shm=args.allow_client_shm),
        VertexAISettings.from_environment(options.default_model))


class VertexAIFrontend(HttpFrontend):
    """Serves Vertex AI's routes for ``server`` until ``stop``."""

    kind = "vertex_ai"
    label = "Vertex AI"
    service_name = "Vertex AI HTTPService"
    dialect = InferDialect(VERTEX_MIME)
    wanted_headers = WANTED_HEADERS | {b"content-type", _REDIRECT}
    starts_after_load = True

    def __init__(self, server: Server, options: HttpOptions | None = None,
                 settings: VertexAISettings | None = None) -> None:
        super().__init__(server, options or HttpOptions(address=ADDRESS, port=DEFAULT_PORT))
        self.settings = settings or VertexAISettings.from_environment()
        self.default_model = ""

    def start(self) -> None:
        """Check the routes, pick the default model, then listen.

        Raises:
            InvalidArgumentError: a route is not set, or there is no default model.
        """
        self.default_model = _default_model(self._server, self.settings)
        super().start()

    def _handler(self, router: HttpRouter) -> Callable[[HttpRequest], Result]:
        return _VertexAIRoutes(self._server, router, self.settings, self.default_model).handle


def _default_model(server: Server, settings: VertexAISettings) -> str:
    """Triton's VertexAiAPIServer::Create checks, in its order and words."""
    if not settings.predict_route:
        raise InvalidArgumentError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
    if not settings.health_route:
        raise InvalidArgumentError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
    ready = [entry.name for entry in server.repository_index(ready_only=True)]
    if not settings.default_model:
        if len(ready) != 1:
            raise InvalidArgumentError(
                "Expect the model repository contains only a single model if default "
                "model is not specified")
        return ready[0]
    if settings.default_model not in ready:
        raise InvalidArgumentError(
            f"Expect the default model '{settings.default_model}' is loaded")
    return settings.default_model


class _VertexAIRoutes:
    """The Vertex AI routes; KServe's handlers do the work (on the loop thread)."""

    def __init__(self, server: Server, router: HttpRouter, settings: VertexAISettings,
                 default_model: str) -> None:
        self._server = server
        self._router = router
        self._predict = re.compile(settings.predict_route)
        self._health = re.compile(settings.health_route)
        self._default_infer = f"/v2/models/{default_model}/infer"

    def handle(self, request: HttpRequest) -> Result:
        path = request.path
        if self._health.fullmatch(path):
            return self._router.handle(replace(request, path="/v2/health/ready"))
        if not self._predict.fullmatch(path):
            return _BAD_REQUEST
        target = request.header(_REDIRECT)
        if target is None:
            return self._router.handle(replace(request, path=self._default_infer))
        if request.method != "POST":
            return _NOT_ALLOWED
        route = "/" + target.decode("latin-1")
        method = _redirected_method(route)
        if method is None:
            return _BAD_REQUEST
        if route == "/metrics":
            return self._metrics()
        return self._router.handle(replace(request, path=route, method=method))

    def _metrics(self) -> HttpResponse:
        if not self._server.options.metrics:  # Triton has no metrics to give then
            return _BAD_REQUEST
        try:
            text = self._server.metrics()
        except TritonError:
            return _BAD_REQUEST
        return HttpResponse(200, (text.encode(),), b"text/plain")


def _redirected_method(route: str) -> str | None:
    """The method the redirected KServe route is served with; None: not served here."""
    if route in ("/metrics", "/v2/models/stats", "/v2"):
        return "GET"
    match = _MODEL.fullmatch(route)
    if match is not None:
        kind = match.group(3)
        if kind == "infer":
            return "POST"
        if kind in _READ_KINDS:
            return "GET"
    if _HEALTH.fullmatch(route):
        return "GET"
    match = _SHARED_MEMORY.fullmatch(route)
    if match is not None:
        return "GET" if match.group(2) == "status" else "POST"
    if _REPOSITORY.fullmatch(route):
        return "POST"
    return None
