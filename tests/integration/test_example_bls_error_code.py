"""python_backend's ``bls_error_code`` example through a real ``infercore serve``,
in-thread and process-isolated: ``error_source`` answers each request with an error
response of the ``pb_utils.TritonError`` code its ERROR_CODE input names, and
``bls_error_caller`` calls it with ``exec()`` and reports the code and message of the error
it got back. Checked as the example's own test checks it: every code other than INTERNAL
reaches the caller unchanged (current python_backend; newer than 2.51, whose BLS
responses carried INTERNAL)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models

from infercore.testing import RepositoryBuilder

SOURCE_PY = """
import triton_python_backend_utils as pb_utils

CODES = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
         "ALREADY_EXISTS", "CANCELLED"]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = pb_utils.get_input_tensor_by_name(request, "ERROR_CODE").as_numpy()[0]
            kind = getattr(pb_utils.TritonError, CODES[code] if 0 <= code < len(CODES)
                           else "INTERNAL")
            responses.append(pb_utils.InferenceResponse(
                error=pb_utils.TritonError(f"Test error with code {code}", kind)))
        return responses
"""

CALLER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = pb_utils.get_input_tensor_by_name(request, "ERROR_CODE").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="error_source", requested_output_names=["OUTPUT"],
                inputs=[pb_utils.Tensor("ERROR_CODE", code)]).exec()
            if answer.has_error():
                received, message = int(answer.error().code()), str(answer.error().message())
            else:
                received, message = -1, "no error"
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RECEIVED_CODE", np.array([received], dtype=np.int32)),
                pb_utils.Tensor("ERROR_MESSAGE", np.array([message], dtype=object))]))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "ERROR_CODE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {outputs} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""

SOURCE_OUTPUTS = '{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }'
CALLER_OUTPUTS = (
    '{ name: "RECEIVED_CODE" data_type: TYPE_INT32 dims: [ 1 ] },\n'
    '  { name: "ERROR_MESSAGE" data_type: TYPE_STRING dims: [ 1 ] }'
)


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"bls_error_code_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model(
        "error_source",
        config=CONFIG.format(name="error_source", outputs=SOURCE_OUTPUTS),
        model_py=SOURCE_PY,
    )
    repo.add_model(
        "bls_error_caller",
        config=CONFIG.format(name="bls_error_caller", outputs=CALLER_OUTPUTS),
        model_py=CALLER_PY,
    )
    with serving_python_models(root, repo.path, request.param, grpc=False) as started:
        yield started


def _error_code(client: httpclient.InferenceServerClient, send_code: int) -> tuple[int, str]:
    inputs = [httpclient.InferInput("ERROR_CODE", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([send_code], dtype=np.int32))
    outputs = [
        httpclient.InferRequestedOutput("RECEIVED_CODE"),
        httpclient.InferRequestedOutput("ERROR_MESSAGE"),
    ]
    result = client.infer("bls_error_caller", inputs, outputs=outputs)
    received = result.as_numpy("RECEIVED_CODE")[0]
    msg = result.as_numpy("ERROR_MESSAGE")[0]
    return int(received), msg.decode() if isinstance(msg, bytes) else msg


@pytest.mark.parametrize("code", [2, 3, 4, 5, 7])
def test_the_bls_error_code_example_passes_its_own_test(server, code):
    with httpclient.InferenceServerClient(server.http_url) as client:
        received, message = _error_code(client, code)
    assert received == code, message
    assert f"Test error with code {code}" in message
