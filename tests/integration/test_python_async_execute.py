"""``async def execute`` through a real ``infercore serve``, in-thread and process-isolated
(Triton's qa_python_async_execute): a decoupled model's coroutines run concurrently on one
instance, BLS ``async_exec`` inside them included, and a client's cancel reaches the
coroutine through ``request.is_cancelled()``.

Triton 2.51 answers the same way (run by hand against the bench's tritonserver): three
overlapping requests to one decoupled instance, each awaiting 1 s, end in about 1 s; a
model that is not decoupled has its coroutine run to its end before the next execute, as
Triton's stub runs it (``RunCoroutine(..., in_background=False)``), so three take 3 s.
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import ServeProcess

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

# Awaits 1 s, then asks add_sub (BLS, async_exec) for X + X; one response, final.
SLEEPER_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            await asyncio.sleep(1)
            call = pb_utils.InferenceRequest(
                model_name="add_sub", requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)])
            answer = await call.async_exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("Y", total)])
            if DECOUPLED:
                request.get_response_sender().send(
                    response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if DECOUPLED else responses
"""

# Awaits until its request is cancelled (20 s at most), then logs what it saw.
CANCELLED_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            tag = int(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0][0])
            for _ in range(400):
                if request.is_cancelled():
                    break
                await asyncio.sleep(0.05)
            seen = "cancelled" if request.is_cancelled() else "never cancelled"
            pb_utils.Logger.log_info(f"coroutine {tag} saw: {seen}")
            if DECOUPLED:
                request.get_response_sender().send(
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if DECOUPLED:
            return None
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros((1, 4), np.float32))])
                for _ in requests]
"""


def _config(name: str, decoupled: bool, process: bool) -> str:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 1, 4 ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 1, 4 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{PROCESS if process else ""}
"""


MODES = {"in_thread": False, "process": True}


def build_repository(repo: RepositoryBuilder) -> None:
    """The models of this module (also what was served to Triton 2.51 by hand)."""
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    for mode, process in MODES.items():
        for kind, decoupled in (("decoupled", True), ("plain", False)):
            for base, source in (("sleeper", SLEEPER_PY), ("cancelled", CANCELLED_PY)):
                name = f"{base}_{kind}_{mode}"
                repo.add_model(
                    name,
                    config=_config(name, decoupled, process),
                    model_py=f"DECOUPLED = {decoupled}\n" + source,
                )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("async_execute")
    repo = RepositoryBuilder(root / "models")
    build_repository(repo)
    started = ServeProcess(
        root / "server.log", f"--model-repository={repo.path}", "--exit-timeout-secs=5"
    )
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _x(value: float) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("X", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    return tensor


def _stream_once(url: str, model: str, value: float) -> np.ndarray:
    """One request on a stream of its own; its one response's Y."""
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(model, [_x(value)], enable_empty_final_response=True)
        result, error = answers.get(timeout=30)
        assert error is None, error
        # the model sends its one response with the final flag
        assert result.get_response().parameters["triton_final_response"].bool_param
        return result.as_numpy("Y")
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("mode", MODES)
def test_three_decoupled_coroutines_overlap_on_one_instance_bls_included(server, mode):
    model = f"sleeper_decoupled_{mode}"
    _stream_once(server.grpc_url, model, 0.0)  # warm: the first BLS call sets things up
    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        outputs = list(pool.map(partial(_stream_once, server.grpc_url, model), (1.0, 2.0, 3.0)))
    elapsed = time.monotonic() - started

    assert [output.tolist() for output in outputs] == [[[2.0] * 4], [[4.0] * 4], [[6.0] * 4]]
    assert elapsed < 2.0, f"three 1 s coroutines took {elapsed:.2f} s: they did not overlap"


@pytest.mark.parametrize("mode", MODES)
def test_a_coroutine_of_a_model_that_is_not_decoupled_runs_to_its_end_first(server, mode):
    # As Triton's stub: execute returns once its coroutine is done, so one instance runs
    # its requests one after another (batched requests would share one coroutine).
    model = f"sleeper_plain_{mode}"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda v: client.infer(model, [_x(v)]), (1.0, 2.0)))
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert [r.as_numpy("Y").tolist() for r in results] == [[[2.0] * 4], [[4.0] * 4]]
    assert elapsed >= 1.9, f"two 1 s coroutines took {elapsed:.2f} s"


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_a_stream_reaches_the_decoupled_coroutine(server, mode):
    model = f"cancelled_decoupled_{mode}"
    tag = 10 + list(MODES).index(mode)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer(model, [_x(tag)])
        time.sleep(0.5)  # the coroutine is awaiting by now
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    server.wait_log(f"coroutine {tag} saw: cancelled", 20.0)
    # the instance goes on: the next request is served (and cancelled) the same way
    assert _stream_once(server.grpc_url, f"sleeper_decoupled_{mode}", 1.0).tolist() == [[2.0] * 4]


@pytest.mark.parametrize("mode", MODES)
def test_a_client_cancel_reaches_the_coroutine_of_a_model_that_is_not_decoupled(server, mode):
    model = f"cancelled_plain_{mode}"
    tag = 20 + list(MODES).index(mode)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        answers: queue.Queue = queue.Queue()
        call = client.async_infer(
            model, [_x(tag)], callback=lambda result, error: answers.put(error)
        )
        time.sleep(0.5)
        call.cancel()
        error = answers.get(timeout=10)
        assert error is not None and re.search("(?i)cancel", str(error)), error
        server.wait_log(f"coroutine {tag} saw: cancelled", 20.0)
        # the instance is free again
        assert client.infer(f"sleeper_plain_{mode}", [_x(1.0)]).as_numpy("Y").tolist() == [
            [2.0] * 4
        ]
    finally:
        client.close()
