"""python_backend's ``custom_metrics`` example through a real ``infercore serve``,
in-thread and process-isolated: a model that adds and subtracts its two inputs and counts,
in a custom counter family of its own (``pb_utils.MetricFamily`` and one labelled
``Metric``), the nanoseconds it spent; checked as the example's client checks it: the sum
and difference over HTTP, then the family's HELP and TYPE lines and its labelled sample in
the server's /metrics text.

The kind is ``pb_utils.MetricFamily.COUNTER``, as python_backend's README writes it: the
stored example's ``pb_utils.COUNTER`` is not a name of Triton's module (its stub copies
only ``MetricFamily`` across from ``c_python_backend_utils``), and Triton 2.51 fails that
model's load with "AttributeError: module 'triton_python_backend_utils' has no attribute
'COUNTER'"; infercore fails it the same way."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models
from tritonclient.utils import np_to_triton_dtype

from infercore.testing import RepositoryBuilder

MODEL_PY = """
import json
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, name)["data_type"])
            for name in ("OUTPUT0", "OUTPUT1")]
        self.metric_family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.metric_family.Metric(
            labels={"model": "custom_metrics", "version": "1"})

    def execute(self, requests):
        began = time.time_ns()
        responses = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (first + second).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (first - second).astype(self.dtypes[1]))]))
        self.metric.increment(time.time_ns() - began)
        print("Cumulative requests processing latency:", self.metric.value())
        return responses
"""

CONFIG = """
name: "custom_metrics"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"custom_metrics_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("custom_metrics", config=CONFIG, model_py=MODEL_PY)
    with serving_python_models(root, repo.path, request.param, grpc=False, metrics=True) as started:
        yield started


def get_metrics(server: ServeProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as answer:
        assert answer.status == 200
        return answer.read().decode()


def test_the_custom_metrics_example_passes_its_clients_checks(server):
    shape = [4]
    with httpclient.InferenceServerClient(server.http_url) as client:
        input0_data = np.random.rand(*shape).astype(np.float32)
        input1_data = np.random.rand(*shape).astype(np.float32)
        inputs = [
            httpclient.InferInput(
                "INPUT0", input0_data.shape, np_to_triton_dtype(input0_data.dtype)
            ),
            httpclient.InferInput(
                "INPUT1", input1_data.shape, np_to_triton_dtype(input1_data.dtype)
            ),
        ]
        inputs[0].set_data_from_numpy(input0_data)
        inputs[1].set_data_from_numpy(input1_data)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0"),
            httpclient.InferRequestedOutput("OUTPUT1"),
        ]
        response = client.infer("custom_metrics", inputs, request_id=str(1), outputs=outputs)
        assert response.get_response()["id"] == "1"
        assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0"))
        assert np.allclose(input0_data - input1_data, response.as_numpy("OUTPUT1"))
    metrics = get_metrics(server)
    patterns = [
        "# HELP requests_process_latency_ns Cumulative time spent processing requests",
        "# TYPE requests_process_latency_ns counter",
        'requests_process_latency_ns{model="custom_metrics",version="1"}',
    ]
    for pattern in patterns:
        assert pattern in metrics, metrics
    # Beyond the client: the counter holds the time spent, more than nothing.
    sample = re.search(
        r'^requests_process_latency_ns\{model="custom_metrics",version="1"\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    assert sample is not None and float(sample.group(1)) > 0, metrics
