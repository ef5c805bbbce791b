"""One API, three places: an in-process ``Server`` and ``RemoteServer`` over HTTP and gRPC.

Loaded with ``pytest_plugins = ["conftest_api"]``. ``shared_repository`` (module scope)
builds one repository of Triton Python models; ``serve`` starts one real ``infercore
serve`` process on it (HTTP and gRPC on free ports, EXPLICIT model control, every model
loaded); ``api`` is parametrised over ``inprocess``, ``http`` and ``grpc`` and gives the
server object the test then uses through the public API only, so each test runs the
same code embedded and remote.

With ``INFERCORE_TEST_TRITON=HOST:HTTP_PORT,HOST:GRPC_PORT`` the tests also run against
a server started by hand (real Triton: ``api`` kinds ``triton-http`` and
``triton-grpc``) in EXPLICIT mode on the repository ``python
tests/api_shared/conftest_api.py DIR`` writes (docs/remote_api.md). No test needs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.serve_process import ServeProcess
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, slow_model
from sample_models import DECOUPLED_COUNTER_CONFIG as COUNTER_CONFIG
from sample_models import DECOUPLED_COUNTER_PY as COUNTER_PY

from infercore import ModelControlMode, RemoteServer, Server
from infercore.testing import RepositoryBuilder

API_KINDS: tuple[str, ...] = ("inprocess", "http", "grpc")
_TRITON = os.environ.get("INFERCORE_TEST_TRITON", "")
if _TRITON:
    API_KINDS += ("triton-http", "triton-grpc")

# Decoupled, one instance: answers "started" at once, then runs until cancelled (or
# SECONDS), then ends with a bare final flag. A second request waits for the first.
# At least a millisecond per execution, as ``slow``.
TICKER_CONFIG = """
name: "ticker"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "SECONDS", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "STATE", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

TICKER_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            seconds = float(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0])
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("STATE", np.array([b"started"], np.object_))]))
            deadline = time.monotonic() + seconds
            time.sleep(0.001)
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.002)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# One instance (see sample_models.slow_model).
SLOW_CONFIG, SLOW_PY = slow_model(instances=1)

# Tells what it was given (parameters, correlation id, timeout, id) as JSON, and answers
# with response parameters of each kind.
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
                "timeout": request.timeout(),
                "id": request.request_id(),
            })
            out = [pb_utils.Tensor("SEEN", np.array([seen.encode()], np.object_))]
            try:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=out, parameters={"flag": True, "number": 7, "text": "hello"}))
            except TypeError:  # Triton before 24.xx: responses have no parameters
                responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
"""

DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")


def _mirror_tensor(kind: str, datatype: str) -> str:
    config_type = "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype
    optional = ", optional: true" if kind == "IN" else ""
    return f'{{ name: "{kind}_{datatype}", data_type: {config_type}, dims: [ -1, -1 ]{optional} }}'


# Every datatype: each (optional) input IN_<T> comes back as OUT_<T>.
MIRROR_CONFIG = "\n".join([
    'name: "mirror"', 'backend: "python"', "max_batch_size: 0",
    "input [ " + ",\n  ".join(_mirror_tensor("IN", t) for t in DATATYPES) + " ]",
    "output [ " + ",\n  ".join(_mirror_tensor("OUT", t) for t in DATATYPES) + " ]",
    "instance_group [ { count: 1, kind: KIND_CPU } ]",
])

MIRROR_PY = """
import triton_python_backend_utils as pb_utils


def mirrored(tensor):
    name = "OUT" + tensor.name()[2:]
    try:
        return pb_utils.Tensor(name, tensor.as_numpy())
    except Exception:  # Triton's stub has no numpy form of BF16: it takes DLPack
        return pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack())


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[mirrored(t) for t in r.inputs()])
                for r in requests]
"""


def build_repository(path: Path) -> Path:
    repo = RepositoryBuilder(path)
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    # the load/unload tests change this one only
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)
    repo.add_model("counter", config=COUNTER_CONFIG, model_py=COUNTER_PY)
    repo.add_model("ticker", config=TICKER_CONFIG, model_py=TICKER_PY)
    repo.add_model("slow", config=SLOW_CONFIG, model_py=SLOW_PY)
    repo.add_model("echo", config=ECHO_CONFIG, model_py=ECHO_PY)
    repo.add_model("mirror", config=MIRROR_CONFIG, model_py=MIRROR_PY)
    return repo.path


@pytest.fixture(scope="module")
def shared_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("api_shared") / "models")


@pytest.fixture(scope="module")
def serve(shared_repository: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[ServeProcess]:
    """``infercore serve`` with HTTP and gRPC on the shared repository."""
    process = ServeProcess(tmp_path_factory.mktemp("api_shared_log") / "server.log",
                           f"--model-repository={shared_repository}",
                           "--model-control-mode=explicit", "--load-model=*",
                           "--exit-timeout-secs=5", "--log-info=false")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def servers(shared_repository: Path, serve: ServeProcess) -> Iterator[dict[str, object]]:
    """One server object of each kind, shared by a module's tests."""
    embedded = Server(model_repository=shared_repository,
                      model_control_mode=ModelControlMode.EXPLICIT, startup_models=["*"],
                      exit_timeout=5, log_info=False)
    made: dict[str, object] = {
        "inprocess": embedded.start(),
        "http": RemoteServer(serve.http_url, "http").start(wait_until_ready=True),
        "grpc": RemoteServer(serve.grpc_url, "grpc").start(wait_until_ready=True),
    }
    if _TRITON:
        http_url, grpc_url = _TRITON.split(",")
        made["triton-http"] = RemoteServer(http_url, "http").start(wait_until_ready=True)
        made["triton-grpc"] = RemoteServer(grpc_url, "grpc").start(wait_until_ready=True)
    try:
        yield made
    finally:
        for server in made.values():
            server.stop()  # type: ignore[attr-defined]


@pytest.fixture(params=API_KINDS)
def api(request: pytest.FixtureRequest, servers: dict[str, object]) -> object:
    """The server the test talks to: ``Server`` or ``RemoteServer``, one API."""
    return servers[request.param]


@pytest.fixture
def api_kind(request: pytest.FixtureRequest) -> str:
    """Which of ``API_KINDS`` the test's ``api`` is."""
    return str(request.node.callspec.params["api"])


if __name__ == "__main__":
    print(build_repository(Path(sys.argv[1])))
