"""BLS from a process-isolated Python model, through a real ``infercore serve`` process and
the real ``tritonclient``: the client sees one model; its worker calls two others."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import HttpServeProcess as ServeProcess
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

PIPELINE_CONFIG = f"""
name: "pipeline"
backend: "python"
max_batch_size: 8
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }}
]
output [
  {{ name: "SUM", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "TOKENS", data_type: TYPE_INT32, dims: [ -1 ] }},
  {{ name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }}
]
{PROCESS}
"""

# add_sub (one call), then tokens (a decoupled stream of as many responses as SUM[0]).
PIPELINE_PY = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "add_sub")
            summed = pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")]).exec()
            if summed.has_error():
                raise pb_utils.TritonModelException(summed.error().message())
            total = pb_utils.get_output_tensor_by_name(summed, "OUTPUT0").as_numpy()
            count = pb_utils.Tensor("COUNT", np.array([int(total[0, 0])], np.int32))
            # as in Triton, the final flag sent alone comes as a last, empty response
            tokens = [int(r.output_tensors()[0].as_numpy()[0])
                      for r in pb_utils.InferenceRequest(
                          model_name="tokens", requested_output_names=["OUT"],
                          inputs=[count]).exec(decoupled=True) if r.output_tensors()]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", total),
                pb_utils.Tensor("TOKENS", np.array([tokens], np.int32)),
                pb_utils.Tensor("PID", np.array([[os.getpid()]], np.int64)),
            ]))
        return responses
"""

TOKENS_CONFIG = """
name: "tokens"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

TOKENS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            for i in range(count):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i * i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("isolated_bls")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("pipeline", config=PIPELINE_CONFIG, model_py=PIPELINE_PY)
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("tokens", config=TOKENS_CONFIG, model_py=TOKENS_PY)
    server = ServeProcess(repo.path, root / "server.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def infer(client: httpclient.InferenceServerClient, **parameters: str
          ) -> httpclient.InferResult:
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"),
              httpclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(np.full((1, 4), 4, np.float32))
    inputs[1].set_data_from_numpy(np.ones((1, 4), np.float32))
    return client.infer("pipeline", inputs, parameters=parameters or None)


def test_isolated_model_calls_models_over_bls_for_a_tritonclient(serve: ServeProcess):
    client = httpclient.InferenceServerClient(serve.url)
    try:
        for _ in range(3):
            result = infer(client)
            np.testing.assert_array_equal(result.as_numpy("SUM"), np.full((1, 4), 5))
            np.testing.assert_array_equal(result.as_numpy("TOKENS"), [[0, 1, 4, 9, 16]])
        assert result.as_numpy("PID")[0, 0] != serve.process.pid  # it ran in a worker
        with pytest.raises(InferenceServerException,
                           match="Model missing - Error when running inference: Failed for "
                                 "execute the inference request. Model 'missing' is not "
                                 "ready."):
            infer(client, target="missing")
        assert client.is_model_ready("pipeline")
        np.testing.assert_array_equal(infer(client).as_numpy("SUM"), np.full((1, 4), 5))
    finally:
        client.close()
