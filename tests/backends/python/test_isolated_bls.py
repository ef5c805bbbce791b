"""BLS from process-isolated Python models: calls to other models run by the server.

The callers run in worker processes; the models they call run in this process (in-thread)
or in workers of their own. Each test talks to an in-process ``infercore.Server``.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, DATATYPES

from infercore import Server
from infercore.errors import InternalError, UnavailableError
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

CALLER_CONFIG = f"""
name: "caller"
backend: "python"
max_batch_size: 8
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }},
  {{ name: "TEXT", data_type: TYPE_STRING, dims: [ -1 ] }},
  {{ name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }}
]
{PROCESS}
"""

# One isolated caller; the request's parameters say what to call and how.
CALLER_PY = """
import asyncio
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(values, texts):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("OUTPUT0", np.asarray(values, np.float32).reshape(1, -1)),
        pb_utils.Tensor("TEXT", np.array([[t.encode() for t in texts]], np.object_)),
        pb_utils.Tensor("PID", np.array([[os.getpid()]], np.int64)),
    ])


def call(target, inputs, **kw):
    return pb_utils.InferenceRequest(model_name=target, inputs=inputs, **kw)


def forwarded(p, **extra):
    # the parameters the test asks the caller to pass on to the model it calls
    return dict(json.loads(p.get("forward", "{}")), **extra)


class TritonPythonModel:
    async def execute(self, requests):
        return [await self.one(request) for request in requests]

    async def one(self, request):
        p = json.loads(request.parameters())
        mode, target = p["mode"], p.get("target", "")
        inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                  pb_utils.get_input_tensor_by_name(request, "INPUT1")]
        if mode == "exec":  # one call; its output, or its error's text
            response = call(target, inputs, requested_output_names=["OUTPUT0"],
                            parameters=forwarded(p)).exec()
            if response.has_error():
                return answer([], [response.error().message()])
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
            return answer(out.as_numpy(), [])
        if mode == "gather":  # several calls in flight at once
            calls = [call(target, inputs, requested_output_names=["OUTPUT0"]).async_exec()
                     for _ in range(p["count"])]
            responses = await asyncio.gather(*calls)
            texts = [r.error().message() for r in responses if r.has_error()]
            values = [v for r in responses if not r.has_error()
                      for v in r.output_tensors()[0].as_numpy().ravel()]
            return answer(values, texts)
        if mode in ("stream", "cancel"):  # a decoupled call: every response, as it comes
            count = pb_utils.Tensor("COUNT", np.array([p.get("count", 0)], np.int32))
            responses = call(target, [count], requested_output_names=["OUT"]).exec(
                decoupled=True)
            values, texts = [], []
            for response in responses:
                if response.has_error():
                    texts.append(response.error().message())
                    continue
                for tensor in response.output_tensors():
                    values.append(float(tensor.as_numpy()[0]))
                if mode == "cancel" and len(values) == 3:
                    responses.cancel()
            return answer(values, texts)
        if mode == "timeout":
            response = call(target, inputs, requested_output_names=["OUTPUT0"],
                            timeout=p["timeout"]).exec()
            return answer(pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy(),
                          [])
        if mode == "pid":
            response = call(target, inputs, requested_output_names=["OUTPUT0"],
                            parameters=forwarded(p, caller_pid=os.getpid())).exec()
            return answer([], [response.error().message()] if response.has_error() else [])
        raise pb_utils.TritonModelException(f"unknown mode {mode}")
"""

ADD_SUB_ISOLATED_CONFIG = ADD_SUB_CONFIG.replace('"add_sub"', '"add_sub_isolated"') + PROCESS

FAILING_CONFIG = """
name: "failing"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""

FAILING_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("INPUT0 must be positive",
                                     pb_utils.TritonError.INVALID_ARG)
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""

# Two instances that only answer once both are executing: proof of concurrent calls.
MEET_CONFIG = FAILING_CONFIG.replace('"failing"', '"meet"') + (
    "instance_group [ { count: 2, kind: KIND_CPU } ]")

MEET_PY = """
import threading

import triton_python_backend_utils as pb_utils

BARRIER = threading.Barrier(2, timeout=30)


class TritonPythonModel:
    def execute(self, requests):
        BARRIER.wait()
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 10)])
            for r in requests]
"""

STREAM_CONFIG = """
name: "{name}"
backend: "python"
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
"""

COUNTER_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            threading.Thread(target=self.send, args=(request.get_response_sender(), count)
                             ).start()

    def send(self, sender, count):
        for i in range(count):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([i], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# Streams until its caller cancels, then ends with a CANCELLED error.
ENDLESS_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.send, args=(request.get_response_sender(),)).start()

    def send(self, sender):
        i = 0
        while not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            i += 1
            threading.Event().wait(0.002)  # pace it: the caller cancels after 3
        error = pb_utils.TritonError("stopped: cancelled", pb_utils.TritonError.CANCELLED)
        sender.send(pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# Reports what it was called with: the request's timeout, as OUTPUT0.
REPORT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", np.full((1, 4), r.timeout(), np.float32))]) for r in requests]
"""

# Tells the test its caller's pid over a Unix socket, waits for the word, then tells the
# test whether its request was cancelled meanwhile.
BLOCKER_PY = """
import json
import socket

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            p = json.loads(request.parameters())
            connection = socket.socket(socket.AF_UNIX)
            connection.connect(p["path"])
            connection.sendall(str(p["caller_pid"]).encode())
            connection.recv(16)
            connection.sendall(b"cancelled" if request.is_cancelled() else b"running")
            connection.close()
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", np.zeros((1, 4), np.float32))]) for _ in requests]
"""


def _type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype


def identity_config(name: str, extra: str = "") -> str:
    return "\n".join([
        f'name: "{name}"', 'backend: "python"',
        "input [", ",\n".join(
            f'  {{ name: "IN_{t}", data_type: {_type(t)}, dims: [ -1 ], optional: true }}'
            for t in DATATYPES), "]",
        "output [", ",\n".join(
            f'  {{ name: "OUT_{t}", data_type: {_type(t)}, dims: [ -1 ] }}'
            for t in DATATYPES), "]", extra])


IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT_" + t.name()[3:], t.as_numpy())
                                            for t in r.inputs()]) for r in requests]
"""

# Isolated: passes its inputs to "identity" over BLS, answers with every output it got.
RELAY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            response = pb_utils.InferenceRequest(
                model_name="identity", inputs=request.inputs(),
                requested_output_names=[]).exec()  # [] asks for every output
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            responses.append(pb_utils.InferenceResponse(response.output_tensors()))
        return responses
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepositoryBuilder:
    built = RepositoryBuilder(tmp_path_factory.mktemp("isolated_bls") / "models")
    built.add_model("caller", config=CALLER_CONFIG, model_py=CALLER_PY)
    built.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    built.add_model("add_sub_isolated", config=ADD_SUB_ISOLATED_CONFIG, model_py=ADD_SUB_PY)
    built.add_model("failing", config=FAILING_CONFIG, model_py=FAILING_PY)
    built.add_model("meet", config=MEET_CONFIG, model_py=MEET_PY)
    built.add_model("counter", config=STREAM_CONFIG.format(name="counter"), model_py=COUNTER_PY)
    built.add_model("endless", config=STREAM_CONFIG.format(name="endless"), model_py=ENDLESS_PY)
    built.add_model("report", config=FAILING_CONFIG.replace('"failing"', '"report"'),
                    model_py=REPORT_PY)
    built.add_model("blocker", config=FAILING_CONFIG.replace('"failing"', '"blocker"'),
                    model_py=BLOCKER_PY)
    built.add_model("identity", config=identity_config("identity"), model_py=IDENTITY_PY)
    built.add_model("relay", config=identity_config("relay", PROCESS), model_py=RELAY_PY)
    return built


@pytest.fixture(scope="module")
def server(repo: RepositoryBuilder) -> Iterator[Server]:
    with Server(model_repository=repo.path) as started:
        yield started


@pytest.fixture
def rendezvous() -> Iterator[tuple[str, socket.socket]]:
    """A Unix socket the blocker model connects to (short path: AF_UNIX paths are limited)."""
    directory = tempfile.mkdtemp(prefix="ic")
    path = os.path.join(directory, "rv")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(4)
    listener.settimeout(30)
    yield path, listener
    listener.close()
    shutil.rmtree(directory)


ONES = np.ones((1, 4), np.float32)


def call(server: Server, mode: str, model: str = "caller", **parameters: object
         ) -> tuple[list[float], list[str], int]:
    """Run the caller: (its values, its texts, its worker's pid)."""
    response = server.model(model).infer(
        {"INPUT0": ONES * 2, "INPUT1": ONES},
        parameters={"mode": mode, **{k: v if isinstance(v, (str, int)) else json.dumps(v)
                                     for k, v in parameters.items()}},
    ).result()
    assert response is not None
    texts = [text.decode() for text in response.outputs["TEXT"].to_numpy().ravel()]
    return (response.outputs["OUTPUT0"].to_numpy().ravel().tolist(), texts,
            int(response.outputs["PID"].to_numpy()[0, 0]))


def test_exec_chains_an_isolated_model_to_an_in_thread_one(server: Server):
    values, texts, pid = call(server, "exec", target="add_sub")
    assert (values, texts) == ([3.0] * 4, [])
    assert pid != os.getpid()  # the caller ran in its worker; add_sub ran here


def test_exec_between_two_isolated_models(server: Server):
    for _ in range(3):  # blocks are released and reused: several calls, same answers
        values, texts, _ = call(server, "exec", target="add_sub_isolated")
        assert (values, texts) == ([3.0] * 4, [])


def test_error_response_comes_back_with_its_message(server: Server):
    assert call(server, "exec", target="failing")[:2] == ([], ["INPUT0 must be positive"])


def test_call_to_a_missing_model_fails_clearly(server: Server):
    _, texts, _ = call(server, "exec", target="nope")
    # Triton's Python backend words, as in-thread (conformance: bls_single_unknown_model)
    assert texts == ["Model nope - Error when running inference: Failed for execute the "
                     "inference request. Model 'nope' is not ready."]
    assert call(server, "exec", target="add_sub")[0] == [3.0] * 4  # still serving


def test_async_exec_calls_are_in_flight_together(server: Server):
    # meet answers only when both of its instances execute at once
    values, texts, _ = call(server, "gather", target="meet", count=2)
    assert texts == []
    assert values == [20.0] * 8


def test_decoupled_exec_streams_every_response(server: Server):
    values, texts, _ = call(server, "stream", target="counter", count=50)
    assert (values, texts) == ([float(i) for i in range(50)], [])


def test_cancelling_a_decoupled_call_reaches_the_called_model(server: Server):
    values, texts, _ = call(server, "cancel", target="endless")
    assert values[:3] == [0.0, 1.0, 2.0]
    assert texts == ["stopped: cancelled"]


def test_every_datatype_crosses_both_ways_and_arenas_grow_for_large_tensors(server: Server):
    samples = {
        "BOOL": np.array([True, False, True]),
        "UINT8": np.array([0, 1, 255], np.uint8),
        "UINT16": np.array([0, 1, 65535], np.uint16),
        "UINT32": np.array([0, 1, 2**32 - 1], np.uint32),
        "UINT64": np.array([0, 1, 2**64 - 1], np.uint64),
        "INT8": np.array([-128, 0, 127], np.int8),
        "INT16": np.array([-32768, 1, 32767], np.int16),
        "INT32": np.array([-(2**31), 2, 2**31 - 1], np.int32),
        "INT64": np.array([-(2**63), 3, 2**63 - 1], np.int64),
        "FP16": np.array([0.5, -1.0, 65504.0], np.float16),
        "FP32": np.arange(1 << 20, dtype=np.float32),  # 4 MiB: past the 1 MiB arenas
        "FP64": np.array([1e-300, -2.0, 1e300]),
        "BF16": np.array([1.5, -2.0, 3.0e38], ml_dtypes.bfloat16),
        "BYTES": np.array([b"", b"\x00bin\xff", "ünï".encode()], np.object_),
    }
    assert set(samples) == set(DATATYPES)
    for _ in range(2):  # the second round reuses the grown, released blocks
        response = server.model("relay").infer(
            {f"IN_{name}": array for name, array in samples.items()}).result()
        assert response is not None
        for name, array in samples.items():
            got = response.outputs[f"OUT_{name}"].to_numpy()
            assert got.dtype == array.dtype, name
            np.testing.assert_array_equal(got, array, err_msg=name)


def _largest_mapping(fragment: str) -> int:
    """The largest mapping in this process of a shared memory file named with ``fragment``."""
    sizes = [0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            if fragment in line:
                start, end = line.split()[0].split("-")
                sizes.append(int(end, 16) - int(start, 16))
    return max(sizes)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_bls_blocks_are_released_and_reused_not_piled_up(server: Server):
    # The server's request objects refer to each other (request <-> sender), so only the
    # garbage collector would free them; the inputs' blocks must not wait for it.
    inputs = {"IN_FP32": np.arange(1 << 20, dtype=np.float32)}  # a 4 MiB block per call
    gc.disable()
    try:
        for _ in range(8):
            server.model("relay").infer(inputs).result()
        # At most the previous call's block is still held when the next is allocated.
        assert 4 << 20 < _largest_mapping("infercore-relay_0-bls") < 16 << 20
    finally:
        gc.enable()


def test_timeout_travels_with_the_call(server: Server):
    values, _, _ = call(server, "timeout", target="report", timeout=123456)
    assert values == [123456.0] * 4


def test_bls_call_fails_clearly_when_the_worker_dies_during_it(
        server: Server, rendezvous: tuple[str, socket.socket]):
    path, listener = rendezvous
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call(server, "pid", target="blocker", forward={"path": path})
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    client = threading.Thread(target=run)
    client.start()
    connection, _ = listener.accept()
    caller_pid = int(connection.recv(32))
    os.kill(caller_pid, signal.SIGKILL)  # the caller dies waiting on its BLS call
    client.join(30)
    assert not client.is_alive()
    error = outcome[0]
    assert isinstance(error, InternalError)
    assert "Stub process is not healthy" in error.message and "SIGKILL" in error.message
    # The restarted caller serves again ...
    values, _, pid = call(server, "exec", target="add_sub")
    assert values == [3.0] * 4 and pid != caller_pid
    # ... and the call its predecessor left behind was cancelled, not left running.
    connection.sendall(b"go")
    assert connection.recv(16) == b"cancelled"
    connection.close()


UNLOAD_CALLER_CONFIG = """
name: "background"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
""" + PROCESS

# A decoupled isolated model whose thread calls the blocker; finalize waits for the thread.
UNLOAD_CALLER_PY = """
import json
import os
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            path = json.loads(request.parameters())["path"]
            thread = threading.Thread(target=self.work, args=(request, path))
            thread.start()
            self.threads.append(thread)

    def work(self, request, path):
        batch = request.inputs()[0].as_numpy().reshape(1, 4)
        response = pb_utils.InferenceRequest(
            model_name="blocker", requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", batch), pb_utils.Tensor("INPUT1", batch)],
            parameters={"path": path, "caller_pid": os.getpid()}).exec()
        pb_utils.Logger.log_warn("background call ended: "
                                 + (response.error().message() if response.has_error()
                                    else "ok"))
        request.get_response_sender().send(
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""


def test_unload_ends_a_bls_call_in_flight_with_a_clear_error(
        repo: RepositoryBuilder, rendezvous: tuple[str, socket.socket],
        caplog: pytest.LogCaptureFixture):
    path, listener = rendezvous
    repo.add_model("background", config=UNLOAD_CALLER_CONFIG, model_py=UNLOAD_CALLER_PY)
    options = {"model_control_mode": "explicit", "startup_models": ("background", "blocker"),
               "exit_timeout": 0}
    with Server(model_repository=repo.path, **options) as server, caplog.at_level(
            logging.WARNING, logger="infercore.model"):
        stream = server.model("background").infer(
            {"INPUT0": np.ones(4, np.float32)}, parameters={"path": path})
        connection, _ = listener.accept()
        connection.recv(32)  # the blocker holds the background model's call
        server.unload("background")  # returns: the call was ended, finalize ran
        with pytest.raises(UnavailableError, match="unloaded before the request completed"):
            list(stream)
        connection.sendall(b"go")
        assert connection.recv(16) == b"cancelled"
        connection.close()
    ended = [r.getMessage() for r in caplog.records if "background call ended" in r.getMessage()]
    assert len(ended) == 1
    assert "BLS request to model 'blocker' was cancelled" in ended[0]
    assert "is being unloaded" in ended[0]
