"""python_backend's ``pytorch`` example on CPU through a real ``infercore serve``,
in-thread and process-isolated: a model whose ``torch.nn.Module`` adds and subtracts its
two inputs (handed the numpy arrays as they come, as the example's model does), under a
configuration that lists each input and output in an ``input [...]``/``output [...]`` block
of its own and asks for a CPU instance; checked as the example's HTTP client checks it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models
from tritonclient.utils import np_to_triton_dtype

from infercore.testing import RepositoryBuilder

pytest.importorskip("torch")


MODEL_PY = """
import json
from torch import nn
import triton_python_backend_utils as pb_utils


class AddSub(nn.Module):
    def forward(self, first, second):
        return first + second, first - second


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, name)["data_type"])
            for name in ("OUTPUT0", "OUTPUT1")]
        self.net = AddSub()

    def execute(self, requests):
        responses = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            total, difference = self.net(first.as_numpy(), second.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", total.astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", difference.astype(self.dtypes[1]))]))
        return responses
"""

# One block per tensor, as the example's configuration writes them: repeated fields merge.
CONFIG = """
name: "pytorch"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"pytorch_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("pytorch", config=CONFIG, model_py=MODEL_PY)
    with serving_python_models(root, repo.path, request.param, ready_timeout=120,
                               grpc=False) as started:
        yield started


def test_the_pytorch_example_passes_its_clients_checks(server):
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
        response = client.infer("pytorch", inputs, request_id=str(1), outputs=outputs)
        assert response.get_response()["id"] == "1"
        assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0"))
        assert np.allclose(input0_data - input1_data, response.as_numpy("OUTPUT1"))
        # Beyond the client: both blocks of each kind reached the configuration.
        config = client.get_model_config("pytorch")
        assert [io["name"] for io in config["input"]] == ["INPUT0", "INPUT1"]
        assert [io["name"] for io in config["output"]] == ["OUTPUT0", "OUTPUT1"]
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
