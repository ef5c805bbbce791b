"""Warmup through the server: samples run on every active instance before READY."""

from __future__ import annotations

from infercore import Server

WARMUP_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 2 ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 2 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
model_warmup [ {{ name: "zeros" batch_size: 2 count: 3
                 inputs {{ key: "X"
                          value: {{ data_type: TYPE_FP32 dims: [ 2 ] zero_data: true }} }} }} ]
"""

ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""

FAILING_PY = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("cold start failed")
"""


def test_warmup_runs_on_each_instance_before_ready(repo):
    repo.add_model("warm", config=WARMUP_CONFIG.format(name="warm"), model_py=ECHO_PY)
    with Server(model_repository=repo.path) as server:
        stats = server.model("warm").statistics()[0]
        # 2 instances x 3 runs, each run one execution of 2 requests (as Triton counts them)
        assert stats.execution_count == 6 and stats.inference_count == 12
        assert stats.instance_executions == {"warm_0_0": 3, "warm_0_1": 3}


def test_failing_warmup_fails_the_load_with_the_sample_name(repo):
    repo.add_model("cold", config=WARMUP_CONFIG.format(name="cold"), model_py=FAILING_PY)
    with Server(model_repository=repo.path, exit_on_error=False) as server:
        (entry,) = server.repository_index()
        assert entry.state.value == "UNAVAILABLE"
        assert "failed to run warmup sample 'zeros'" in entry.reason
        assert "cold start failed" in entry.reason
