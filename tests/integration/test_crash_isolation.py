"""A Python model that kills its process: what each way of running it costs the server.

In-thread (the default) the model's crash is the server's; the start-up log says so once.
``--backend-config=python,execution-mode=process`` isolates every Python model, so the
crash fails that request and the server keeps serving. ``--supervise`` restarts a server
that died, on the same ports, a bounded number of times.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest
from serve_process import ServeProcess, free_port, http_status, wait_for

from infercore.testing import RepositoryBuilder

CRASHER_CONFIG = """
name: "crasher"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

# IN = 1 ends the process the model runs in, as a native crash would
CRASHER_PY = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if int(value[0]) == 1:
                os._exit(3)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""

IN_THREAD_WARNING = "runs in-thread, the fast default"


def _repository(tmp_path) -> RepositoryBuilder:
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("crasher", config=CRASHER_CONFIG, model_py=CRASHER_PY)
    return repo


def _infer(port: int, value: int) -> tuple[int | None, dict]:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]}
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v2/models/crasher/infer", body=json.dumps(body))
        response = connection.getresponse()
        status, data = response.status, response.read()
        connection.close()
    except (ConnectionError, http.client.HTTPException):
        return None, {}
    return status, json.loads(data) if data else {}


def test_in_thread_models_warn_once_what_they_give_up(tmp_path):
    repo = _repository(tmp_path)
    repo.add_model("crasher2", config=CRASHER_CONFIG.replace('"crasher"', '"crasher2"'),
                   model_py=CRASHER_PY)
    server = ServeProcess(tmp_path / "serve.log", f"--model-repository={repo.path}")
    try:
        server.wait_ready()
        assert server.log().count(IN_THREAD_WARNING) == 1
        assert "execution-mode=process" in server.log()
    finally:
        server.stop()


def test_process_mode_for_every_python_model_survives_a_crashing_model(tmp_path):
    repo = _repository(tmp_path)
    server = ServeProcess(tmp_path / "serve.log", f"--model-repository={repo.path}",
                          "--backend-config=python,execution-mode=process")
    try:
        server.wait_ready()
        assert IN_THREAD_WARNING not in server.log()
        status, body = _infer(server.http_port, 1)
        assert status == 500 and body.get("error"), (status, body)
        assert server.process.poll() is None
        wait_for(lambda: _infer(server.http_port, 2) == (200, {
            "model_name": "crasher", "model_version": "1",
            "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [2]}]}),
            30, server.log)
    finally:
        server.stop()


def test_a_bad_execution_mode_fails_the_load_with_a_clear_error(tmp_path):
    repo = _repository(tmp_path)
    server = ServeProcess(tmp_path / "serve.log", f"--model-repository={repo.path}",
                          "--backend-config=python,execution-mode=fork")
    try:
        assert server.wait_exit(60) == 1
        assert ("python backend setting 'execution-mode' must be 'thread' or 'process', "
                "not 'fork'") in server.log()
    finally:
        server.stop()


def _supervised(tmp_path, repo: RepositoryBuilder, *flags: str) -> ServeProcess:
    return ServeProcess(tmp_path / "serve.log", f"--model-repository={repo.path}",
                        "--supervise", *flags, metrics=False)


def _serving(server: ServeProcess, times: int) -> None:
    """Until the ``times``-th server process has told its supervisor it serves (it does
    so before its serving line): ready alone comes a moment earlier, and a crash in
    between is one "before it served"."""
    server.wait_until(lambda: server.log().count("press Ctrl-C to stop") >= times,
                      f"serving line {times} never logged")


def test_supervise_restarts_a_server_that_died_on_the_same_ports(tmp_path):
    server = _supervised(tmp_path, _repository(tmp_path))
    try:
        _serving(server, 1)
        assert _infer(server.http_port, 1)[0] in (None, 500)  # the server died with it
        server.wait_log("restarting it (1 of 5 allowed within 60 s)")
        _serving(server, 2)
        server.wait_ready()  # the same ports, bound again by the new server process
        assert _infer(server.http_port, 2)[0] == 200
        assert server.process.poll() is None  # the supervisor itself never stopped
    finally:
        assert server.stop() == 0  # SIGTERM reaches the server; nothing is restarted
    assert server.log().count("supervisor: started server process") == 2


def test_supervise_gives_up_past_its_restart_bound(tmp_path):
    server = _supervised(tmp_path, _repository(tmp_path), "--supervise-max-restarts=1",
                         "--supervise-window-secs=600")
    try:
        _serving(server, 1)
        _infer(server.http_port, 1)
        server.wait_log("restarting it (1 of 1 allowed within 600 s)")
        _serving(server, 2)
        _infer(server.http_port, 1)
        assert server.wait_exit(60) == 3  # the child's own status
        assert "1 restarts in the last 600 s, giving up" in server.log()
    finally:
        server.stop()


def test_supervise_does_not_restart_a_server_that_never_served(tmp_path):
    port = free_port()
    process = subprocess.run(
        [sys.executable, "-m", "infercore", "serve", "--supervise",
         f"--model-repository={tmp_path / 'missing'}", f"--http-port={port}",
         "--allow-grpc=false", "--allow-metrics=false"],
        capture_output=True, text=True, timeout=120)
    assert process.returncode == 1
    assert "before it served; not restarting" in process.stderr
    assert process.stderr.count("supervisor: started server process") == 1
    assert http_status(port, "/v2/health/live") is None


@pytest.mark.parametrize("flags", [["--supervise-max-restarts=x"],
                                   ["--supervise-window-secs", "soon"]])
def test_supervisor_flags_take_numbers(tmp_path, flags):
    process = subprocess.run([sys.executable, "-m", "infercore", "serve", "--supervise",
                              *flags], capture_output=True, text=True, timeout=60)
    assert process.returncode == 1
    assert "Invalid option value" in process.stderr or "Bad option" in process.stderr
