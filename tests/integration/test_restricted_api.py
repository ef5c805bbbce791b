"""Triton's restricted APIs over real HTTP and gRPC, with tritonclient.

One server restricts the model-repository and logging endpoints (HTTP) and the
model-repository and trace methods (gRPC) to an admin header, and inference (both) to
another; health, metadata and the rest stay open.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import ServeProcess, http_status
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

# tritonclient adds its own headers to the dict it is given: each call gets a copy.
_ADMIN = {"admin-key": "admin-value"}
_INFER = {"infer-key": "infer-value"}
_GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "admin-value"}
_GRPC_INFER = {"triton-grpc-protocol-infer-key": "infer-value"}
HTTP_REFUSED = "This API is restricted, expecting header '{}'"
GRPC_REFUSED = "This protocol is restricted, expecting header 'triton-grpc-protocol-{}'"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root: Path = tmp_path_factory.mktemp("restricted")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)
    process = ServeProcess(
        root / "server.log", f"--model-repository={repo.path}",
        "--model-control-mode=explicit", "--load-model=add_sub",
        "--http-restricted-api=model-repository,logging:admin-key=admin-value",
        "--http-restricted-api", "inference:infer-key=infer-value",
        "--grpc-restricted-protocol=model-repository,trace:admin-key=admin-value",
        "--grpc-restricted-protocol=inference:infer-key=infer-value",
        "--allow-client-shm=true")  # shared memory is served, and not restricted
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture
def http_client(server: ServeProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture
def grpc_client(server: ServeProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def _inputs(module: object) -> list:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 4], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(a)
        tensors.append(tensor)
    return tensors


# -- HTTP ----------------------------------------------------------------------------------
def test_http_restricted_endpoints_need_their_header(http_client):
    for call in (lambda h: http_client.get_model_repository_index(headers=h),
                 lambda h: http_client.get_log_settings(headers=h),
                 lambda h: http_client.load_model("spare", headers=h)):
        with pytest.raises(InferenceServerException) as refused:
            call(None)
        assert refused.value.status() == "403"
        assert refused.value.message() == HTTP_REFUSED.format("admin-key")
        with pytest.raises(InferenceServerException):
            call({"admin-key": "wrong"})
        call(dict(_ADMIN))
    assert http_client.is_model_ready("spare")
    http_client.unload_model("spare", headers=dict(_ADMIN))


def test_http_inference_has_its_own_header(http_client):
    with pytest.raises(InferenceServerException) as refused:
        http_client.infer("add_sub", _inputs(httpclient))
    assert refused.value.status() == "403"
    assert refused.value.message() == HTTP_REFUSED.format("infer-key")
    with pytest.raises(InferenceServerException):
        # the other group's key does not open this one
        http_client.infer("add_sub", _inputs(httpclient), headers=dict(_ADMIN))
    result = http_client.infer("add_sub", _inputs(httpclient), headers=dict(_INFER))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0, 2, 4, 6]])


def test_http_unrestricted_categories_stay_open(http_client, server):
    assert http_client.is_server_live() and http_client.is_server_ready()
    assert http_client.is_model_ready("add_sub")
    assert http_client.get_server_metadata()["name"] == "triton"
    assert http_client.get_model_metadata("add_sub")["name"] == "add_sub"
    assert http_client.get_model_config("add_sub")["name"] == "add_sub"
    assert http_client.get_inference_statistics("add_sub")["model_stats"]
    assert http_client.get_trace_settings() is not None
    assert http_client.get_system_shared_memory_status() == []


def test_http_header_names_are_case_insensitive_and_paths_unknown_stay_404(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)

    def post(path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        connection.request("POST", path, body=b"{}", headers=headers)
        response = connection.getresponse()
        return response.status, response.reason, response.read()

    assert post("/v2/repository/index", {"Admin-Key": "admin-value"})[0] == 200
    assert post("/v2/repository/index", {"ADMIN-KEY": "admin-value"})[0] == 200
    assert post("/v2/repository/index", {"admin-key": "Admin-Value"})[:2] == (403, "Forbidden")
    assert post("/v2/repository/index", {})[2] == (
        b'{"error":"This API is restricted, expecting header \'admin-key\'"}')
    assert post("/v2/nothing/here", {})[0] == 404
    connection.close()


def _chunked_answer(port: int, method: str, path: str, body: bytes,
                    head: dict[str, str], trailer: dict[str, str]) -> tuple[int, bytes]:
    """A request whose body is sent chunked, with ``trailer`` fields after the last
    chunk, over a real socket."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked",
             *(f"{k}: {v}" for k, v in head.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    request += (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n"
    request += "".join(f"{k}: {v}\r\n" for k, v in trailer.items()).encode() + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, response.read()


_INFER_BODY = json.dumps({"inputs": [
    {"name": name, "shape": [1, 4], "datatype": "FP32", "data": [0, 1, 2, 3]}
    for name in ("INPUT0", "INPUT1")]}).encode()


@pytest.mark.parametrize(("method", "path", "body", "key"), [
    ("POST", "/v2/models/add_sub/infer", _INFER_BODY, _INFER),
    ("POST", "/v2/models/add_sub/versions/1/infer", _INFER_BODY, _INFER),
    ("POST", "/v2/repository/index", b"{}", _ADMIN),
    ("POST", "/v2/repository/models/spare/load", b"{}", _ADMIN),
    ("POST", "/v2/repository/models/spare/unload", b"{}", _ADMIN),
    ("POST", "/v2/logging", b"{}", _ADMIN),
    ("GET", "/v2/logging", b"", _ADMIN),
])
def test_a_key_sent_in_a_chunked_trailer_is_not_honoured(server, method, path, body, key):
    (name, value), = key.items()

    status, answer = _chunked_answer(server.http_port, method, path, body, {}, key)

    assert status == 403
    assert json.loads(answer) == {"error": HTTP_REFUSED.format(name)}
    # the key in the head opens it; a wrong one in the trailer does not close it again
    status, answer = _chunked_answer(server.http_port, method, path, body, key,
                                     {name: "wrong"})
    assert status == 200, answer
    assert http_status(server.http_port, "/v2/health/live") == 200


# -- gRPC ----------------------------------------------------------------------------------
def test_grpc_restricted_methods_need_their_metadata(grpc_client):
    for call in (lambda h: grpc_client.get_model_repository_index(headers=h),
                 lambda h: grpc_client.get_trace_settings(headers=h),
                 lambda h: grpc_client.load_model("spare", headers=h)):
        with pytest.raises(InferenceServerException) as refused:
            call(None)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert refused.value.message() == GRPC_REFUSED.format("admin-key")
        with pytest.raises(InferenceServerException):
            call({"triton-grpc-protocol-admin-key": "wrong"})
        with pytest.raises(InferenceServerException):
            call(dict(_ADMIN))  # the HTTP spelling of the header is not the gRPC one
        call(dict(_GRPC_ADMIN))
    assert grpc_client.is_model_ready("spare")
    grpc_client.unload_model("spare", headers=dict(_GRPC_ADMIN))


def test_grpc_inference_and_streams_have_their_own_metadata(grpc_client):
    with pytest.raises(InferenceServerException) as refused:
        grpc_client.infer("add_sub", _inputs(grpcclient))
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert refused.value.message() == GRPC_REFUSED.format("infer-key")
    result = grpc_client.infer("add_sub", _inputs(grpcclient), headers=dict(_GRPC_INFER))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [[0, 0, 0, 0]])

    answers: queue.Queue = queue.Queue()
    grpc_client.start_stream(lambda result, error: answers.put((result, error)))
    try:
        grpc_client.async_stream_infer("add_sub", _inputs(grpcclient))
    except InferenceServerException:
        pass  # the refusal may have closed the stream already: it reaches the callback
    result, error = answers.get(timeout=30)
    grpc_client.stop_stream()
    assert result is None
    assert GRPC_REFUSED.format("infer-key") in str(error)

    grpc_client.start_stream(lambda result, error: answers.put((result, error)),
                             headers=dict(_GRPC_INFER))
    grpc_client.async_stream_infer("add_sub", _inputs(grpcclient))
    result, error = answers.get(timeout=30)
    grpc_client.stop_stream()
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0, 2, 4, 6]])


def test_grpc_unrestricted_methods_stay_open(grpc_client):
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    assert grpc_client.is_model_ready("add_sub")
    assert grpc_client.get_server_metadata().name == "triton"
    assert grpc_client.get_model_config("add_sub").config.name == "add_sub"
    assert grpc_client.get_inference_statistics("add_sub").model_stats
    assert grpc_client.get_log_settings() is not None  # logging is restricted over HTTP only
    assert grpc_client.get_system_shared_memory_status() is not None
