"""Process-isolated Python models served by an in-process ``infercore.Server``."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from infercore import Server
from infercore.errors import InternalError
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "PIDS", data_type: TYPE_INT64, dims: [ 2 ] }}
]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
{extra}
"""

ADD_SUB_PY = """
import ctypes
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if json.loads(request.parameters()).get("segv"):
                ctypes.string_at(0)
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            pids = np.array([[os.getpid(), os.getppid()]] * len(a), dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b),
                pb_utils.Tensor("OUTPUT1", a - b),
                pb_utils.Tensor("PIDS", pids),
            ]))
        return responses
"""

STREAM_CONFIG = f"""
name: "stream"
backend: "python"
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_STRING, dims: [ 1 ] }} ]
{PROCESS}
"""

STREAM_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            threading.Thread(target=self.send, args=(request.get_response_sender(), count),
                             daemon=True).start()
        return None

    def send(self, sender, count):
        for i in range(count):
            text = np.array([f"token {i}".encode()], dtype=np.object_)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def add_sub_config(name: str, count: int = 1, isolated: bool = True) -> str:
    return ADD_SUB_CONFIG.format(name=name, count=count, extra=PROCESS if isolated else "")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepositoryBuilder:
    built = RepositoryBuilder(tmp_path_factory.mktemp("isolated_server") / "models")
    built.add_model("isolated", config=add_sub_config("isolated", count=2), model_py=ADD_SUB_PY)
    built.add_model("in_thread", config=add_sub_config("in_thread", isolated=False),
                    model_py=ADD_SUB_PY)
    built.add_model("stream", config=STREAM_CONFIG, model_py=STREAM_PY)
    spawned = add_sub_config("spawned") + (
        'parameters: { key: "infercore.worker_start_method" value: { string_value: "spawn" } }')
    built.add_model("spawned", config=spawned, model_py=ADD_SUB_PY)
    return built


@pytest.fixture(scope="module")
def server(repo: RepositoryBuilder) -> Iterator[Server]:
    options = {"model_control_mode": "explicit",
               "startup_models": ("isolated", "in_thread", "stream")}
    with Server(model_repository=repo.path, **options) as started:
        yield started


def infer(server: Server, name: str, **parameters: object) -> tuple[np.ndarray, np.ndarray]:
    ones = np.ones((1, 4), np.float32)
    response = server.model(name).infer(
        {"INPUT0": ones * 2, "INPUT1": ones}, parameters=parameters or None
    ).result()
    assert response is not None
    return response.outputs["OUTPUT0"].to_numpy(), response.outputs["PIDS"].to_numpy()[0]


def test_isolated_model_answers_from_worker_processes(server: Server):
    out, (pid, parent) = infer(server, "isolated")
    np.testing.assert_array_equal(out, [[3, 3, 3, 3]])
    assert pid != os.getpid()
    assert parent != os.getpid()  # forked by the fork server, not by the threaded server
    _, (in_thread_pid, _) = infer(server, "in_thread")
    assert in_thread_pid == os.getpid()


def test_statistics_have_compute_input_infer_and_output(server: Server):
    before = server.model("isolated").statistics()[0]
    for _ in range(5):
        infer(server, "isolated")
    after = server.model("isolated").statistics()[0]
    assert after.success.count - before.success.count == 5
    for phase in ("compute_input", "compute_infer", "compute_output"):
        got, was = getattr(after, phase), getattr(before, phase)
        assert got.count - was.count == 5, phase
        assert got.ns > was.ns, phase


def test_crash_fails_its_request_and_everything_keeps_serving(server: Server):
    _, (pid, _) = infer(server, "isolated")
    with pytest.raises(InternalError, match="Stub process is not healthy") as raised:
        infer(server, "isolated", segv=True)
    assert "SIGSEGV" in raised.value.message
    assert server.ready() and server.model("isolated").ready()
    infer(server, "in_thread")  # other models never noticed
    for _ in range(4):  # both instances serve again (one of them restarted)
        out, _ = infer(server, "isolated")
        np.testing.assert_array_equal(out, [[3, 3, 3, 3]])
    failures = server.model("isolated").statistics()[0].fail.count
    assert failures == 1


def test_decoupled_stream_through_the_server(server: Server):
    stream = server.model("stream").infer({"COUNT": np.array([20], np.int32)})
    texts = [response.outputs["OUT"].to_numpy()[0] for response in stream]
    assert texts == [f"token {i}".encode() for i in range(20)]


def test_unload_ends_the_workers_and_leaves_no_shared_memory(server: Server,
                                                             repo: RepositoryBuilder):
    shm_before = _own_shm_names()
    repo.add_model("transient", config=add_sub_config("transient"), model_py=ADD_SUB_PY)
    server.load("transient")
    _, (pid, _) = infer(server, "transient")
    server.unload("transient")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _own_shm_names() == shm_before


def _own_shm_names() -> set[str]:
    """Names in /dev/shm this server could have made (its own prefix, or Python's
    multiprocessing's): other processes on the machine add and remove theirs meanwhile."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(("infercore", "psm_"))}


_ORPHAN_SCRIPT = """
import sys
import numpy as np
from infercore import Server

options = {"model_control_mode": "explicit", "startup_models": ("isolated", "spawned")}
with Server(model_repository=sys.argv[1], **options) as server:
    ones = np.ones((1, 4), np.float32)
    pids = []
    for name in ("isolated", "spawned"):
        response = server.model(name).infer({"INPUT0": ones, "INPUT1": ones}).result()
        pids.extend(int(pid) for pid in response.outputs["PIDS"].to_numpy()[0])
    print(*pids, flush=True)
    sys.stdin.read()  # until the test kills this process
"""


def _wait_exit(pid: int, timeout: float) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(pidfd)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux)")
def test_workers_never_outlive_a_killed_server(repo: RepositoryBuilder, tmp_path: Path):
    script = tmp_path / "orphan.py"
    script.write_text(textwrap.dedent(_ORPHAN_SCRIPT))
    process = subprocess.Popen([sys.executable, str(script), str(repo.path)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        forked, fork_server, spawned, spawned_parent = (int(field) for field in line.split())
        assert spawned_parent == process.pid
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        assert _wait_exit(fork_server, 10), "the fork server outlived the server"
        assert _wait_exit(forked, 10), "a forked worker outlived the server"
        assert _wait_exit(spawned, 10), "a spawned worker outlived the server"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
