"""A real ``infercore serve`` process for the HTTP integration tests, and its models.

Loaded with ``pytest_plugins = ["conftest_http"]`` by the test modules that need it. The
fixture ``http_server`` (module scope) builds a repository of small Triton Python models,
starts one server process on free ports, waits for ``/v2/health/ready`` with a deadline,
and stops it with SIGTERM at the end of the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, DATATYPES, slow_model
from serve_process import HttpServeProcess

from infercore.testing import RepositoryBuilder

# Every Triton datatype in one model: each optional input IN_<T> comes back as OUT_<T>.


def _config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype


IDENTITY_CONFIG = "\n".join([
    'name: "identity"', 'backend: "python"', "max_batch_size: 0",
    "input [", ",\n".join(
        f'  {{ name: "IN_{t}", data_type: {_config_type(t)}, dims: [ -1 ], optional: true }}'
        for t in DATATYPES), "]",
    "output [", ",\n".join(
        f'  {{ name: "OUT_{t}", data_type: {_config_type(t)}, dims: [ -1 ] }}'
        for t in DATATYPES), "]",
    "instance_group [ { count: 1, kind: KIND_CPU } ]",
])

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [pb_utils.Tensor("OUT_" + t.name()[3:], t.as_numpy())
                       for t in request.inputs()]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

CLASSIFIER_CONFIG = """
name: "classifier"
backend: "python"
max_batch_size: 4
input [ { name: "SCORES", data_type: TYPE_FP32, dims: [ 5 ] } ]
output [
  { name: "PROBS", data_type: TYPE_FP32, dims: [ 5 ], label_filename: "labels.txt" },
  { name: "COUNTS", data_type: TYPE_INT32, dims: [ 5 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

CLASSIFIER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "SCORES").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PROBS", scores),
                pb_utils.Tensor("COUNTS", (scores * 10).astype(np.int32)),
            ]))
        return responses
"""

LABELS = "cat\ndog\nbird\nfish\nfrog\n"

# Reports what the request carried: parameters, correlation id, flags, timeout, id.
ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "INFO", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

ECHO_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            info = {
                "parameters": json.loads(request.parameters()),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout": request.timeout(),
                "request_id": request.request_id(),
            }
            out = np.array([json.dumps(info).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("INFO", out)],
                parameters={"echoed": True, "count": 1, "note": "hi"}))
        return responses
"""

# Answers DONE (see sample_models.slow_model).
SLOW_CONFIG, SLOW_PY = slow_model("DONE")

DECOUPLED_CONFIG = """
name: "decoupled"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

DECOUPLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def build_repository(path: Path) -> Path:
    repo = RepositoryBuilder(path)
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    # a model the repository tests may unload and reload without disturbing the others
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)
    repo.add_model("identity", config=IDENTITY_CONFIG, model_py=IDENTITY_PY)
    repo.add_model("classifier", config=CLASSIFIER_CONFIG, model_py=CLASSIFIER_PY,
                   files={"labels.txt": LABELS})
    repo.add_model("echo", config=ECHO_CONFIG, model_py=ECHO_PY)
    repo.add_model("slow", config=SLOW_CONFIG, model_py=SLOW_PY)
    repo.add_model("decoupled", config=DECOUPLED_CONFIG, model_py=DECOUPLED_PY)
    return repo.path


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServeProcess]:
    root = tmp_path_factory.mktemp("http")
    server = HttpServeProcess(build_repository(root / "models"), root / "server.log",
                              "--model-control-mode", "explicit", "--load-model", "*",
                              "--http-max-input-size", str(4 * 1024 * 1024),
                              "--http-header-forward-pattern", "^x-fwd-",
                              "--allow-client-shm=true")  # the shared-memory tests
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
