"""The SageMaker and Vertex AI frontends of ``infercore serve`` over real sockets.

Bodies are built and read with the real ``tritonclient`` (its request-body and
response-body codecs, as SageMaker's and Vertex AI's Triton examples use them) and sent
with ``http.client`` to the cloud routes; the KServe frontend, where it runs beside them,
is asked with ``tritonclient.http``. Each bad request is followed by a good one.
"""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import tritonclient.http as httpclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import ServeProcess, free_port

from infercore.testing import RepositoryBuilder

SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
PREDICT = "/v1/endpoints/5/deployedModels/9:predict"
A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.ones((2, 4), dtype=np.float32)
OOM_CONFIG = """
name: "oom"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ -1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ -1 ] } ]
"""
OOM_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError(
            "CUDA out of memory: tried to allocate")) for _ in requests]
"""


def _inputs(binary: bool) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", A), ("INPUT1", B)):
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return inputs


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read())
    finally:
        connection.close()


def _infer(port: int, path: str, mime: str, *, binary: bool = True,
           headers: dict[str, str] | None = None) -> httpclient.InferResult:
    """An add_sub inference through a cloud route, framed by tritonclient."""
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        _inputs(binary), outputs=outputs)
    sent = dict(headers or {})
    if json_size is not None:
        sent["Content-Type"] = f"{mime}{json_size}"
    status, answer_headers, answer = _request(port, "POST", path, body, sent)
    assert status == 200, answer
    content_type = answer_headers.get("content-type", "")
    if content_type.startswith(SAGEMAKER_MIME):
        length: int | None = int(content_type[len(SAGEMAKER_MIME):])
    else:
        length = (int(answer_headers["inference-header-content-length"])
                  if "inference-header-content-length" in answer_headers else None)
    return httpclient.InferenceServerClient.parse_response_body(answer, header_length=length)


def _check_add_sub(result: httpclient.InferResult) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def _archive(root: Path, name: str, config: str, model_py: str) -> Path:
    """A SageMaker model archive folder, unpacked: ``<archive>/<model folder>``."""
    RepositoryBuilder(root / name).add_model("model", config=config, model_py=model_py)
    return root / name


class Cloud(NamedTuple):
    """A server with a cloud frontend: ``port`` is the cloud frontend's."""

    process: ServeProcess
    port: int
    root: Path

    @property
    def http_url(self) -> str:
        return self.process.http_url


# -- SageMaker ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sagemaker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    root = tmp_path_factory.mktemp("sagemaker")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    port = free_port()
    process = ServeProcess(
        root / "server.log", f"--model-repository={repo.path}",
        "--model-control-mode=explicit", "--load-model=add_sub",
        "--allow-sagemaker=true", f"--sagemaker-port={port}", "--sagemaker-thread-count=2",
        grpc=False, env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub"})
    try:
        process.wait_ready()
        process.wait_log(f"Started Sagemaker HTTPService at 0.0.0.0:{port}")
        yield Cloud(process, port, root)
    finally:
        process.stop()


def test_sagemaker_ping_answers_readiness(sagemaker):
    port = sagemaker.port
    assert _request(port, "GET", "/ping")[0] == 200
    assert _request(port, "POST", "/ping")[0] == 405
    assert _request(port, "GET", "/ping/")[0] == 400  # the route is matched whole
    assert _request(port, "GET", "/ping")[0] == 200


def test_sagemaker_invocations_run_the_default_model(sagemaker):
    port = sagemaker.port
    _check_add_sub(_infer(port, "/invocations", SAGEMAKER_MIME))  # binary in and out
    _check_add_sub(_infer(port, "/invocations", SAGEMAKER_MIME, binary=False))  # JSON in


def test_sagemaker_invocations_answer_bad_bodies_then_keep_serving(sagemaker):
    port = sagemaker.port
    status, _, body = _request(port, "POST", "/invocations", b"{")
    assert status == 500
    assert json.loads(body) == {"error": "failed to parse the request JSON buffer: Missing a "
                                         "name for object member. at 1"}
    status, headers, body = _request(
        port, "POST", "/invocations", b"{}", {"Content-Type": f"{SAGEMAKER_MIME}99"})
    assert (status, headers["content-type"]) == (400, "text/plain")
    assert json.loads(body) == {"error": "inference header size should be in range (0, 2), "
                                         "got: 99"}
    status, _, _ = _request(port, "GET", "/invocations")
    assert status == 405
    _check_add_sub(_infer(port, "/invocations", SAGEMAKER_MIME))


def test_sagemaker_multi_model_endpoint_loads_invokes_and_unloads(sagemaker):
    port = sagemaker.port
    archive = _archive(sagemaker.root, "archive1", ADD_SUB_CONFIG, ADD_SUB_PY)
    load = json.dumps({"model_name": "m1", "url": str(archive)}).encode()
    assert _request(port, "POST", "/models", load)[:1] == (200,)
    status, _, body = _request(port, "GET", "/models")
    assert (status, json.loads(body)) == (200, {"models": [
        {"modelName": "m1", "modelUrl": str(archive)}]})
    _check_add_sub(_infer(port, "/models/m1/invoke", SAGEMAKER_MIME))
    # the model is served under its SageMaker name by the KServe frontend too
    client = httpclient.InferenceServerClient(sagemaker.http_url)
    assert client.is_model_ready("m1")
    assert client.get_model_config("m1")["name"] == "m1"
    # loading the same archive again conflicts; a folder that is not there is refused
    status, _, body = _request(port, "POST", "/models", load)
    assert status == 409 and "has already been registered" in json.loads(body)["error"]
    missing = json.dumps({"model_name": "m2", "url": str(archive / "none")}).encode()
    status, _, body = _request(port, "POST", "/models", missing)
    assert status == 400 and "repository not found" in json.loads(body)["error"]
    assert _request(port, "POST", "/models/m2/invoke", b"{}")[0] == 404
    assert _request(port, "DELETE", "/models/m1")[0] == 200
    assert _request(port, "GET", "/models/m1")[0] == 404
    assert _request(port, "POST", "/models/m1/invoke", b"{}")[0] == 404
    assert not client.is_model_ready("m1")
    # an unloaded archive may be loaded again
    assert _request(port, "POST", "/models", load)[0] == 200
    _check_add_sub(_infer(port, "/models/m1/invoke", SAGEMAKER_MIME))
    assert _request(port, "DELETE", "/models/m1")[0] == 200


def test_sagemaker_target_model_header_names_the_served_model(sagemaker):
    port = sagemaker.port
    archive = _archive(sagemaker.root, "archive2", ADD_SUB_CONFIG, ADD_SUB_PY)
    target = {"X-Amzn-SageMaker-Target-Model": "model.tar.gz"}
    load = json.dumps({"model_name": "hash2", "url": str(archive)}).encode()
    assert _request(port, "POST", "/models", load, target)[0] == 200
    _check_add_sub(_infer(port, "/models/hash2/invoke", SAGEMAKER_MIME, headers=target))
    client = httpclient.InferenceServerClient(sagemaker.http_url)
    assert client.is_model_ready("model.tar.gz")
    assert _request(port, "DELETE", "/models/hash2", None, target)[0] == 200
    assert not client.is_model_ready("model.tar.gz")


def test_sagemaker_out_of_memory_failures_answer_507(sagemaker):
    port = sagemaker.port
    archive = _archive(sagemaker.root, "oom", OOM_CONFIG.replace('"oom"', '"model"'), OOM_PY)
    load = json.dumps({"model_name": "oom", "url": str(archive)}).encode()
    assert _request(port, "POST", "/models", load)[0] == 200
    body = json.dumps({"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32",
                                   "data": [1]}]}).encode()
    status, _, answer = _request(port, "POST", "/models/oom/invoke", body)
    assert (status, json.loads(answer)) == (507, {"error": "CUDA out of memory: tried to "
                                                           "allocate"})
    assert _request(port, "DELETE", "/models/oom")[0] == 200
    _check_add_sub(_infer(port, "/invocations", SAGEMAKER_MIME))


# -- Vertex AI ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    root = tmp_path_factory.mktemp("vertex")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)
    port = free_port()
    # AIP_MODE=PREDICTION: Vertex AI on AIP_HTTP_PORT, HTTP and gRPC off unless asked for
    process = ServeProcess(
        root / "server.log",
        command=lambda _: [sys.executable, "-m", "infercore", "serve",
                           f"--model-repository={repo.path}",
                           "--metrics-address=127.0.0.1", f"--metrics-port={free_port()}",
                           "--vertex-ai-default-model=add_sub",
                           "--vertex-ai-thread-count=2"],
        env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port),
             "AIP_PREDICT_ROUTE": "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict",
             "AIP_HEALTH_ROUTE": "/health"})
    try:
        process.wait_log(f"Started Vertex AI HTTPService at 0.0.0.0:{port}")
        process.wait_log("infercore is serving")
        yield Cloud(process, port, root)
    finally:
        process.stop()


def test_vertex_prediction_mode_serves_only_vertex_ai(vertex):
    log = vertex.process.log()
    assert "Started HTTPService" not in log and "Started GRPCInferenceService" not in log
    assert _request(vertex.port, "GET", "/health")[0] == 200


def test_vertex_predict_runs_the_default_model(vertex):
    port = vertex.port
    _check_add_sub(_infer(port, PREDICT, VERTEX_MIME))
    _check_add_sub(_infer(port, PREDICT, VERTEX_MIME, binary=False))
    status, _, body = _request(port, "POST", "/v1/endpoints/x/deployedModels/9:predict", b"{}")
    assert (status, body) == (400, b"")  # the route pattern is matched whole
    status, _, body = _request(port, "POST", PREDICT, b"[1,")
    assert status == 500 and "Invalid value. at 3" in json.loads(body)["error"]
    _check_add_sub(_infer(port, PREDICT, VERTEX_MIME))


def test_vertex_redirect_reaches_kserve_routes(vertex):
    port = vertex.port
    redirect = {"X-Vertex-Ai-Triton-Redirect": "v2/models/spare/infer"}
    result = _infer(port, PREDICT, VERTEX_MIME, headers=redirect)
    assert result.get_response()["model_name"] == "spare"
    _check_add_sub(result)
    status, _, body = _request(port, "POST", PREDICT, None,
                               {"X-Vertex-Ai-Triton-Redirect": "v2/models/spare"})
    assert status == 200 and json.loads(body)["name"] == "spare"
    status, _, body = _request(port, "POST", PREDICT, None,
                               {"X-Vertex-Ai-Triton-Redirect": "v2/repository/index"})
    assert status == 200 and [m["name"] for m in json.loads(body)] == ["add_sub", "spare"]
    status, _, body = _request(port, "POST", PREDICT, None,
                               {"X-Vertex-Ai-Triton-Redirect": "metrics"})
    assert status == 200 and b"nv_inference_request_success" in body
    # only POST carries a redirect, and only to the routes Triton redirects to
    assert _request(port, "GET", PREDICT, None,
                    {"X-Vertex-Ai-Triton-Redirect": "v2/health/ready"})[0] == 405
    assert _request(port, "POST", PREDICT, None,
                    {"X-Vertex-Ai-Triton-Redirect": "v2/logging"})[0] == 400
    assert _request(port, "POST", PREDICT, None,
                    {"X-Vertex-Ai-Triton-Redirect": "v2/health/ready"})[0] == 200


def test_vertex_without_routes_stops_at_start_up(tmp_path):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    process = ServeProcess(tmp_path / "server.log", f"--model-repository={repo.path}",
                           "--allow-vertex-ai=true", f"--vertex-ai-port={free_port()}",
                           env={"AIP_HEALTH_ROUTE": "/health"})
    try:
        assert process.wait_exit(60) == 1
        last = process.log().rstrip().splitlines()[-1]  # tritonserver's last words
        assert ("failed to start Vertex AI service: Invalid argument - API_PREDICT_ROUTE is "
                "not defined for Vertex AI endpoint") in last
    finally:
        process.stop()
