"""Process-isolated models over HTTP, through a real ``infercore serve`` process: requests
shaped as perf_analyzer sends them, batched for a worker, and a client that goes away
while the worker runs its request."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, slow_model
from serve_process import HttpServeProcess, infer_and_leave, wait_for

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

# perf_analyzer's header: an empty id, binary inputs and outputs (the header cache keeps it)
HEADER = json.dumps({"id": "", "inputs": [
    {"name": name, "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}
    for name in ("INPUT0", "INPUT1")], "outputs": [
    {"name": name, "parameters": {"binary_data": True}} for name in ("OUTPUT0", "OUTPUT1")]},
    separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServeProcess]:
    root = tmp_path_factory.mktemp("isolated_http")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG + "dynamic_batching { }\n" + PROCESS,
                   model_py=ADD_SUB_PY)
    slow_config, slow_py = slow_model("DONE", instances=1)
    repo.add_model("slow", config=slow_config + PROCESS, model_py=slow_py)
    started = HttpServeProcess(repo.path, root / "server.log")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _add_sub(port: int, a: np.ndarray, b: np.ndarray, requests: int) -> list[bytes]:
    """``requests`` inferences on one connection, input1 = b + i; the raw bodies back."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    bodies = []
    try:
        for i in range(requests):
            body = HEADER + a.tobytes() + (b + i).tobytes()
            connection.request("POST", "/v2/models/add_sub/infer", body, {
                "Inference-Header-Content-Length": str(len(HEADER))})
            response = connection.getresponse()
            assert response.status == 200, response.read()
            length = int(response.getheader("Inference-Header-Content-Length"))
            bodies.append(response.read()[length:])
    finally:
        connection.close()
    return bodies


def test_repeated_perf_analyzer_headers_answer_each_request_with_its_own_data(server):
    def client(seed: int) -> None:
        a = np.arange(4, dtype=np.float32) * seed
        b = np.full(4, seed, np.float32)
        for i, data in enumerate(_add_sub(server.port, a, b, 40)):
            got = np.frombuffer(data, np.float32).reshape(2, 4)
            np.testing.assert_array_equal(got[0], a + b + i)
            np.testing.assert_array_equal(got[1], a - (b + i))

    with ThreadPoolExecutor(4) as pool:  # concurrent: the worker gets batches
        list(pool.map(client, range(1, 5)))

    stats = _stats(server, "add_sub")
    assert stats["inference_count"] == 160
    assert stats["execution_count"] <= 160


def test_a_client_gone_while_the_worker_runs_its_request_cancels_it(server):
    request = json.dumps({"inputs": [
        {"name": "SECONDS", "shape": [1], "datatype": "FP32", "data": [20.0]}]}).encode()
    started = time.monotonic()

    # the idle worker takes it at once (the test holds either way)
    infer_and_leave(server.port, "slow", request, linger_s=0.3)
    # The worker's model sees is_cancelled() and stops, answering with an error of its own
    # (a success, as Triton's Python backend counts it; failed if it was still queued): it
    # ends now, not 20 s later
    def ended() -> int:
        inference = _stats(server, "slow")["inference_stats"]
        return inference["success"]["count"] + inference["fail"]["count"]

    wait_for(lambda: ended() == 1, 10.0,
             lambda: f"the cancelled request did not end: {_stats(server, 'slow')}")

    assert time.monotonic() - started < 10.0
    answers = _add_sub(server.port, np.ones(4, np.float32), np.ones(4, np.float32), 1)
    np.testing.assert_array_equal(np.frombuffer(answers[0], np.float32)[:4], 2.0)


def _stats(server, model: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", f"/v2/models/{model}/stats")
        return json.loads(connection.getresponse().read())["model_stats"][0]
    finally:
        connection.close()
