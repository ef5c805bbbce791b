"""Health, server metadata and model readiness, over HTTP and gRPC."""

from __future__ import annotations

from ..case import Case, Grpc, Http, Suite
from ..models import add_sub

_HEALTH = [
    Case("http_live", [Http("GET", "/v2/health/live")]),
    Case("http_ready", [Http("GET", "/v2/health/ready")]),
    Case("http_live_post", [Http("POST", "/v2/health/live")],
         note="a method the route does not take"),
    Case("http_server_metadata", [Http("GET", "/v2")]),
    Case("http_server_metadata_post", [Http("POST", "/v2")]),
    Case("http_ready_put", [Http("PUT", "/v2/health/ready")]),
    Case("http_live_head", [Http("HEAD", "/v2/health/live")]),
    Case("http_live_query", [Http("GET", "/v2/health/live?verbose=1")]),
    Case("http_health_unknown", [Http("GET", "/v2/health/started")]),
    Case("http_root", [Http("GET", "/")]),
    Case("http_v1", [Http("GET", "/v1/models")]),
    Case("http_model_ready_post", [Http("POST", "/v2/models/simple/ready")]),
    Case("http_model_ready_delete", [Http("DELETE", "/v2/models/simple/versions/1/ready")]),
    Case("http_server_metadata_slash", [Http("GET", "/v2/")]),
    Case("http_unknown_route", [Http("GET", "/v2/nothing/here")]),
    Case("http_model_ready", [Http("GET", "/v2/models/simple/ready")]),
    Case("http_model_version_ready", [Http("GET", "/v2/models/simple/versions/1/ready")]),
    Case("http_model_ready_unknown", [Http("GET", "/v2/models/nope/ready")]),
    Case("http_model_ready_unknown_version",
         [Http("GET", "/v2/models/simple/versions/7/ready")]),
    Case("grpc_live", [Grpc("ServerLive")]),
    Case("grpc_ready", [Grpc("ServerReady")]),
    Case("grpc_server_metadata", [Grpc("ServerMetadata")]),
    Case("grpc_model_ready", [Grpc("ModelReady", {"name": "simple"})]),
    Case("grpc_model_ready_version", [Grpc("ModelReady", {"name": "simple", "version": "1"})]),
    Case("grpc_model_ready_unknown", [Grpc("ModelReady", {"name": "nope"})]),
    Case("grpc_model_ready_unknown_version",
         [Grpc("ModelReady", {"name": "simple", "version": "7"})]),
    Case("grpc_model_ready_bad_version",
         [Grpc("ModelReady", {"name": "simple", "version": "x"})]),
]
# Version strings as Triton's gRPC frontend reads them (std::stol: leading blanks and
# trailing text are allowed, the number is what counts).
for _label, _text in (("trailing_text", "1abc"), ("leading_blank", " 1"), ("decimal", "1.5"),
                      ("plus", "+1"), ("minus_one", "-1"), ("zero", "0"), ("hex", "0x1"),
                      ("huge", "99999999999999999999"), ("minus_two", "-2"),
                      ("empty", "")):
    _HEALTH.append(Case(f"grpc_model_ready_version_{_label}",
                        [Grpc("ModelReady", {"name": "simple", "version": _text})]))

SUITES = [Suite("health", "health", models=[add_sub()], cases=_HEALTH)]
