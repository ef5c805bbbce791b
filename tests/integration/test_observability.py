"""Observability end to end: the metrics port of a real ``infercore serve`` after known
traffic (tritonclient over HTTP, as users send it), and logging changed at runtime."""

from __future__ import annotations

import http.client
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from serve_process import ServeOutput as _Serve
from serve_process import free_ports

from infercore import Server

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

LOGGING_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tag = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0, 0]
            pb_utils.Logger.log_info(f"info message {int(tag)}")
            pb_utils.Logger.log_warn(f"warning message {int(tag)}")
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


@pytest.fixture
def repository(repo, add_sub_source) -> Path:
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    return repo.path


@pytest.fixture
def serve(repository) -> Iterator[tuple[_Serve, int, int]]:
    http_port, metrics_port = free_ports(2)
    process = _Serve("--model-repository", str(repository), "--allow-grpc=false",
                     "--http-address", "127.0.0.1", "--http-port", str(http_port),
                     "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
                     "--exit-timeout-secs", "5")
    try:
        process.wait_for("Started Metrics Service")
        process.wait_for("infercore is serving")  # every frontend is up
        yield process, http_port, metrics_port
    finally:
        assert process.stop() == 0


def _scrape(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return (response.status, response.getheader("Content-Type") or "",
                response.read().decode())
    finally:
        connection.close()


def test_metrics_port_of_infercore_serve_counts_http_traffic(serve):
    _, http_port, metrics_port = serve
    data = np.ones((1, 4), np.float32)
    with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
        for _ in range(3):
            inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"),
                      httpclient.InferInput("INPUT1", [1, 4], "FP32")]
            for tensor in inputs:
                tensor.set_data_from_numpy(data)
            client.infer("add_sub", inputs)
    status, content_type, text = _scrape(metrics_port)
    assert status == 200 and content_type == "text/plain; charset=utf-8"
    found = {family.name: family for family in text_string_to_metric_families(text)}
    success = {s.labels["model"]: s.value for s in found["nv_inference_request_success"].samples}
    assert success == {"add_sub": 3.0}
    count = found["nv_inference_count"].samples[0]
    assert (count.labels, count.value) == ({"model": "add_sub", "version": "1"}, 3.0)
    assert "nv_cpu_utilization" in found
    assert _scrape(metrics_port, "/other")[:2] == (200, "text/plain; charset=utf-8")


@pytest.fixture
def infercore_logger():
    yield
    logging.getLogger("infercore").setLevel(logging.NOTSET)


def test_log_settings_change_at_runtime_and_reach_the_log_file(repo, tmp_path,
                                                               infercore_logger):
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=LOGGING_PY)
    first, second = tmp_path / "first.log", tmp_path / "second.log"

    def infer(server: Server, tag: int) -> None:
        data = np.full((1, 4), tag, np.float32)
        server.model("add_sub").infer(inputs={"INPUT0": data, "INPUT1": data}).result()

    with Server(model_repository=repo.path, log_file=str(first)) as server:
        infer(server, 1)
        settings = server.update_log_settings(log_info=False)
        assert settings["log_info"] is False
        infer(server, 2)
        server.update_log_settings(log_info=True, log_file=str(second), log_format="ISO8601")
        infer(server, 3)
    text = first.read_text()
    # pb_utils.Logger lands in the server's log as Triton writes it: the model's file and
    # line, the message in quotes (tests/conformance/cases/logging.py)
    assert '] "info message 1"' in text and '] "warning message 1"' in text
    assert "info message 2" not in text and '] "warning message 2"' in text
    assert "message 3" not in text
    later = second.read_text()
    assert ' model.py:' in later and '] "info message 3"' in later
    assert later[:4].isdigit()  # ISO8601 from the switch on
