"""python_backend's ``add_sub`` example through a real ``infercore serve``, in-thread and
process-isolated: a model that returns the sum and the difference of its two FP32 inputs,
in the output types its configuration names; checked as the example's client checks it,
over HTTP as the example does and over gRPC with the same calls."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models
from tritonclient.utils import np_to_triton_dtype

from infercore.testing import RepositoryBuilder

CLIENTS = {"http": httpclient, "grpc": grpcclient}

MODEL_PY = """
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.model_config, name)["data_type"])
            for name in ("OUTPUT0", "OUTPUT1")]

    def execute(self, requests):
        responses = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (first + second).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (first - second).astype(self.dtypes[1]))]))
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

CONFIG = """
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"add_sub_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=CONFIG, model_py=MODEL_PY)
    with serving_python_models(root, repo.path, request.param) as started:
        yield started


@pytest.mark.parametrize("protocol", list(CLIENTS))
def test_the_add_sub_example_passes_its_clients_checks(server, protocol):
    tritonclient = CLIENTS[protocol]
    url = server.http_url if protocol == "http" else server.grpc_url
    shape = [4]
    with tritonclient.InferenceServerClient(url) as client:
        input0_data = np.random.rand(*shape).astype(np.float32)
        input1_data = np.random.rand(*shape).astype(np.float32)
        inputs = [
            tritonclient.InferInput(
                "INPUT0", input0_data.shape, np_to_triton_dtype(input0_data.dtype)
            ),
            tritonclient.InferInput(
                "INPUT1", input1_data.shape, np_to_triton_dtype(input1_data.dtype)
            ),
        ]
        inputs[0].set_data_from_numpy(input0_data)
        inputs[1].set_data_from_numpy(input1_data)
        outputs = [
            tritonclient.InferRequestedOutput("OUTPUT0"),
            tritonclient.InferRequestedOutput("OUTPUT1"),
        ]
        response = client.infer("add_sub", inputs, request_id=str(1), outputs=outputs)
        result = response.get_response()
        assert (result["id"] if protocol == "http" else result.id) == "1"
        output0_data = response.as_numpy("OUTPUT0")
        output1_data = response.as_numpy("OUTPUT1")
        assert np.allclose(input0_data + input1_data, output0_data)
        assert np.allclose(input0_data - input1_data, output1_data)
        assert output0_data.dtype == output1_data.dtype == np.float32
