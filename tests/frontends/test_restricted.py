"""Restricted APIs: flag parsing, the category of each endpoint, and the guards."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from infercore.errors import InvalidArgumentError
from infercore.frontends.grpc.core import Handler, LoopStream, LoopUnary
from infercore.frontends.http.messages import HttpRequest, HttpResponse
from infercore.frontends.restricted import (
    CATEGORIES,
    GRPC_METHOD_CATEGORIES,
    RestrictedFeatures,
    Restriction,
    guard_grpc,
    guard_http,
    http_category,
)


def http_features(*groups: str) -> RestrictedFeatures:
    return RestrictedFeatures.parse(groups, option="http-restricted-api", kind="api")


def test_groups_parse_into_one_restriction_per_category():
    features = http_features("model-repository,logging:admin=s3cret", "inference:k=v=w")
    assert features.categories() == ("inference", "model-repository", "logging")
    assert features.get("logging") == Restriction("admin", "s3cret")
    assert features.get("inference") == Restriction("k", "v=w")  # the value may hold "="
    assert features.get("health") is None
    assert not RestrictedFeatures() and features


def test_grpc_headers_carry_tritons_prefix():
    features = RestrictedFeatures.parse(
        ["health:probe=1"], option="grpc-restricted-protocol", kind="protocol",
        header_prefix="triton-grpc-protocol-")
    assert features.get("health") == Restriction("triton-grpc-protocol-probe", "1")


@pytest.mark.parametrize("groups, message", [
    (["health"], "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
                 "Got health"),
    (["health:key"], "option format"),
    ([":k=v"], "option format"),
    (["health:=v"], "option format"),
    (["health:k="], "option format"),
    (["helth:k=v"], "unknown restricted api 'helth'"),
    (["health,health:k=v"], "restricted api 'health' can not be specified in multiple"),
    (["health:k=v", "metadata,health:k2=v2"], "restricted api 'health' can not be specified"),
])
def test_malformed_groups_are_refused_in_tritonservers_words(groups, message):
    with pytest.raises(InvalidArgumentError) as refused:
        http_features(*groups)
    assert message in refused.value.message


@pytest.mark.parametrize("path, category", [
    ("/v2", "metadata"),
    ("/v2/health/live", "health"),
    ("/v2/health/ready", "health"),
    ("/v2/health/startup", "health"),
    ("/v2/models/m", "metadata"),
    ("/v2/models/m/versions/2", "metadata"),
    ("/v2/models/m/ready", "health"),
    ("/v2/models/m/versions/1/ready", "health"),
    ("/v2/models/m/infer", "inference"),
    ("/v2/models/m/versions/3/infer", "inference"),
    ("/v2/models/m/generate", "inference"),
    ("/v2/models/m/generate_stream", "inference"),
    ("/v2/models/m/config", "model-config"),
    ("/v2/models/m/stats", "statistics"),
    ("/v2/models/stats", "statistics"),
    ("/v2/models/m/trace/setting", "trace"),
    ("/v2/trace/setting", "trace"),
    ("/v2/logging", "logging"),
    ("/v2/repository/index", "model-repository"),
    ("/v2/repository/models/m/load", "model-repository"),
    ("/v2/repository/models/m/unload", "model-repository"),
    ("/v2/systemsharedmemory/status", "shared-memory"),
    ("/v2/systemsharedmemory/region/r/register", "shared-memory"),
    ("/v2/cudasharedmemory/region/r/unregister", "shared-memory"),
    # as sent, never percent-decoded (Triton's answer: conformance percent_encoded_*)
    ("/v2/models/a%2Fb/infer", "inference"),
    ("/v2/models/my%20model/config", "model-config"),
    ("/v2/nothing", None),
    ("/metrics", None),
])
def test_every_endpoint_has_tritons_category(path, category):
    assert http_category(path) == category


def test_every_category_and_grpc_method_is_known():
    assert set(GRPC_METHOD_CATEGORIES.values()) == set(CATEGORIES)


def _request(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> HttpRequest:
    return HttpRequest("GET", path, b"", {}, headers or [])


def test_http_guard_refuses_restricted_requests_without_their_header():
    answered = []

    def handle(request: HttpRequest) -> HttpResponse:
        answered.append(request.path)
        return HttpResponse(200, (b"ok",))

    guarded = guard_http(handle, http_features("model-repository:Admin-Key=s3cret"))
    refused = guarded(_request("/v2/repository/index"))
    assert refused.status == 403
    assert b"".join(refused.parts) == (
        b'{"error":"This API is restricted, expecting header \'Admin-Key\'"}')
    assert guarded(_request("/v2/repository/index", [(b"admin-key", b"wrong")])).status == 403
    assert guarded(_request("/v2/repository/index", [(b"ADMIN-KEY", b"s3cret")])).status == 200
    assert guarded(_request("/v2/health/ready")).status == 200  # not restricted
    assert guarded(_request("/v2/nowhere")).status == 200  # the router answers 404 itself
    assert answered == ["/v2/repository/index", "/v2/health/ready", "/v2/nowhere"]


def test_guards_leave_handlers_untouched_without_restrictions():
    def handle(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200)

    assert guard_http(handle, RestrictedFeatures()) is handle
    handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(handle)}
    assert guard_grpc(handlers, RestrictedFeatures()) == handlers


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise _Aborted


def test_grpc_guard_checks_the_prefixed_metadata_of_restricted_methods():
    async def infer(request: bytes, context: _Context) -> bytes:
        return b"answer"

    async def stream(requests: object, context: _Context) -> None:
        return None

    handlers: dict[str, Handler] = {"ModelInfer": LoopUnary(infer), "ServerLive": LoopUnary(infer),
                                    "ModelStreamInfer": LoopStream(stream, bytes)}
    features = RestrictedFeatures.parse(
        ["inference:Infer-Key=v"], option="grpc-restricted-protocol", kind="protocol",
        header_prefix="triton-grpc-protocol-")
    guarded = guard_grpc(handlers, features)
    assert guarded["ServerLive"] is handlers["ServerLive"]

    async def run() -> None:
        unary = guarded["ModelInfer"].behavior
        refused = _Context(())
        with pytest.raises(_Aborted):
            await unary(b"", refused)
        assert refused.aborted == (
            grpc.StatusCode.UNAVAILABLE,
            "This protocol is restricted, expecting header 'triton-grpc-protocol-Infer-Key'")
        wrong = _Context((("triton-grpc-protocol-infer-key", "w"),))
        with pytest.raises(_Aborted):
            await unary(b"", wrong)
        allowed = _Context((("triton-grpc-protocol-infer-key", "v"),))
        assert await unary(b"", allowed) == b"answer"
        streaming = guarded["ModelStreamInfer"]
        assert isinstance(streaming, LoopStream) and streaming.serialize is bytes
        streaming = streaming.behavior
        with pytest.raises(_Aborted):
            await streaming(iter(()), _Context(()))
        assert await streaming(iter(()), allowed) is None

    asyncio.run(run())
