"""A Python model's own ``is_ready()`` answers the model readiness endpoints (HTTP GET
/v2/models/<m>/ready, gRPC ModelReady), in-thread and process-isolated, through a real
``infercore serve``: True, False, an exception, a value that is no bool, an answer later
than the 5 s bound, ``async def``; the check runs off the frontends' loops, and a model
without ``is_ready`` is asked nothing. Newer than Triton 2.51 (which has no such call):
current python_backend's README "is_ready" (pull request #430)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from serve_process import ServeProcess

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

# ANSWER picks what is_ready does; a request with X = 0 makes it answer False from then
# on, X = 1 True again (the model changes its mind while loaded).
READY_PY = """
import asyncio
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready = True
        self.calls = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.ready = bool(x[0])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("CALLS", np.array([self.calls], np.int32))]))
        return responses

    IS_READY
"""

ANSWERS = {
    "toggles": "def is_ready(self):\n        self.calls += 1\n        return self.ready",
    "raises": "def is_ready(self):\n        raise RuntimeError('not today')",
    "not_a_bool": "def is_ready(self):\n        return 1",
    "slow": "def is_ready(self):\n        time.sleep(8)\n        return True",
    "async_def": (
        "async def is_ready(self):\n        await asyncio.sleep(0.01)\n        return self.ready"
    ),
    "absent": "",
}

MODES = {"in_thread": "", "process": PROCESS}


def _config(name: str, extra: str) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "CALLS", data_type: TYPE_INT32, dims: [ 1 ] }} ]
{extra}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("readiness")
    repo = RepositoryBuilder(root / "models")
    for mode, extra in MODES.items():
        for answer, source in ANSWERS.items():
            name = f"{answer}_{mode}"
            repo.add_model(
                name, config=_config(name, extra), model_py=READY_PY.replace("IS_READY", source)
            )
    started = ServeProcess(
        root / "server.log", f"--model-repository={repo.path}", "--exit-timeout-secs=5"
    )
    try:
        started.wait_ready(timeout=120)
        yield started
    finally:
        started.stop()


def _http_ready(server: ServeProcess, model: str, timeout: float = 20.0) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=timeout)
    try:
        connection.request("GET", f"/v2/models/{model}/ready")
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _grpc_ready(server: ServeProcess, model: str) -> bool:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return bool(client.is_model_ready(model))
    finally:
        client.close()


def _infer(server: ServeProcess, model: str, x: int) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(np.array([x], np.int32))
        return int(client.infer(model, [tensor]).as_numpy("CALLS")[0])
    finally:
        client.close()


@pytest.mark.parametrize("mode", MODES)
def test_is_ready_answers_both_endpoints_and_may_change_its_mind(server, mode):
    model = f"toggles_{mode}"
    assert _http_ready(server, model) == 200
    assert _grpc_ready(server, model) is True
    assert _infer(server, model, 0) == 2  # is_ready ran once per readiness request
    assert _http_ready(server, model) == 400
    assert _grpc_ready(server, model) is False
    # not ready by its own word, it still serves requests (Triton's core does not ask it)
    assert _infer(server, model, 1) == 4
    assert _http_ready(server, model) == 200


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", ["raises", "not_a_bool"])
def test_an_exception_or_a_value_that_is_no_bool_is_not_ready(server, mode, answer):
    model = f"{answer}_{mode}"
    assert _http_ready(server, model) == 400
    assert _grpc_ready(server, model) is False
    assert _infer(server, model, 1) == 0  # the model serves on
    wanted = "failed" if answer == "raises" else "must return a boolean value"
    assert wanted in server.log()


@pytest.mark.parametrize("mode", MODES)
def test_async_def_is_ready_runs_on_the_instance_loop(server, mode):
    model = f"async_def_{mode}"
    assert _http_ready(server, model) == 200
    _infer(server, model, 0)
    assert _grpc_ready(server, model) is False


@pytest.mark.parametrize("mode", MODES)
def test_a_model_without_is_ready_is_ready(server, mode):
    assert _http_ready(server, f"absent_{mode}") == 200
    assert _grpc_ready(server, f"absent_{mode}") is True


@pytest.mark.parametrize("mode", MODES)
def test_a_slow_is_ready_is_not_ready_after_5_s_and_blocks_no_frontend_loop(server, mode):
    model = f"slow_{mode}"
    with ThreadPoolExecutor(3) as pool:
        started = time.monotonic()
        slow_http = pool.submit(_http_ready, server, model)
        slow_grpc = pool.submit(_grpc_ready, server, model)
        time.sleep(0.5)
        # meanwhile both frontends answer other requests at once
        quick = time.monotonic()
        assert _http_ready(server, f"absent_{mode}", timeout=2.0) == 200
        assert _grpc_ready(server, f"absent_{mode}") is True
        assert time.monotonic() - quick < 2.0
        assert slow_http.result(20) == 400
        assert slow_grpc.result(20) is False
        elapsed = time.monotonic() - started
    assert 4.5 < elapsed < 8.0, elapsed  # the 5 s bound, not the model's 8 s
