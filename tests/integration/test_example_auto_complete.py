"""python_backend's ``auto_complete`` example through a real ``infercore serve``, in-thread
and process-isolated: two models whose config.pbtxt names only the model and its backend,
completed by the model's own ``auto_complete_config`` (inputs and outputs added where the
configuration lacks them, a max batch size of 4 and dynamic batching for the batching one),
checked as the example's client checks them over HTTP: ``max_batch_size`` and each input's
and output's ``data_type`` and ``dims`` from ``get_model_config``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models

from infercore.testing import RepositoryBuilder

MODEL_PY = """
import json
import triton_python_backend_utils as pb_utils

TENSORS = ("0", "1")


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        have_in = [tensor["name"] for tensor in config["input"]]
        have_out = [tensor["name"] for tensor in config["output"]]
        for index in TENSORS:
            if "INPUT" + index not in have_in:
                auto_complete_model_config.add_input(
                    {"name": "INPUT" + index, "data_type": "TYPE_FP32", "dims": [4]})
            if "OUTPUT" + index not in have_out:
                auto_complete_model_config.add_output(
                    {"name": "OUTPUT" + index, "data_type": "TYPE_FP32", "dims": [4]})
        BATCHING
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT" + index)["data_type"])
            for index in TENSORS]

    def execute(self, requests):
        responses = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (first + second).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (first - second).astype(self.dtypes[1]))]))
        return responses
"""

BATCHING = (
    "auto_complete_model_config.set_max_batch_size(4)\n"
    "        auto_complete_model_config.set_dynamic_batching()"
)

EXPECTED_MAX_BATCH_SIZE = {"nobatch_auto_complete": 0, "batch_auto_complete": 4}
EXPECTED_INPUTS = [
    {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
    {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
]
EXPECTED_OUTPUTS = [
    {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
    {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
]


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"auto_complete_{request.param}")
    repo = RepositoryBuilder(root / "models")
    for name, batching in (("nobatch_auto_complete", "pass"), ("batch_auto_complete", BATCHING)):
        repo.add_model(
            name,
            config=f'name: "{name}"\nbackend: "python"\n',
            model_py=MODEL_PY.replace("BATCHING", batching),
        )
    with serving_python_models(root, repo.path, request.param, grpc=False) as started:
        yield started


def _validate_ios(config: list[dict], expected_ios: list[dict], model_name: str) -> None:
    # The example client's check: each expected tensor, where the configuration has it,
    # has the expected data type and dims.
    for io in config:
        for expected_io in expected_ios:
            if io["name"] == expected_io["name"]:
                assert io["data_type"] == expected_io["data_type"], (model_name, io)
                assert io["dims"] == expected_io["dims"], (model_name, io)


@pytest.mark.parametrize("model_name", list(EXPECTED_MAX_BATCH_SIZE))
def test_the_auto_complete_example_passes_its_clients_checks(server, model_name):
    with httpclient.InferenceServerClient(server.http_url) as client:
        model_config = client.get_model_config(model_name)
        assert model_config["max_batch_size"] == EXPECTED_MAX_BATCH_SIZE[model_name]
        _validate_ios(model_config["input"], EXPECTED_INPUTS, model_name)
        _validate_ios(model_config["output"], EXPECTED_OUTPUTS, model_name)
        # Beyond the client: every tensor is there, the batching model batches dynamically.
        assert sorted(io["name"] for io in model_config["input"]) == ["INPUT0", "INPUT1"]
        assert sorted(io["name"] for io in model_config["output"]) == ["OUTPUT0", "OUTPUT1"]
        assert ("dynamic_batching" in model_config) == (model_name == "batch_auto_complete")


@pytest.mark.parametrize("model_name", list(EXPECTED_MAX_BATCH_SIZE))
def test_the_auto_completed_models_infer(server, model_name):
    batched = EXPECTED_MAX_BATCH_SIZE[model_name] > 0
    shape = [1, 4] if batched else [4]
    first = np.arange(4, dtype=np.float32).reshape(shape)
    second = np.full(shape, 0.5, dtype=np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [
            httpclient.InferInput("INPUT0", shape, "FP32"),
            httpclient.InferInput("INPUT1", shape, "FP32"),
        ]
        inputs[0].set_data_from_numpy(first)
        inputs[1].set_data_from_numpy(second)
        result = client.infer(model_name, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
