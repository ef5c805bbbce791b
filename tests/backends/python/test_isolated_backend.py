"""Process-isolated Python instances driven through the backend protocol, with real workers.

Worker start-up is what these tests spend their time on, so the models that survive their
tests are loaded once per module; crash tests share one instance and check that it comes
back after every crash.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import InstanceInfo, ModelContext
from infercore.backends.python.backend import PythonBackend
from infercore.backends.python.isolation.instances import (
    InstanceState,
    IsolatedInstance,
    IsolatedModel,
    isolation_from_config,
)
from infercore.errors import InternalError, InvalidArgumentError, UnavailableError
from infercore.payload import Payload
from infercore.request import InferRequest
from infercore.response import InferResponse, ResponseSender, ResponseStream
from infercore.tensor import DataType
from infercore.tensor import Tensor as CoreTensor

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

CRASHY_CONFIG = f"""
name: "crashy"
backend: "python"
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }}
]
{PROCESS}
"""

CRASHY_PY = """
import ctypes
import json
import os
import socket

import numpy as np
import triton_python_backend_utils as pb_utils


def rendezvous(path):
    # Tell the test this worker is inside execute, then wait for its word.
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(path)
    connection.sendall(str(os.getpid()).encode())
    return connection.recv(16)


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        if os.path.exists(os.path.join(args["model_repository"], "refuse")):
            raise RuntimeError("refusing to start")
        pb_utils.Logger.log_info(f"initialized in {os.getpid()}")

    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            action = parameters.get("action", "")
            if action == "segv":
                ctypes.string_at(0)
            elif action == "exit":
                os._exit(3)
            elif action == "block":
                rendezvous(parameters["path"])
            elif action == "log":
                pb_utils.Logger.log_warn(parameters["text"])
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b),
                pb_utils.Tensor("OUTPUT1", a - b),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
            ], parameters={"args": json.dumps(self.args)} if action == "args" else None))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info(f"finalized {os.getpid()}")
"""

SAMPLES = {
    DataType.BOOL: np.array([True, False, True]),
    DataType.INT8: np.array([-128, 0, 127], dtype=np.int8),
    DataType.INT16: np.array([-32768, 1, 32767], dtype=np.int16),
    DataType.INT32: np.array([-(2**31), 2, 2**31 - 1], dtype=np.int32),
    DataType.INT64: np.array([-(2**63), 3, 2**63 - 1], dtype=np.int64),
    DataType.UINT8: np.array([0, 1, 255], dtype=np.uint8),
    DataType.UINT16: np.array([0, 1, 65535], dtype=np.uint16),
    DataType.UINT32: np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    DataType.UINT64: np.array([0, 1, 2**64 - 1], dtype=np.uint64),
    DataType.FP16: np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    DataType.FP32: np.array([0.25, -1e30, 3.5], dtype=np.float32),
    DataType.FP64: np.array([1e-300, -2.0, 1e300], dtype=np.float64),
    DataType.BF16: np.array([1.5, -2.0, 3.0e38], dtype=ml_dtypes.bfloat16),
    DataType.BYTES: np.array([b"", b"\x00bin\xff", "ünï".encode()], dtype=np.object_),
}

IDENTITY_CONFIG = (
    'name: "identity"\nbackend: "python"\n'
    + "input [\n" + ",\n".join(
        f'  {{ name: "IN_{dt.value}", data_type: {dt.config_name}, dims: [ -1 ] }}'
        for dt in SAMPLES) + "\n]\n"
    + "output [\n" + ",\n".join(
        f'  {{ name: "OUT_{dt.value}", data_type: {dt.config_name}, dims: [ -1 ] }}'
        for dt in SAMPLES) + "\n]\n"
    + PROCESS
)

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [pb_utils.Tensor("OUT_" + t.name()[3:], t.as_numpy())
                       for t in request.inputs()]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

DECOUPLED_CONFIG = f"""
name: "streamer"
backend: "python"
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
{PROCESS}
"""

DECOUPLED_PY = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            mode = json.loads(request.parameters()).get("mode", "thread")
            if mode == "inline":
                self.stream(sender, count)
                continue
            if mode == "silent":  # never answers: the request stays open
                continue
            target = self.until_cancelled if mode == "cancel" else self.stream
            thread = threading.Thread(target=target, args=(sender, count))
            thread.start()
            self.threads.append(thread)
        return None

    def stream(self, sender, count):
        for i in range(count):
            out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def until_cancelled(self, sender, count):
        while not sender.is_cancelled():  # the flag lives in shared memory
            time.sleep(0.001)
        error = pb_utils.TritonError("stopped: cancelled", pb_utils.TritonError.CANCELLED)
        sender.send(pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

OVERLAP_CONFIG = f"""
name: "overlap"
backend: "python"
input [ {{ name: "PATH", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "WINDOW", data_type: TYPE_INT64, dims: [ 3 ] }} ]
instance_group [ {{ count: 2, kind: KIND_CPU }} ]
{PROCESS}
"""

OVERLAP_PY = """
import os
import socket
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.monotonic_ns()
            path = pb_utils.get_input_tensor_by_name(request, "PATH").as_numpy()[0]
            connection = socket.socket(socket.AF_UNIX)
            connection.connect(path.decode())
            connection.sendall(b"in")
            connection.recv(16)  # the test answers once both workers are in execute
            window = np.array([start, time.monotonic_ns(), os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("WINDOW", window)]))
        return responses
"""


# -- harness -------------------------------------------------------------------------------
class Harness:
    """Writes models under one repository and drives the backend as the engine does."""

    def __init__(self, root: Path) -> None:
        self.repo = root / "models"
        self.backend = PythonBackend()
        self._loaded: list[tuple[IsolatedModel, list[IsolatedInstance]]] = []

    def load(self, name: str, model_py: str, config: str, *, instances: int = 1,
             backend_config: dict[str, str] | None = None
             ) -> tuple[IsolatedModel, list[IsolatedInstance]]:
        version_dir = self.repo / name / "1"
        version_dir.mkdir(parents=True, exist_ok=True)
        (version_dir / "model.py").write_text(textwrap.dedent(model_py))
        parsed = text_format.Parse(config, model_config_pb2.ModelConfig())
        context = ModelContext(name=name, version=1, config=parsed, model_dir=self.repo / name,
                               version_dir=version_dir, repository=self.repo,
                               backend_config=backend_config or {})
        model = self.backend.create_model(context)
        assert isinstance(model, IsolatedModel)
        created: list[IsolatedInstance] = []
        self._loaded.append((model, created))
        for index in range(instances):
            info = InstanceInfo(f"{name}_0_{index}", f"{name}_0", index, "KIND_CPU", 0)
            created.append(model.create_instance(info))
        return model, created

    def close(self) -> None:
        for model, instances in reversed(self._loaded):
            for instance in instances:
                instance.finalize()
            model.finalize()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    made = Harness(tmp_path_factory.mktemp("isolated"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def crashy(harness: Harness) -> IsolatedInstance:
    _, (instance,) = harness.load("crashy", CRASHY_PY, CRASHY_CONFIG)
    return instance


@pytest.fixture
def rendezvous() -> Iterator[tuple[str, socket.socket]]:
    """A Unix socket the models connect to (short path: AF_UNIX paths are limited)."""
    directory = tempfile.mkdtemp(prefix="ic")
    path = os.path.join(directory, "rv")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(4)
    listener.settimeout(30)
    yield path, listener
    listener.close()
    shutil.rmtree(directory)


_CLOCK = itertools.count(100)


def request(model: str, inputs: dict[str, object], **kw: object
            ) -> tuple[InferRequest, ResponseStream]:
    tensors = {name: value if isinstance(value, CoreTensor) else CoreTensor.from_object(value)
               for name, value in inputs.items()}
    core = InferRequest(model, tensors, **kw)  # type: ignore[arg-type]
    stream = ResponseStream(core, raise_on_error=False)
    core.sender = ResponseSender(core, stream, model, 1)
    return core, stream


def execute(instance: IsolatedInstance, *requests: InferRequest) -> Payload:
    payload = Payload(list(requests), lambda: next(_CLOCK))
    instance.execute(payload)
    return payload


def collect(stream: ResponseStream, timeout: float = 20.0) -> list[InferResponse]:
    got: list[InferResponse] = []
    done = threading.Event()

    def read() -> None:
        try:
            got.extend(stream)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), "the stream did not end"
    return got


def only(stream: ResponseStream) -> InferResponse:
    (response,) = collect(stream)
    return response


def add_sub(**parameters: str) -> tuple[InferRequest, ResponseStream]:
    ones = np.ones(4, np.float32)
    return request("crashy", {"INPUT0": ones * 3, "INPUT1": ones}, parameters=parameters)


def assert_serves(instance: IsolatedInstance) -> int:
    """The instance answers correctly; returns the pid of the worker that answered."""
    core, stream = add_sub()
    execute(instance, core)
    response = only(stream)
    assert response.error is None, response.error
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), [4, 4, 4, 4])
    return int(response.outputs["PID"].to_numpy()[0])


def assert_crash_error(response: InferResponse, how: str) -> None:
    assert isinstance(response.error, InternalError)
    text = response.error.message
    assert text.startswith("Failed to process the request(s) for model 'crashy_0_0', message: "
                           "Stub process is not healthy."), text
    assert how in text, text


# -- basics --------------------------------------------------------------------------------
def test_requests_run_in_a_worker_process(crashy: IsolatedInstance):
    pid = assert_serves(crashy)
    assert pid != os.getpid()
    assert crashy.statistics().pid == pid
    assert crashy.statistics().state is InstanceState.READY


def test_a_batch_gets_one_response_each_and_compute_marks(crashy: IsolatedInstance):
    pairs = [request("crashy", {"INPUT0": np.full(4, i, np.float32),
                                "INPUT1": np.ones(4, np.float32)}) for i in range(3)]
    payload = execute(crashy, *(core for core, _ in pairs))
    for i, (_, stream) in enumerate(pairs):
        np.testing.assert_array_equal(only(stream).outputs["OUTPUT1"].to_numpy(), [i - 1] * 4)
    assert 0 < payload.compute_input_end_ns < payload.compute_output_start_ns


def test_model_logger_lines_reach_the_server_log(crashy: IsolatedInstance):
    seen = threading.Event()
    records: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "hello from the worker" in record.getMessage():
                records.append(record)
                seen.set()

    target = logging.getLogger("infercore.model")
    handler = Catch()
    target.addHandler(handler)
    previous = target.level
    target.setLevel(logging.INFO)
    try:
        core, stream = add_sub(action="log", text="hello from the worker")
        execute(crashy, core)
        assert only(stream).error is None
        assert seen.wait(10)
    finally:
        target.removeHandler(handler)
        target.setLevel(previous)
    (record,) = records
    assert record.getMessage() == "hello from the worker"  # as Triton's log shows it
    assert record.levelno == logging.WARNING
    assert record.model_name == "crashy"  # type: ignore[attr-defined]
    assert record.pathname.endswith("model.py") and record.funcName == "execute"


def test_every_datatype_crosses_shared_memory(harness: Harness):
    _, (instance,) = harness.load("identity", IDENTITY_PY, IDENTITY_CONFIG)
    inputs = {f"IN_{dt.value}": CoreTensor(dt, array) for dt, array in SAMPLES.items()}
    core, stream = request("identity", inputs)
    execute(instance, core)
    response = only(stream)
    assert response.error is None, response.error
    for dt, array in SAMPLES.items():
        out = response.outputs[f"OUT_{dt.value}"]
        assert out.data_type is dt
        np.testing.assert_array_equal(out.to_numpy(), array)
    # larger than the default 1 MiB arenas: both grow; and empty tensors
    big = np.arange(600_000, dtype=np.float64)
    core, stream = request("identity", {
        "IN_FP64": CoreTensor(DataType.FP64, big),
        "IN_BYTES": CoreTensor(DataType.BYTES, np.empty(0, dtype=np.object_)),
        "IN_INT8": CoreTensor(DataType.INT8, np.empty(0, dtype=np.int8)),
    })
    execute(instance, core)
    response = only(stream)
    assert response.error is None, response.error
    np.testing.assert_array_equal(response.outputs["OUT_FP64"].to_numpy(), big)
    assert response.outputs["OUT_BYTES"].shape == (0,)
    assert response.outputs["OUT_INT8"].shape == (0,)


def test_small_shared_memory_settings_grow_as_needed(harness: Harness):
    settings = {"shm-default-byte-size": "4096", "shm-growth-byte-size": "4096"}
    _, (instance,) = harness.load("identity", IDENTITY_PY, IDENTITY_CONFIG,
                                  backend_config=settings)
    for size in (10, 100_000, 10):
        values = np.arange(size, dtype=np.int64)
        texts = np.array([b"x" * size], dtype=np.object_)
        core, stream = request("identity", {"IN_INT64": values, "IN_BYTES": texts})
        execute(instance, core)
        response = only(stream)
        assert response.error is None, response.error
        np.testing.assert_array_equal(response.outputs["OUT_INT64"].to_numpy(), values)
        assert response.outputs["OUT_BYTES"].to_numpy()[0] == texts[0]


def test_bad_shared_memory_setting_fails_the_load(harness: Harness):
    with pytest.raises(InvalidArgumentError, match="'shm-default-byte-size' must be a positive"):
        harness.load("identity", IDENTITY_PY, IDENTITY_CONFIG,
                     backend_config={"shm-default-byte-size": "lots"})


ASSEMBLED_CONFIG = f"""
name: "assembled"
backend: "python"
max_batch_size: 16
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 4 ] }} ]
parameters: {{ key: "infercore.batch_assembly" value: {{ string_value: "concat" }} }}
{PROCESS}
"""

ASSEMBLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, batch):
        x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)],
                                          parameters={"rows": int(x.shape[0])})
"""


def test_batch_assembly_runs_in_the_worker(harness: Harness):
    _, (instance,) = harness.load("assembled", ASSEMBLED_PY, ASSEMBLED_CONFIG)
    xs = [np.full((rows, 4), rows, np.float32) for rows in (1, 3, 2)]
    pairs = [request("assembled", {"X": x}) for x in xs]
    execute(instance, *(core for core, _ in pairs))
    for x, (_, stream) in zip(xs, pairs, strict=True):
        response = only(stream)
        np.testing.assert_array_equal(response.outputs["Y"].to_numpy(), x * 2)
        assert response.parameters["rows"] == 6  # one execute saw the whole batch


# -- decoupled -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def streamer(harness: Harness) -> IsolatedInstance:
    _, (instance,) = harness.load("streamer", DECOUPLED_PY, DECOUPLED_CONFIG)
    return instance


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_decoupled_responses_arrive_in_order_with_the_final_flag(
    streamer: IsolatedInstance, mode: str
):
    pairs = [request("streamer", {"COUNT": np.array([n], np.int32)}, parameters={"mode": mode})
             for n in (40, 0, 7)]
    execute(streamer, *(core for core, _ in pairs))
    for n, (core, stream) in zip((40, 0, 7), pairs, strict=True):
        responses = collect(stream)
        assert [int(r.outputs["OUT"].to_numpy()[0]) for r in responses] == list(range(n))
        assert not any(r.final for r in responses)
        assert stream.done and core.sender is not None and core.sender.closed


def test_unload_answers_requests_a_decoupled_model_still_holds(harness: Harness):
    _, (instance,) = harness.load("streamer", DECOUPLED_PY, DECOUPLED_CONFIG)
    core, stream = request("streamer", {"COUNT": np.array([1], np.int32)},
                           parameters={"mode": "silent"})
    execute(instance, core)
    assert not stream.done
    instance.finalize()
    (response,) = collect(stream)
    assert isinstance(response.error, UnavailableError)
    assert "unloaded before the request finished" in response.error.message


def test_decoupled_model_sees_cancellation(streamer: IsolatedInstance):
    core, stream = request("streamer", {"COUNT": np.array([1], np.int32)},
                           parameters={"mode": "cancel"})
    execute(streamer, core)  # returns at once: the model's thread waits for the flag
    assert not stream.done
    core.cancel()
    (response,) = collect(stream)
    assert response.error is not None and "stopped: cancelled" in response.error.message


# -- crashes -------------------------------------------------------------------------------
def test_segfault_fails_the_request_and_the_worker_is_restarted(crashy: IsolatedInstance):
    before = crashy.statistics()
    core, stream = add_sub(action="segv")
    execute(crashy, core)
    assert_crash_error(only(stream), "killed by signal 11 (SIGSEGV)")
    pid = assert_serves(crashy)
    after = crashy.statistics()
    assert pid != before.pid and after.pid == pid
    assert after.crashes == before.crashes + 1 and after.restarts == before.restarts + 1


def test_exit_mid_batch_fails_every_request_of_the_batch(crashy: IsolatedInstance):
    pairs = [add_sub(), add_sub(action="exit"), add_sub()]
    execute(crashy, *(core for core, _ in pairs))
    for _, stream in pairs:
        assert_crash_error(only(stream), "exited with status 3")
    assert_serves(crashy)


def test_sigkill_mid_execute_fails_the_request(crashy: IsolatedInstance, rendezvous):
    path, listener = rendezvous
    core, stream = add_sub(action="block", path=path)
    runner = threading.Thread(target=execute, args=(crashy, core))
    runner.start()
    connection, _ = listener.accept()  # the worker is inside execute now
    pid = int(connection.recv(16))
    os.kill(pid, signal.SIGKILL)
    runner.join(20)
    assert not runner.is_alive()
    assert_crash_error(only(stream), "killed by signal 9 (SIGKILL)")
    connection.close()
    assert assert_serves(crashy) != pid


def test_a_worker_killed_while_idle_is_replaced_before_the_next_request(
    crashy: IsolatedInstance,
):
    pid = assert_serves(crashy)
    os.kill(pid, signal.SIGKILL)
    # The next request either finds the replacement ready or, if it reaches the dead
    # worker first, is retried on the replacement: it never fails.
    assert assert_serves(crashy) != pid


def test_a_payload_the_dead_worker_never_read_is_retried_on_its_replacement(
    crashy: IsolatedInstance,
):
    pid = assert_serves(crashy)
    os.kill(pid, signal.SIGSTOP)  # it cannot read what is sent from now on
    core, stream = add_sub()
    runner = threading.Thread(target=execute, args=(crashy, core))
    runner.start()
    runner.join(0.3)
    assert runner.is_alive()  # the payload waits, unread, in the stopped worker's socket
    os.kill(pid, signal.SIGKILL)
    runner.join(20)
    assert not runner.is_alive()
    response = only(stream)
    assert response.error is None, response.error  # not failed: run by the new worker
    assert int(response.outputs["PID"].to_numpy()[0]) not in (0, pid)


def test_a_failed_restart_is_retried_by_the_next_request(harness: Harness):
    _, (instance,) = harness.load("flaky", CRASHY_PY, CRASHY_CONFIG.replace('"crashy"',
                                                                           '"flaky"'))
    refuse = harness.repo / "flaky" / "refuse"
    ones = np.ones(4, np.float32)

    def flaky(**parameters: str) -> InferResponse:
        core, stream = request("flaky", {"INPUT0": ones, "INPUT1": ones},
                               parameters=parameters)
        execute(instance, core)
        return only(stream)

    refuse.touch()  # from now on initialize raises
    assert "exited with status 3" in str(flaky(action="exit").error)
    # The restart after the crash failed; this request waits for it, tries once more, fails.
    failed = flaky()
    assert isinstance(failed.error, InternalError)
    assert "Stub process is not healthy. Restarting the worker process of instance " \
           "'flaky_0_0' failed: RuntimeError: refusing to start" in failed.error.message
    assert instance.statistics().state is InstanceState.FAILED
    refuse.unlink()
    assert flaky().error is None  # restarted on this request's thread
    statistics = instance.statistics()
    assert statistics.state is InstanceState.READY
    assert (statistics.crashes, statistics.restarts) == (1, 1)
    assert "refusing to start" in statistics.last_failure


# -- parallelism ---------------------------------------------------------------------------
def test_two_instances_execute_at_the_same_time_in_two_processes(harness: Harness, rendezvous):
    path, listener = rendezvous
    _, instances = harness.load("overlap", OVERLAP_PY, OVERLAP_CONFIG, instances=2)
    pairs = [request("overlap", {"PATH": np.array([path.encode()], dtype=np.object_)})
             for _ in instances]
    runners = [threading.Thread(target=execute, args=(instance, core))
               for instance, (core, _) in zip(instances, pairs, strict=True)]
    for runner in runners:
        runner.start()
    # Both workers connect before either is answered: both are inside execute at once.
    connections = [listener.accept()[0] for _ in instances]
    for connection in connections:
        assert connection.recv(16) == b"in"
    for connection in connections:
        connection.sendall(b"go")
        connection.close()
    for runner in runners:
        runner.join(20)
    windows = [only(stream).outputs["WINDOW"].to_numpy() for _, stream in pairs]
    (start0, end0, pid0), (start1, end1, pid1) = windows
    assert start0 < end1 and start1 < end0  # the execution windows overlap
    assert len({int(pid0), int(pid1), os.getpid()}) == 3


# -- load, unload --------------------------------------------------------------------------
def test_initialize_error_fails_the_load_with_its_traceback(harness: Harness):
    broken = CRASHY_PY.replace("self.args = args", "raise ValueError('no weights here')")
    with pytest.raises(InternalError) as raised:
        harness.load("broken", broken, CRASHY_CONFIG.replace('"crashy"', '"broken"'))
    text = raised.value.message
    assert text.startswith("ValueError: no weights here\n\nAt:\n"), text
    assert "model.py" in text and "initialize" in text


def test_import_error_fails_the_load_as_in_thread(harness: Harness):
    with pytest.raises(InvalidArgumentError, match="failed to load model 'unimportable'"):
        harness.load("unimportable", "import not_a_module_anywhere\n",
                     CRASHY_CONFIG.replace('"crashy"', '"unimportable"'))


def _memory_files() -> set[str]:
    return {name for name in os.listdir("/dev/shm")} if os.path.isdir("/dev/shm") else set()


def _open_files() -> list[str]:
    """What this process's descriptors point to ("socket:[..]", "/memfd:name (deleted)")."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return found


def _sockets_and_pidfds(files: list[str]) -> int:
    return sum(1 for link in files if link.startswith(("socket:", "anon_inode:[pidfd]")))


def test_finalize_ends_the_worker_and_leaks_nothing(harness: Harness):
    shm_before = _memory_files()
    files_before = _open_files()
    model_logger = logging.getLogger("infercore.model")
    previous_level = model_logger.level
    model_logger.setLevel(logging.INFO)  # workers copy it: the finalize line comes across
    model_dir = harness.repo / "crashy"
    config = text_format.Parse(CRASHY_CONFIG, model_config_pb2.ModelConfig())
    context = ModelContext(name="crashy", version=1, config=config, model_dir=model_dir,
                           version_dir=model_dir / "1", repository=harness.repo)
    model = harness.backend.create_model(context)
    info = InstanceInfo("leakcheck_0_0", "leakcheck_0", 0, "KIND_CPU", 0)
    instance = model.create_instance(info)
    assert isinstance(instance, IsolatedInstance)
    pid = assert_serves(instance)
    assert any("infercore-leakcheck_0_0" in link for link in _open_files())
    finalized = threading.Event()

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if f"finalized {pid}" in record.getMessage():
                finalized.set()

    handler = Catch()
    model_logger.addHandler(handler)
    try:
        instance.finalize()
        model.finalize()
    finally:
        model_logger.removeHandler(handler)
        model_logger.setLevel(previous_level)
    assert finalized.is_set()  # finalize ran in the worker; its log line arrived first
    assert instance.statistics().state is InstanceState.STOPPED
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped
    assert _memory_files() == shm_before
    files_after = _open_files()
    assert not any("infercore-leakcheck_0_0" in link for link in files_after)
    # Earlier tests' dead workers may still be closing theirs: never more than before.
    assert _sockets_and_pidfds(files_after) <= _sockets_and_pidfds(files_before)


def test_spawn_start_method_starts_a_fresh_interpreter(harness: Harness):
    config = CRASHY_CONFIG.replace('"crashy"', '"spawned"') + (
        'parameters: { key: "infercore.worker_start_method" value: { string_value: "spawn" } }')
    _, (instance,) = harness.load("spawned", CRASHY_PY, config)
    ones = np.ones(4, np.float32)
    core, stream = request("spawned", {"INPUT0": ones, "INPUT1": ones})
    execute(instance, core)
    response = only(stream)
    assert response.error is None
    pid = int(response.outputs["PID"].to_numpy()[0])
    with open(f"/proc/{pid}/status") as status:  # a child of this process, not forked later
        ppid = next(int(line.split()[1]) for line in status if line.startswith("PPid:"))
    assert ppid == os.getpid()


# -- configuration ------------------------------------------------------------------------
def _config(parameters: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(f'name: "m"\nbackend: "python"\n{parameters}',
                             model_config_pb2.ModelConfig())


def test_in_thread_is_the_default():
    assert isolation_from_config(_config(""), "m") is None
    thread = 'parameters: { key: "infercore.execution_mode" value: { string_value: "thread" } }'
    assert isolation_from_config(_config(thread), "m") is None
    isolation = isolation_from_config(_config(PROCESS), "m")
    assert isolation is not None and isolation.start_method == "forkserver"


@pytest.mark.parametrize("parameters, message", [
    ('parameters: { key: "infercore.execution_mode" value: { string_value: "procss" } }',
     "must be 'thread' or 'process', not 'procss'"),
    ('parameters: { key: "infercore.execution_modes" value: { string_value: "process" } }',
     "unknown parameter 'infercore.execution_modes'"),
    (PROCESS + '\nparameters: { key: "infercore.worker_start_method" value: '
               '{ string_value: "fork" } }', "must be one of 'forkserver', 'spawn'"),
    ('parameters: { key: "infercore.worker_start_method" value: { string_value: "spawn" } }',
     "needs 'infercore.execution_mode' set to 'process'"),
])
def test_bad_isolation_parameters_fail_the_load(parameters: str, message: str):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        isolation_from_config(_config(parameters), "m")


def test_initialize_gets_the_in_thread_args(harness: Harness, crashy: IsolatedInstance):
    core, stream = add_sub(action="args")
    execute(crashy, core)
    args = json.loads(str(only(stream).parameters["args"]))
    config = json.loads(args.pop("model_config"))
    assert args == {
        "model_instance_kind": "CPU",
        "model_instance_name": "crashy_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(harness.repo / "crashy"),
        "model_version": "1",
        "model_name": "crashy",
    }
    assert config["name"] == "crashy"
    assert config["parameters"]["infercore.execution_mode"] == {"string_value": "process"}
