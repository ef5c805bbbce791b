"""``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern``: request
headers whose name matches become string parameters of the inference request.

A Python model answers with its ``request.parameters()`` (keys sorted, so the answer
does not depend on the order a server keeps them in) as a BYTES output; the cases send
matching and non-matching headers, names in other cases, several patterns, over HTTP
(JSON and binary) and gRPC (unary and streaming).
"""

from __future__ import annotations

from ..case import Case, Grpc, GrpcStream, Http, Suite, binary_body
from ..models import python_model

AREA = "flags"

_PARAMS_PY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.dumps(json.loads(request.parameters()), sort_keys=True)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "PARAMS", np.array([parameters.encode()], dtype=np.object_))]))
        return responses
'''

PARAMS = python_model("params", '''
name: "params"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
''', _PARAMS_PY)

_INPUT = {"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}
_GRPC_REQUEST = {"model_name": "params", "inputs": [
    {"name": "IN", "datatype": "INT32", "shape": [1], "contents": {"int_contents": [1]}}]}


def infer(*headers: tuple[str, str], parameters: dict | None = None) -> Http:
    body: dict = {"inputs": [_INPUT]}
    if parameters is not None:
        body["parameters"] = parameters
    return Http("POST", "/v2/models/params/infer", json=body, headers=list(headers))


def grpc_infer(*metadata: tuple[str, str], parameters: dict | None = None) -> Grpc:
    request = dict(_GRPC_REQUEST)
    if parameters is not None:
        request["parameters"] = parameters
    return Grpc("ModelInfer", request, metadata=list(metadata))


_BINARY, _BINARY_HEADERS = binary_body(
    {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1],
                 "parameters": {"binary_data_size": 4}}]}, (7).to_bytes(4, "little"))

SUITES = [
    Suite("flags_forward_http", AREA, [PARAMS], ["--http-header-forward-pattern=x-fwd-.*"], [
        Case("no_headers", [infer()]),
        Case("matching", [infer(("x-fwd-one", "a"), ("x-fwd-two", "b c"))]),
        Case("name_case", [infer(("X-Fwd-One", "Upper"), ("X-FWD-TWO", "shout"))]),
        Case("not_matching", [infer(("x-other", "1"), ("fwd-one", "2"), ("x_fwd_one", "3"))]),
        Case("partial_match", [infer(("my-x-fwd-key", "inside"), ("x-fwd-", "empty-tail"))]),
        Case("with_body_parameters", [infer(("x-fwd-one", "header"),
                                            parameters={"from_body": "yes"})]),
        Case("same_key_in_body", [infer(("x-fwd-one", "header"),
                                        parameters={"x-fwd-one": "body"})]),
        Case("empty_value", [infer(("x-fwd-empty", ""))], departure=(
            "an empty header value is forwarded as it was sent, empty: the space after "
            "the colon is optional whitespace (RFC 9110), which Triton's HTTP library "
            "keeps as the value ' ' when nothing follows it"), expect=[
            {"status": 200, "body": {"outputs": [{"data": ['{"x-fwd-empty": ""}']}]}}]),
        Case("binary_request", [Http("POST", "/v2/models/params/infer", body=_BINARY,
                                     headers=[*_BINARY_HEADERS, ("x-fwd-bin", "yes")])]),
        Case("grpc_not_forwarded", [grpc_infer(("x-fwd-one", "a"))]),
    ]),
    Suite("flags_forward_grpc", AREA, [PARAMS], ["--grpc-header-forward-pattern=X-FWD-.*"], [
        Case("no_metadata", [grpc_infer()]),
        Case("matching", [grpc_infer(("x-fwd-one", "a"), ("x-fwd-two", "b c"))]),
        Case("not_matching", [grpc_infer(("x-other", "1"), ("fwd-one", "2"))]),
        Case("partial_match", [grpc_infer(("my-x-fwd-key", "inside"))]),
        Case("with_request_parameters", [grpc_infer(
            ("x-fwd-one", "header"), parameters={"from_request": {"string_param": "yes"}})]),
        Case("same_key_in_request", [grpc_infer(
            ("x-fwd-one", "header"), parameters={"x-fwd-one": {"string_param": "request"}})]),
        Case("stream", [GrpcStream([_GRPC_REQUEST, _GRPC_REQUEST],
                                   metadata=[("x-fwd-stream", "s")])]),
        Case("http_not_forwarded", [infer(("x-fwd-one", "a"))]),
    ]),
    Suite("flags_forward_alternatives", AREA, [PARAMS], [
        "--http-header-forward-pattern=^(alpha|beta)$",
        "--grpc-header-forward-pattern=^(alpha|beta)$"], [
        Case("http", [infer(("alpha", "1"), ("Beta", "2"), ("alphabet", "3"),
                            ("gamma", "4"))]),
        Case("grpc", [grpc_infer(("alpha", "1"), ("beta", "2"), ("alphabet", "3"),
                                 ("gamma", "4"))]),
    ]),
    Suite("flags_forward_repeated", AREA, [PARAMS], [
        "--http-header-forward-pattern=first", "--http-header-forward-pattern=second"], [
        Case("last_wins", [infer(("first", "1"), ("second", "2"))]),
    ]),
    Suite("flags_forward_space_form", AREA, [PARAMS], [
        "--http-header-forward-pattern", "^x-a$", "--grpc-header-forward-pattern", "^x-b$"], [
        Case("http", [infer(("x-a", "1"), ("x-b", "2"))]),
        Case("grpc", [grpc_infer(("x-a", "1"), ("x-b", "2"))]),
    ]),
    Suite("flags_forward_framing_headers", AREA, [PARAMS],
          ["--http-header-forward-pattern=^content-length$|^host$"], [
        Case("http", [infer(("x-other", "1"))]),
    ]),
    # a pattern RE2 cannot compile matches nothing; the server serves on
    Suite("flags_forward_http_invalid_pattern", AREA, [PARAMS],
          ["--http-header-forward-pattern=x-(fwd"], [
        Case("nothing_forwarded", [infer(("x-fwd", "1"), ("x-fwdx", "2"))]),
    ]),
    Suite("flags_forward_grpc_invalid_pattern", AREA, [PARAMS],
          ["--grpc-header-forward-pattern=*x"], [
        Case("nothing_forwarded", [grpc_infer(("x", "1"), ("ax", "2"))]),
    ]),
]
