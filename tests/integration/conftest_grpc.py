"""Real ``infercore serve`` processes for the gRPC integration tests, and their models.

Loaded with ``pytest_plugins = ["conftest_grpc"]`` by the modules that need it. The
fixture ``grpc_server`` (module scope) builds a repository of small Triton Python
models written as Triton users write them, starts one server on a free port with only
the gRPC frontend, waits for ServerReady with a deadline, and stops it with SIGTERM at
the end of the module; ``grpc_serve`` starts more with other flags (TLS, limits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, DATATYPES, slow_model
from sample_models import DECOUPLED_COUNTER_CONFIG as COUNTER_CONFIG
from sample_models import DECOUPLED_COUNTER_PY as COUNTER_PY
from serve_process import GrpcServeProcess

from infercore.testing import RepositoryBuilder


def _tensor(kind: str, datatype: str) -> str:
    config_type = "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype
    optional = ", optional: true" if kind == "IN" else ""
    return f'{{ name: "{kind}_{datatype}", data_type: {config_type}, dims: [ -1 ]{optional} }}'


# One model for every datatype: each (optional) input IN_<T> comes back as OUT_<T>.
MIRROR_CONFIG = "\n".join([
    'name: "mirror"', 'backend: "python"', "max_batch_size: 0",
    "input [ " + ",\n  ".join(_tensor("IN", t) for t in DATATYPES) + " ]",
    "output [ " + ",\n  ".join(_tensor("OUT", t) for t in DATATYPES) + " ]",
    "instance_group [ { count: 1, kind: KIND_CPU } ]",
])

MIRROR_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT" + tensor.name()[2:], tensor.as_numpy())
                for tensor in request.inputs()
            ])
            for request in requests
        ]
"""

CLASSIFIER_CONFIG = """
name: "classifier"
backend: "python"
max_batch_size: 4
input [ { name: "LOGITS", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "SCORES", data_type: TYPE_FP32, dims: [ 4 ], label_filename: "labels.txt" } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

CLASSIFIER_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "SCORES", pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy())])
            for request in requests
        ]
"""

LABELS = "apple\nbanana\ncherry\ndate\n"

# Tells what it was given: parameters, correlation id, flags, timeout and id (as JSON),
# and answers with response parameters of each kind.
ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] } ]
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
            seen = json.dumps({
                "parameters": json.loads(request.parameters()),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout": request.timeout(),
                "id": request.request_id(),
            })
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("SEEN", np.array([seen.encode()], np.object_))],
                parameters={"flag": True, "number": 7, "text": "hello"}))
        return responses
"""

SLOW_CONFIG, SLOW_PY = slow_model()


def build_repository(path: Path) -> Path:
    repo = RepositoryBuilder(path)
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    # the repository tests unload and load this one without disturbing the others
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)
    repo.add_model("mirror", config=MIRROR_CONFIG, model_py=MIRROR_PY)
    repo.add_model("classifier", config=CLASSIFIER_CONFIG, model_py=CLASSIFIER_PY,
                   files={"labels.txt": LABELS})
    repo.add_model("echo", config=ECHO_CONFIG, model_py=ECHO_PY)
    repo.add_model("slow", config=SLOW_CONFIG, model_py=SLOW_PY)
    repo.add_model("counter", config=COUNTER_CONFIG, model_py=COUNTER_PY)
    return repo.path


@pytest.fixture(scope="module")
def grpc_serve(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[Callable[..., GrpcServeProcess]]:
    """Start servers on this module's repository with extra flags; all stop at the end.

    ``credentials`` (TLS) are what ServerReady is polled with.
    """
    started: list[GrpcServeProcess] = []

    def serve(*extra: str, credentials: grpc.ChannelCredentials | None = None
              ) -> GrpcServeProcess:
        root = tmp_path_factory.mktemp("grpc")
        server = GrpcServeProcess(build_repository(root / "models"), root / "server.log",
                                  "--model-control-mode", "explicit", "--load-model", "*",
                                  *extra)
        started.append(server)
        channel = (grpc.insecure_channel(server.url) if credentials is None
                   else grpc.secure_channel(server.url, credentials))
        with channel:
            server.wait_ready(channel)
        return server

    try:
        yield serve
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="module")
def grpc_server(grpc_serve: Callable[..., GrpcServeProcess]) -> GrpcServeProcess:
    return grpc_serve("--allow-client-shm=true")  # the shared-memory tests use regions
