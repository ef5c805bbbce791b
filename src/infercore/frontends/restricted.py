"""Triton's restricted APIs: endpoint categories that answer only requests with a header.

``--http-restricted-api=<category>[,<category>...]:<key>=<value>`` makes the HTTP
endpoints of those categories require the request header ``<key>: <value>``;
``--grpc-restricted-protocol`` does the same for the gRPC methods, with the metadata key
``triton-grpc-protocol-<key>``. Each flag may repeat (one group per flag), but a category
belongs to one group at most. A request without the header, or with another value, is
refused as Triton refuses it: HTTP 403 ``{"error": "This API is restricted, expecting
header '<key>'"}``, gRPC UNAVAILABLE "This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'". Other categories are not affected.

``RestrictedFeatures`` is an immutable value (it is the flag's argparse default, so it is
never mutated); ``guard_http`` and ``guard_grpc`` wrap a frontend's request handlers and
cost nothing for unrestricted categories. Threads: the guards run on the frontends'
event-loop threads and only read.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import grpc

from ..errors import InvalidArgumentError
from .grpc.core import CallContext, DirectUnary, Handler, LoopStream, LoopUnary, UnaryCall
from .http.messages import HttpRequest, error_response

__all__ = ["CATEGORIES", "GRPC_HEADER_PREFIX", "GRPC_METHOD_CATEGORIES",
           "GrpcRestrictionAction", "HttpRestrictionAction", "RestrictedFeatures",
           "Restriction", "RestrictionAction", "guard_grpc", "guard_http", "http_category"]

# Triton's category names (RESTRICTED_CATEGORY_NAMES), in its order.
CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging")
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

# The category of each gRPC method, as Triton's handlers register them.
GRPC_METHOD_CATEGORIES: Mapping[str, str] = MappingProxyType({
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "Check": "health",  # grpc.health.v1.Health
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory", "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
})

_FIXED_PATHS = {
    "/v2": "metadata",
    "/v2/health/live": "health",
    "/v2/health/ready": "health",
    "/v2/health/startup": "health",
    "/v2/models/stats": "statistics",
    "/v2/logging": "logging",
    "/v2/trace/setting": "trace",
}
_MODEL_KINDS = {None: "metadata", "infer": "inference", "generate": "inference",
                "generate_stream": "inference", "ready": "health", "config": "model-config",
                "stats": "statistics", "trace/setting": "trace"}
_MODEL_PATH = re.compile(r"/v2/models/[^/]+(?:/versions/[0-9]+)?"
                         r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?")


@dataclass(frozen=True, slots=True)
class Restriction:
    """The header (full name, as the client sends it) and the value it must carry."""

    header: str
    value: str


class RestrictedFeatures:
    """Which categories are restricted, and by which header; empty: none are."""

    __slots__ = ("_by_category",)

    def __init__(self, restrictions: Mapping[str, Restriction] | None = None) -> None:
        self._by_category: Mapping[str, Restriction] = MappingProxyType(dict(restrictions or {}))

    def __repr__(self) -> str:
        groups = ", ".join(f"{c}: {r.header}" for c, r in self._by_category.items())
        return f"RestrictedFeatures({groups})"

    def __bool__(self) -> bool:
        return bool(self._by_category)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RestrictedFeatures):
            return NotImplemented
        return dict(self._by_category) == dict(other._by_category)

    __hash__ = None  # type: ignore[assignment]

    def get(self, category: str) -> Restriction | None:
        return self._by_category.get(category)

    def categories(self) -> tuple[str, ...]:
        return tuple(c for c in CATEGORIES if c in self._by_category)

    def with_group(self, text: str, *, option: str, kind: str,
                   header_prefix: str = "") -> RestrictedFeatures:
        """These restrictions plus one flag value, ``<categories>:<key>=<value>``.

        ``kind`` ("api" or "protocol") and ``option`` (the flag's name) word the errors as
        tritonserver does. Raises InvalidArgumentError for a malformed value, an unknown
        category, or a category already in another group.
        """
        names, key, value = _split_group(text, option)
        restrictions = dict(self._by_category)
        header = header_prefix + key
        for name in names.split(","):
            if name not in CATEGORIES:
                raise InvalidArgumentError(f"unknown restricted {kind} '{name}'")
            if name in restrictions:
                raise InvalidArgumentError(
                    f"restricted {kind} '{name}' can not be specified in multiple config "
                    "groups")
            restrictions[name] = Restriction(header, value)
        return RestrictedFeatures(restrictions)

    @classmethod
    def parse(cls, items: Iterable[str], *, option: str, kind: str,
              header_prefix: str = "") -> RestrictedFeatures:
        """Restrictions from every value of one flag, in order."""
        features = cls()
        for item in items:
            features = features.with_group(item, option=option, kind=kind,
                                           header_prefix=header_prefix)
        return features


def _split_group(text: str, option: str) -> tuple[str, str, str]:
    names, colon, setting = text.partition(":")
    key, equals, value = setting.partition("=")
    if not (colon and equals and names and key and value):
        raise InvalidArgumentError(
            f"--{option} option format is '<config name>:<setting>=<value>'. Got {text}")
    return names, key, value


class RestrictionAction(argparse.Action):
    """argparse action: each use of the flag adds one group to a RestrictedFeatures.

    A malformed group is a usage error. The subclasses fix the wording and the header
    prefix (argparse passes actions no extra settings).
    """

    kind = "api"
    header_prefix = ""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest, None) or RestrictedFeatures()
        option = self.option_strings[0].lstrip("-")  # the full name, even if abbreviated
        try:
            updated = current.with_group(str(values), option=option, kind=self.kind,
                                         header_prefix=self.header_prefix)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentError(self, exc.message) from None
        setattr(namespace, self.dest, updated)


class HttpRestrictionAction(RestrictionAction):
    kind = "api"
    header_prefix = ""


class GrpcRestrictionAction(RestrictionAction):
    kind = "protocol"
    header_prefix = GRPC_HEADER_PREFIX


# -- HTTP ----------------------------------------------------------------------------------
def http_category(path: str) -> str | None:
    """The restricted-API category of an HTTP path, as sent (Triton matches targets
    without percent-decoding them); None: not an endpoint of any."""
    category = _FIXED_PATHS.get(path)
    if category is not None:
        return category
    if path.startswith("/v2/repository"):
        return "model-repository"
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return "shared-memory"
    match = _MODEL_PATH.fullmatch(path)
    if match is not None:
        return _MODEL_KINDS[match.group(1)]
    return None


def _header(request: HttpRequest, name: bytes) -> bytes | None:
    """A request header by lower-cased name (HTTP header names are case-insensitive)."""
    value = request.headers.get(name)
    if value is not None or request.raw_headers is None:
        return value
    for key, raw in request.raw_headers:
        if key.lower() == name:
            return raw
    return None


HttpHandler = Callable[[HttpRequest], Any]


def guard_http(handle: HttpHandler, features: RestrictedFeatures) -> HttpHandler:
    """``handle`` refusing requests of restricted categories that lack their header.

    The connection must keep the raw headers (the restricted key is not among those the
    frontend reads).
    """
    if not features:
        return handle
    checks = {c: (r.header.lower().encode("latin-1"), r.value.encode("latin-1"),
                  # refused before any endpoint declares JSON: text/plain, as Triton
                  error_response(f"This API is restricted, expecting header '{r.header}'",
                                 403, content_type=b"text/plain"))
              for c in CATEGORIES if (r := features.get(c)) is not None}

    def guarded(request: HttpRequest) -> Any:
        category = http_category(request.path)
        check = checks.get(category) if category is not None else None
        if check is not None:
            header, value, refusal = check
            if _header(request, header) != value:
                return refusal  # a constant: responses are never mutated once built
        return handle(request)

    return guarded


# -- gRPC ----------------------------------------------------------------------------------
def guard_grpc(handlers: Mapping[str, Handler],
               features: RestrictedFeatures) -> dict[str, Handler]:
    """``handlers`` (by method name) with the restricted ones checking their metadata."""
    guarded = dict(handlers)
    if not features:
        return guarded
    for name, handler in handlers.items():
        category = GRPC_METHOD_CATEGORIES.get(name)
        restriction = features.get(category) if category is not None else None
        if restriction is not None:
            guarded[name] = _guard_handler(handler, restriction)
    return guarded


def _metadata_allows(metadata: Iterable[tuple[str, Any]] | None, key: str, value: str
                     ) -> bool:
    for name, given in metadata or ():
        if name == key:
            return bool(given == value)
    return False


def _guard_handler(handler: Handler, restriction: Restriction) -> Handler:
    # gRPC metadata keys travel lower-cased; Triton compares them as given, so a key
    # with capitals could never match there. Matching lower-case is the useful reading.
    key = restriction.header.lower()
    value = restriction.value
    message = f"This protocol is restricted, expecting header '{restriction.header}'"
    if isinstance(handler, DirectUnary):
        direct = handler.behavior

        def checked(call: UnaryCall, data: bytes) -> None:
            if not _metadata_allows(call.metadata, key, value):
                call.fail(grpc.StatusCode.UNAVAILABLE, message)
                return
            direct(call, data)

        return DirectUnary(checked)
    behavior: Callable[[Any, CallContext], Awaitable[Any]] = handler.behavior

    async def checked_on_loop(first: Any, context: CallContext) -> Any:
        # first: the request (unary) or the request iterator (stream)
        if not _metadata_allows(context.invocation_metadata(), key, value):
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)
        return await behavior(first, context)

    if isinstance(handler, LoopStream):
        return LoopStream(checked_on_loop, handler.serialize)
    return LoopUnary(checked_on_loop, handler.serialize)
