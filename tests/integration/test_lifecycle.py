"""The lifecycle of an ``infercore serve`` process, driven with signals and real clients.

Models here wait on files the test creates ("gates"), so every ordering is decided by the
test: a request is known to be executing once its marker file exists, a model finishes
loading once its gate exists. Nothing depends on how fast the machine is.
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import ServeProcess, http_status, wait_for
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

# Each request writes a marker into STARTED, then waits (at most 60 s) for the file GATE;
# it answers Y = X. Cancellation is ignored on purpose: a model that does not stop.
GATED_CONFIG = """
name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 3, kind: KIND_CPU } ]
parameters { key: "gate", value: { string_value: "%(gate)s" } }
parameters { key: "started", value: { string_value: "%(started)s" } }
"""

GATED_PY = """
import json
import os
import time
import uuid

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.gate = parameters["gate"]["string_value"]
        self.started = parameters["started"]["string_value"]

    def execute(self, requests):
        for _ in requests:
            open(os.path.join(self.started, uuid.uuid4().hex), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""

# initialize waits (at most 60 s) for the file GATE: a model that takes long to load.
SLOW_LOAD_CONFIG = """
name: "slow_load"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
parameters { key: "gate", value: { string_value: "%(gate)s" } }
"""

SLOW_LOAD_PY = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""

BROKEN_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this model never loads")
"""


def _x(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int32)


def _http_infer(url: str, value: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    try:
        tensor = httpclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(_x(value))
        return client.infer("gated", [tensor]).as_numpy("Y")
    finally:
        client.close()


def _grpc_infer(url: str, value: int) -> np.ndarray:
    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(_x(value))
        return client.infer("gated", [tensor], client_timeout=120).as_numpy("Y")
    finally:
        client.close()


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository with the gated model; its gate file and its marker folder."""
    gate, started = tmp_path / "gate", tmp_path / "started"
    started.mkdir()
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("gated", config=GATED_CONFIG % {"gate": gate, "started": started},
                   model_py=GATED_PY)
    return repo.path, gate, started


def _executing(started: Path, count: int) -> bool:
    return len(list(started.iterdir())) >= count


def test_sigterm_lets_in_flight_requests_finish_and_refuses_new_work(gated, tmp_path):
    repository, gate, started = gated
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repository}",
                          "--exit-timeout-secs=60")
    try:
        server.wait_ready()
        with ThreadPoolExecutor(3) as pool:
            calls = [pool.submit(_http_infer, server.http_url, 1),
                     pool.submit(_http_infer, server.http_url, 2),
                     pool.submit(_grpc_infer, server.grpc_url, 3)]
            wait_for(lambda: _executing(started, 3), 60,
                     lambda: f"the requests never started:\n{server.log()[-3000:]}")
            server.signal(signal.SIGTERM)
            # No new work once stopping: both ports refuse connections, while the three
            # requests are still executing (their gate is closed).
            server.wait_refusing()
            assert all(not call.done() for call in calls)
            gate.touch()
            results = [call.result(timeout=120) for call in calls]
        assert [int(r[0]) for r in results] == [1, 2, 3]
        assert server.wait_exit() == 0
        assert "Signal (15) received." in server.log()
    finally:
        gate.touch()
        server.stop()


def test_exit_timeout_fails_what_is_left_and_the_process_exits(gated, tmp_path):
    repository, gate, started = gated
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repository}",
                          "--exit-timeout-secs=1")
    try:
        server.wait_ready()
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(_http_infer, server.http_url, 1),
                     pool.submit(_grpc_infer, server.grpc_url, 2)]
            wait_for(lambda: _executing(started, 2), 60,
                     lambda: f"the requests never started:\n{server.log()[-3000:]}")
            server.signal(signal.SIGTERM)
            # The model would run 60 s more; the process must not wait for it.
            status = server.wait_exit(timeout=45)
            for call in calls:
                with pytest.raises(Exception):  # noqa: B017 - reset or cancelled, per client
                    call.result(timeout=60)
        assert status == 1
        assert "Exit timeout expired. Exiting immediately." in server.log()
    finally:
        gate.touch()
        server.stop()


def test_live_but_not_ready_while_a_model_loads(tmp_path):
    gate = tmp_path / "gate"
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("slow_load", config=SLOW_LOAD_CONFIG % {"gate": gate},
                   model_py=SLOW_LOAD_PY)
    for strict in ("true", "false"):
        gate.unlink(missing_ok=True)
        server = ServeProcess(tmp_path / f"server-{strict}.log",
                              f"--model-repository={repo.path}", f"--strict-readiness={strict}")
        try:
            server.wait_http("/v2/health/live", 200)
            # The load is held by the gate: not ready, whatever the readiness mode.
            assert http_status(server.http_port, "/v2/health/ready") == 400
            assert http_status(server.http_port, "/v2/health/startup") == 400
            assert http_status(server.http_port, "/v2/models/slow_load/ready") == 400
            assert http_status(server.http_port, "/v2") == 200
            client = grpcclient.InferenceServerClient(server.grpc_url)
            assert client.is_server_live() and not client.is_server_ready()
            client.close()
            gate.touch()
            server.wait_ready()
            assert http_status(server.http_port, "/v2/health/startup") == 200
            assert http_status(server.http_port, "/v2/models/slow_load/ready") == 200
        finally:
            gate.touch()
            assert server.stop() == 0


def test_ctrl_c_while_models_load_stops_at_once_and_never_says_serving(tmp_path):
    gate = tmp_path / "gate"  # never opened: the load would hold for 60 s
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("slow_load", config=SLOW_LOAD_CONFIG % {"gate": gate},
                   model_py=SLOW_LOAD_PY)
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repo.path}")
    try:
        server.wait_http("/v2/health/live", 200)
        server.wait_log("successfully loaded 'add_sub'")
        server.signal(signal.SIGINT)
        assert server.wait_exit(timeout=20) == 0  # well before the held load could end
        log = server.log()
        assert "the startup loads are abandoned" in log
        assert "infercore is serving" not in log
    finally:
        gate.touch()
        server.stop()


def test_a_request_during_the_startup_load_is_told_the_model_is_loading(tmp_path):
    # tritonserver listens only once its startup loads end; infercore listens at once, so
    # it answers UNAVAILABLE (a client retries on it), never "no available versions".
    gate = tmp_path / "gate"
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("slow_load", config=SLOW_LOAD_CONFIG % {"gate": gate},
                   model_py=SLOW_LOAD_PY)
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repo.path}")
    loading = "Request for model 'slow_load': the model is loading as the server starts"
    try:
        server.wait_http("/v2/health/live", 200)
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = httpclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(_x(1))
        with pytest.raises(InferenceServerException) as caught:
            http.infer("slow_load", [tensor])
        assert caught.value.status() == "503" and loading in caught.value.message()
        grpc_tensor = grpcclient.InferInput("X", [1], "INT32")
        grpc_tensor.set_data_from_numpy(_x(1))
        with pytest.raises(InferenceServerException) as caught:
            grpc.infer("slow_load", [grpc_tensor])
        assert caught.value.status() == "StatusCode.UNAVAILABLE"
        assert loading in caught.value.message()
        with pytest.raises(InferenceServerException) as caught:  # not in the repository
            http.get_model_metadata("nope")
        assert caught.value.status() == "404"
        gate.touch()
        server.wait_ready()
        np.testing.assert_array_equal(http.infer("slow_load", [tensor]).as_numpy("Y"), _x(1))
        http.close()
        grpc.close()
    finally:
        gate.touch()
        assert server.stop() == 0


@pytest.mark.parametrize("strict, ready", [("true", 400), ("false", 200)])
def test_strict_readiness_with_a_model_that_failed_to_load(tmp_path, strict, ready):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("broken", config=ADD_SUB_CONFIG.replace('"add_sub"', '"broken"'),
                   model_py=BROKEN_PY)
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repo.path}",
                          "--exit-on-error=false", f"--strict-readiness={strict}")
    try:
        server.wait_log("press Ctrl-C to stop")  # the startup loads are over
        assert http_status(server.http_port, "/v2/health/live") == 200
        assert http_status(server.http_port, "/v2/health/ready") == ready
        # the startup probe: the loads are over, whatever they left
        assert http_status(server.http_port, "/v2/health/startup") == 200
        assert http_status(server.http_port, "/v2/health/startup", method="POST") == 405
        assert http_status(server.http_port, "/v2/models/add_sub/ready") == 200
        assert http_status(server.http_port, "/v2/models/broken/ready") == 400
        assert "this model never loads" in server.log()
    finally:
        assert server.stop() == 0


def test_exit_on_error_stops_the_server_when_a_model_fails(tmp_path):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("broken", config=ADD_SUB_CONFIG.replace('"add_sub"', '"broken"'),
                   model_py=BROKEN_PY)
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repo.path}")
    try:
        assert server.wait_exit() == 1
        log = server.log()
        assert "| broken" in log and "UNAVAILABLE" in log and "this model never loads" in log
        # the table shows the healthy model as it loaded (Triton's), not as the stop left it
        assert "| add_sub | 1       | READY " in log
        lines = log.splitlines()
        last = lines.index("error: creating server: Internal - failed to load all models")
        assert '"--exit-on-error=false serves the models that loaded' in lines[last - 1]
    finally:
        server.stop()


def test_a_second_signal_while_stopping_is_ignored(gated, tmp_path):
    repository, gate, started = gated
    server = ServeProcess(tmp_path / "server.log", f"--model-repository={repository}",
                          "--exit-timeout-secs=60")
    try:
        server.wait_ready()
        result: list[np.ndarray] = []
        caller = threading.Thread(target=lambda: result.append(
            _http_infer(server.http_url, 7)))
        caller.start()
        wait_for(lambda: _executing(started, 1), 60,
                 lambda: f"the request never started:\n{server.log()[-3000:]}")
        server.signal(signal.SIGTERM)
        server.wait_refusing()
        server.signal(signal.SIGINT)
        server.wait_log("Signal (2) received; already stopping")
        assert server.process.poll() is None  # still draining the request
        gate.touch()
        caller.join(120)
        assert [int(r[0]) for r in result] == [7]
        assert server.wait_exit() == 0
    finally:
        gate.touch()
        server.stop()
