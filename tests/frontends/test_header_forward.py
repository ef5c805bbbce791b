"""--http/--grpc-header-forward-pattern through real sockets and the real tritonclient:
what Triton forwards (tests/conformance/cases/flags_forward.py records it)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from infercore import Server
from infercore.frontends.header_forward import compile_forward_pattern
from infercore.testing import RepositoryBuilder

PARAMS_CONFIG = """
name: "params"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "PARAMS", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

PARAMS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "PARAMS", np.array([r.parameters().encode()], dtype=np.object_))])
            for r in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = RepositoryBuilder(tmp_path_factory.mktemp("forward") / "models")
    repo.add_model("params", config=PARAMS_CONFIG, model_py=PARAMS_PY)
    with Server(model_repository=repo.path) as server:
        yield server


def _http_parameters(url: str, headers: dict[str, str],
                     parameters: dict[str, str] | None = None) -> dict[str, str]:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    with httpclient.InferenceServerClient(url) as client:
        result = client.infer("params", [tensor], headers=headers, parameters=parameters)
    return json.loads(result.as_numpy("PARAMS")[0])


def _grpc_parameters(url: str, metadata: dict[str, str]) -> dict[str, str]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    with grpcclient.InferenceServerClient(url) as client:
        result = client.infer("params", [tensor], headers=metadata)
    return json.loads(result.as_numpy("PARAMS")[0])


def test_http_forwards_names_matching_anywhere_in_any_case(server):
    with server.serve_http(address="127.0.0.1", port=0,
                           header_forward_pattern="x-fwd-.*") as endpoint:
        forwarded = _http_parameters(endpoint.url, {
            "X-Fwd-One": "a", "my-x-fwd-key": "inside", "x-other": "no", "fwd-two": "no"})
        # the header wins over a body parameter of the same name
        overridden = _http_parameters(endpoint.url, {"x-fwd-one": "header"},
                                      parameters={"x-fwd-one": "body", "kept": "yes"})
    assert {key.lower(): value for key, value in forwarded.items()} == {
        "x-fwd-one": "a", "my-x-fwd-key": "inside"}
    assert overridden == {"x-fwd-one": "header", "kept": "yes"}


def test_grpc_forwards_metadata_matching_in_any_case(server):
    with server.serve_grpc(address="127.0.0.1", port=0,
                           header_forward_pattern="^(ALPHA|beta)$") as endpoint:
        forwarded = _grpc_parameters(endpoint.url, {"alpha": "1", "beta": "2",
                                                    "alphabet": "3"})
    assert forwarded == {"alpha": "1", "beta": "2"}


def test_a_pattern_that_does_not_compile_forwards_nothing(server, caplog):
    with caplog.at_level(logging.ERROR):
        endpoint = server.serve_http(address="127.0.0.1", port=0,
                                     header_forward_pattern="x-(fwd")
    with endpoint:
        assert _http_parameters(endpoint.url, {"x-fwd": "1"}) == {}
    assert "--http-header-forward-pattern 'x-(fwd' is not a valid regular expression" \
        in caplog.text


def test_no_pattern_forwards_nothing():
    assert compile_forward_pattern("", "http-header-forward-pattern") is None
    pattern = compile_forward_pattern("^x-", "grpc-header-forward-pattern")
    assert pattern is not None and pattern.search("X-Key") and not pattern.search("a-x-")
