"""The response cache end to end: a real ``infercore serve --cache-config local,size=N``
answered through tritonclient over HTTP and gRPC, its statistics read back on both
protocols, and its metrics port scraped and parsed as Prometheus does."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from serve_process import ServeOutput as _Serve
from serve_process import free_ports

COUNTER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        return [pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2),
                    pb_utils.Tensor("CALL", np.full((1, 1), self.calls, np.int64))])
                for r in requests]
"""


def _config(name: str, cache: bool) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [
  {{ name: "Y", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "CALL", data_type: TYPE_INT64, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{"response_cache { enable: true }" if cache else ""}
"""


@pytest.fixture
def serve(repo) -> Iterator[tuple[int, int, int]]:
    repo.add_model("cached", config=_config("cached", cache=True), model_py=COUNTER_PY)
    repo.add_model("plain", config=_config("plain", cache=False), model_py=COUNTER_PY)
    http_port, grpc_port, metrics_port = free_ports(3)
    process = _Serve("--model-repository", str(repo.path),
                     "--cache-config", "local,size=1048576",
                     "--http-address", "127.0.0.1", "--http-port", str(http_port),
                     "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
                     "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
                     "--exit-timeout-secs", "5")
    try:
        process.wait_for("infercore is serving")  # every frontend is up
        yield http_port, grpc_port, metrics_port
    finally:
        assert process.stop() == 0


def _http_call(client: httpclient.InferenceServerClient, model: str, value: float) -> int:
    tensor = httpclient.InferInput("X", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2 * value))
    return int(result.as_numpy("CALL")[0, 0])


def _grpc_call(client: grpcclient.InferenceServerClient, model: str, value: float) -> int:
    tensor = grpcclient.InferInput("X", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2 * value))
    return int(result.as_numpy("CALL")[0, 0])


def _scrape(port: int) -> dict[str, dict[str, float]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "model" in sample.labels and sample.name in (family.name,
                                                            family.name + "_total"):
                found.setdefault(family.name, {})[sample.labels["model"]] = sample.value
    return found


def test_cache_hits_over_http_and_grpc_with_exact_statistics_and_metrics(serve):
    http_port, grpc_port, metrics_port = serve
    with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
        assert [_http_call(client, "cached", v) for v in (1, 1, 1, 2)] == [1, 1, 1, 2]
        assert [_http_call(client, "plain", 1) for _ in range(2)] == [1, 2]
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        # a gRPC request hits what an HTTP request put in the cache
        assert [_grpc_call(grpc, "cached", v) for v in (2, 1, 3)] == [2, 1, 3]
        stats = grpc.get_inference_statistics("cached").model_stats[0]
        inference = stats.inference_stats
        assert (inference.success.count, inference.fail.count) == (7, 0)
        assert (stats.inference_count, stats.execution_count) == (3, 3)
        assert (inference.cache_hit.count, inference.cache_miss.count) == (4, 3)
        assert inference.queue.count == 7 and inference.compute_infer.count == 3
        assert inference.cache_hit.ns > 0 and inference.cache_miss.ns > 0
    finally:
        grpc.close()
    with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
        document = client.get_inference_statistics("cached")["model_stats"][0]
        plain = client.get_inference_statistics("plain")["model_stats"][0]
    inference_stats = document["inference_stats"]
    assert inference_stats["success"]["count"] == 7
    assert (document["inference_count"], document["execution_count"]) == (3, 3)
    assert inference_stats["cache_hit"]["count"] == 4
    assert inference_stats["cache_miss"]["count"] == 3
    assert inference_stats["cache_hit"]["ns"] == inference.cache_hit.ns
    assert plain["inference_stats"]["cache_hit"] == {"count": 0, "ns": 0}
    assert plain["inference_stats"]["cache_miss"] == {"count": 0, "ns": 0}

    found = _scrape(metrics_port)
    assert found["nv_cache_num_hits_per_model"] == {"cached": 4.0}
    assert found["nv_cache_num_misses_per_model"] == {"cached": 3.0}
    assert found["nv_cache_hit_duration_per_model"] == {
        "cached": float(inference.cache_hit.ns // 1000)}
    assert found["nv_inference_request_success"] == {"cached": 7.0, "plain": 2.0}
    assert found["nv_inference_count"] == {"cached": 3.0, "plain": 2.0}
    assert found["nv_inference_exec_count"] == {"cached": 3.0, "plain": 2.0}
