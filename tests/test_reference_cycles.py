"""A served request leaves no reference cycle behind: its objects are freed by reference
counting as soon as the last holder lets go, so the cyclic garbage collector has nothing
of ours to find. (A request, its response sender and stream, and the cancel hooks of the
schedulers and backends that held it once formed cycles: ~25 objects per request for the
collector, whose passes then took ~6% of the HTTP loop.)

Checked for the in-process API (sync and async), HTTP and gRPC, on in-thread models with
and without dynamic batching and a process-isolated one; and, in process, a decoupled one.
Inside a worker process too: a probe model looks at the worker's own collector.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from sample_models import (
    ADD_SUB_CONFIG,
    ADD_SUB_PY,
    DECOUPLED_COUNTER_CONFIG,
    DECOUPLED_COUNTER_PY,
)

from infercore import Server
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'
BATCHED = "dynamic_batching { }\n"
MODELS = {  # name: extra config
    "add_sub": "",
    "batched": BATCHED,
    "isolated": BATCHED + PROCESS,
}
ROUNDS = 12

# Runs in its own worker process. "start": collector off, keep what it finds; "work": an
# ordinary request; "report": collect, answer the names of infercore's objects found.
GC_PROBE_CONFIG = """
name: "gc_probe"
backend: "python"
max_batch_size: 8
input [ { name: "COMMAND", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "FOUND", data_type: TYPE_STRING, dims: [ -1 ] } ]
dynamic_batching { }
""" + PROCESS
GC_PROBE_PY = """
import gc
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            command = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy()
            found = []
            if command[0, 0] == b"start":
                gc.collect()
                gc.disable()
                gc.set_debug(gc.DEBUG_SAVEALL)
            elif command[0, 0] == b"report":
                gc.collect()
                found = sorted({f"{type(thing).__module__}.{type(thing).__qualname__}"
                                for thing in gc.garbage
                                if type(thing).__module__.startswith("infercore")})
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
            out = np.array([[name.encode() for name in found]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FOUND", out)]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = RepositoryBuilder(tmp_path_factory.mktemp("cycles") / "models")
    for name, extra in MODELS.items():
        repo.add_model(name, config=ADD_SUB_CONFIG.replace('"add_sub"', f'"{name}"') + extra,
                       model_py=ADD_SUB_PY)
    repo.add_model("counter", config=DECOUPLED_COUNTER_CONFIG, model_py=DECOUPLED_COUNTER_PY)
    repo.add_model("gc_probe", config=GC_PROBE_CONFIG, model_py=GC_PROBE_PY)
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=(*MODELS, "counter", "gc_probe")) as started:
        yield started


def _ours(garbage: list[object]) -> list[str]:
    """The names of infercore's objects among ``garbage`` (functions by their module)."""
    found = []
    for thing in garbage:
        kind = type(thing)
        module = getattr(thing, "__module__", None) if callable(thing) else kind.__module__
        if isinstance(module, str) and module.startswith("infercore"):
            found.append(f"{module}.{getattr(thing, '__qualname__', kind.__qualname__)}")
    return sorted(set(found))


def _cyclic_garbage_of(run: Callable[[], None]) -> list[str]:
    """Run ``run`` ROUNDS times with the collector off, then collect: ours that it found."""
    run()  # first use: lazy set-up is not per-request garbage
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collection finds stays in gc.garbage
    try:
        for _ in range(ROUNDS):
            run()
        gc.collect()
        return _ours(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _inputs() -> dict[str, np.ndarray]:
    ones = np.ones((1, 4), np.float32)
    return {"INPUT0": ones * 2, "INPUT1": ones}


@pytest.mark.parametrize("model", list(MODELS))
def test_in_process_requests_leave_no_cycles(server: Server, model: str):
    handle = server.model(model)

    def sync() -> None:
        response = handle.infer(_inputs()).result()
        assert response.outputs["OUTPUT0"].to_numpy().tolist() == [[3.0] * 4]

    def in_a_loop() -> None:
        async def infer() -> None:
            response = await handle.infer(_inputs())
            assert response.outputs["OUTPUT1"].to_numpy().tolist() == [[1.0] * 4]

        asyncio.run(infer())

    assert _cyclic_garbage_of(sync) == []
    assert _cyclic_garbage_of(in_a_loop) == []


def test_decoupled_streams_leave_no_cycles(server: Server):
    def stream() -> None:
        responses = list(server.model("counter").infer({"COUNT": np.array([3], np.int32)}))
        assert [r.outputs["INDEX"].to_numpy().tolist() for r in responses] == [[0], [1], [2]]

    assert _cyclic_garbage_of(stream) == []


@pytest.mark.parametrize("model", list(MODELS))
def test_http_requests_leave_no_cycles(server: Server, model: str):
    endpoint = server.serve_http(address="127.0.0.1", port=0)
    body = json.dumps({"inputs": [
        {"name": name, "datatype": "FP32", "shape": [1, 4], "data": value.ravel().tolist()}
        for name, value in _inputs().items()]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=30)

    def infer() -> None:
        connection.request("POST", f"/v2/models/{model}/infer", body)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert json.loads(response.read())["outputs"][0]["data"] == [3.0] * 4

    try:
        assert _cyclic_garbage_of(infer) == []
    finally:
        connection.close()
        endpoint.stop()


@pytest.mark.parametrize("model", list(MODELS))
def test_grpc_requests_leave_no_cycles(server: Server, model: str):
    endpoint = server.serve_grpc(address="127.0.0.1", port=0)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{endpoint.port}")

    def infer() -> None:
        inputs = []
        for name, value in _inputs().items():
            tensor = grpcclient.InferInput(name, [1, 4], "FP32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        result = client.infer(model, inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [[3.0] * 4]

    try:
        assert _cyclic_garbage_of(infer) == []
    finally:
        client.close()
        endpoint.stop()


def test_worker_process_requests_leave_no_cycles(server: Server):
    probe = server.model("gc_probe")

    def command(word: bytes) -> list[bytes]:
        response = probe.infer({"COMMAND": np.array([[word]], dtype=np.object_)}).result()
        return response.outputs["FOUND"].to_numpy().ravel().tolist()

    command(b"work")  # first use: lazy set-up is not per-request garbage
    command(b"start")
    for _ in range(ROUNDS):
        command(b"work")
    assert command(b"report") == []
