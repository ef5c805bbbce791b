"""python_backend's ``bls`` example through a real ``infercore serve``, in-thread and
process-isolated: ``bls_sync`` calls the model its MODEL_NAME input names (a numpy string
element, as the example passes it) with ``exec()`` and returns that model's outputs;
``bls_async`` (``async def execute``) calls ``pytorch`` and ``add_sub`` at once with
``async_exec()`` and ``asyncio.gather`` and answers the sum of one and the difference of
the other. Checked as the example's sync and async clients check them over HTTP, the
sync client's call to an undefined model included (it raises, and the next call works).
The ``add_sub`` and ``pytorch`` models are those of test_example_add_sub and
test_example_pytorch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models
from test_example_add_sub import CONFIG as ADD_SUB_CONFIG
from test_example_add_sub import MODEL_PY as ADD_SUB_PY
from test_example_pytorch import CONFIG as PYTORCH_CONFIG
from test_example_pytorch import MODEL_PY as PYTORCH_PY
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from infercore.testing import RepositoryBuilder

pytest.importorskip("torch")


SYNC_PY = """
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            answer = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=answer.output_tensors()))
        return responses
"""

ASYNC_PY = """
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                      pb_utils.get_input_tensor_by_name(request, "INPUT1")]
            pending = [pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=inputs).async_exec() for name in ("pytorch", "add_sub")]
            answers = await asyncio.gather(*pending)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(answers[0], "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(answers[1], "OUTPUT1")]))
        return responses
"""

BLS_CONFIG = """
name: "{name}"
backend: "python"
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}{model_name}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
instance_group [ {{ kind: KIND_CPU }} ]
"""

MODEL_NAME_INPUT = ',\n  { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] }'


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"bls_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("pytorch", config=PYTORCH_CONFIG, model_py=PYTORCH_PY)
    repo.add_model(
        "bls_sync",
        config=BLS_CONFIG.format(name="bls_sync", model_name=MODEL_NAME_INPUT),
        model_py=SYNC_PY,
    )
    repo.add_model(
        "bls_async", config=BLS_CONFIG.format(name="bls_async", model_name=""), model_py=ASYNC_PY
    )
    with serving_python_models(root, repo.path, request.param, ready_timeout=120,
                               grpc=False) as started:
        yield started


def _inputs(shape: list[int], with_model_name: bool) -> tuple[list, np.ndarray, np.ndarray]:
    input0_data = np.random.rand(*shape).astype(np.float32)
    input1_data = np.random.rand(*shape).astype(np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", input0_data.shape, np_to_triton_dtype(input0_data.dtype)),
        httpclient.InferInput("INPUT1", input1_data.shape, np_to_triton_dtype(input1_data.dtype)),
    ]
    if with_model_name:
        inputs.append(httpclient.InferInput("MODEL_NAME", [1], np_to_triton_dtype(np.object_)))
    inputs[0].set_data_from_numpy(input0_data)
    inputs[1].set_data_from_numpy(input1_data)
    return inputs, input0_data, input1_data


OUTPUTS = ["OUTPUT0", "OUTPUT1"]


def test_the_bls_sync_example_passes_its_clients_checks(server):
    inputs, input0_data, input1_data = _inputs([4], with_model_name=True)
    outputs = [httpclient.InferRequestedOutput(name) for name in OUTPUTS]
    with httpclient.InferenceServerClient(server.http_url) as client:
        for target in ("add_sub", "pytorch"):
            inputs[2].set_data_from_numpy(np.array([target], dtype=np.object_))
            response = client.infer("bls_sync", inputs, request_id=str(1), outputs=outputs)
            assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0")), target
            assert np.allclose(input0_data - input1_data, response.as_numpy("OUTPUT1")), target
        inputs[2].set_data_from_numpy(np.array(["undefined_model"], dtype=np.object_))
        with pytest.raises(InferenceServerException) as raised:
            client.infer("bls_sync", inputs, request_id=str(1), outputs=outputs)
        assert "undefined_model" in raised.value.message()
        inputs[2].set_data_from_numpy(np.array(["add_sub"], dtype=np.object_))
        response = client.infer("bls_sync", inputs, request_id=str(1), outputs=outputs)
        assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0"))


def test_the_bls_async_example_passes_its_clients_checks(server):
    inputs, input0_data, input1_data = _inputs([4], with_model_name=False)
    outputs = [httpclient.InferRequestedOutput(name) for name in OUTPUTS]
    with httpclient.InferenceServerClient(server.http_url) as client:
        response = client.infer("bls_async", inputs, request_id=str(1), outputs=outputs)
    assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0"))
    assert np.allclose(input0_data - input1_data, response.as_numpy("OUTPUT1"))
