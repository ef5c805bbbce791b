"""A Python model that is not decoupled answering through its request's response sender
after ``execute`` returned None (from a thread of its own), in-thread and
process-isolated: the answer arrives (large outputs and BYTES too), a second response
gets Triton's error, requests answered during an execute keep flowing meanwhile, the
statistics count it, and a worker that dies with a late answer pending fails that request
instead of leaving it waiting."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

from infercore import Server
from infercore.errors import InternalError
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

LATE_PY = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.errors = []

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            delay = float(pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()[0])
            size = int(pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy()[0])

            def later(sender=sender, delay=delay, size=size):
                time.sleep(delay)
                response = pb_utils.InferenceResponse([
                    pb_utils.Tensor("BIG", np.arange(size, dtype=np.float32)),
                    pb_utils.Tensor("TEXT", np.array([b"late", str(os.getpid()).encode()],
                                                     dtype=np.object_)),
                    pb_utils.Tensor("ERRORS", np.array(["|".join(self.errors)],
                                                       dtype=np.object_))])
                sender.send(response, flags=FINAL)
                try:
                    sender.send(response)
                except pb_utils.TritonModelException as exc:
                    self.errors.append(str(exc))
            if delay < 0:  # answered at once, during execute
                later(delay=0)
            else:
                threading.Thread(target=later, daemon=True).start()
        return None
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "DELAY", data_type: TYPE_FP32, dims: [ 1 ] }},
        {{ name: "SIZE", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "BIG", data_type: TYPE_FP32, dims: [ -1 ] }},
         {{ name: "TEXT", data_type: TYPE_STRING, dims: [ 2 ] }},
         {{ name: "ERRORS", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""

MODES = {"in_thread": "", "process": PROCESS}
SECOND = "Unable to send response. Non-decoupled model cannot send more than one response."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = RepositoryBuilder(tmp_path_factory.mktemp("late") / "models")
    for mode, extra in MODES.items():
        repo.add_model(f"late_{mode}", config=CONFIG.format(name=f"late_{mode}", extra=extra),
                       model_py=LATE_PY)
    with Server(model_repository=repo.path) as started:
        yield started


def _start(server: Server, model: str, delay: float, size: int = 4):
    return server.model(model).infer({"DELAY": np.array([delay], np.float32),
                                      "SIZE": np.array([size], np.int32)})


def _outputs(stream) -> dict[str, np.ndarray]:
    response = stream.result()
    assert response is not None
    return {name: tensor.to_numpy() for name, tensor in response.outputs.items()}


@pytest.mark.parametrize("mode", MODES)
def test_answer_after_execute_arrives_and_a_second_one_is_refused(server: Server, mode: str):
    model = f"late_{mode}"
    before = server.model(model).statistics()[0].success.count
    slow = _start(server, model, 0.5, size=1 << 20)  # 4 MiB, answered 0.5 s later
    # meanwhile the instance takes the next request (its execute returned long ago)
    quick = _outputs(_start(server, model, -1))
    assert quick["TEXT"][0] == b"late"
    late = _outputs(slow)
    np.testing.assert_array_equal(late["BIG"], np.arange(1 << 20, dtype=np.float32))
    assert late["TEXT"][0] == b"late"
    if mode == "process":
        assert int(late["TEXT"][1]) != os.getpid()
    # the second send of each earlier request was refused with Triton's words
    third = _outputs(_start(server, model, 0))
    assert third["ERRORS"][0].decode().split("|")[-2:] == [SECOND, SECOND]
    assert server.model(model).statistics()[0].success.count - before == 3


def test_a_worker_dying_with_a_late_answer_pending_fails_that_request(server: Server):
    model = "late_process"
    pid = int(_outputs(_start(server, model, 0))["TEXT"][1])
    pending = _start(server, model, 30)
    time.sleep(0.3)  # its execute returned: the answer is pending in the worker's thread
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(InternalError, match="Stub process is not healthy"):
        pending.result()
    assert _outputs(_start(server, model, 0))["TEXT"][0] == b"late"  # restarted
