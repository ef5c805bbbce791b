"""The response sender of a Python model that is not decoupled, through a real
``infercore serve`` and tritonclient (HTTP and gRPC), in-thread and process-isolated: one
response with the final flag, sent during ``execute`` or from the model's thread after it
returned None; Triton's errors for a second response, for the final flag before any
response, and a returned response ignored once the sender answered (as Triton 2.51:
tests/conformance/cases/qa_python_sender.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import ServeProcess

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

SENDER_PY = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.errors = []

    def attempt(self, call):
        try:
            call()
        except pb_utils.TritonModelException as exc:
            self.errors.append(str(exc))

    def answer(self, value):
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", (value + 1).astype(np.int32)),
            pb_utils.Tensor("ERRORS", np.array(["|".join(self.errors)], dtype=np.object_))])

    def execute(self, requests):
        returned = []
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            how = int(value[0]) % 10
            returned.append(None)
            if how == 0:  # during execute: the flag alone first (refused), then the answer
                self.attempt(lambda: sender.send(flags=FINAL))
                sender.send(self.answer(value), flags=FINAL)
            elif how == 1:  # from a thread, after execute returned
                def later(sender=sender, value=value):
                    time.sleep(0.2)
                    sender.send(self.answer(value), flags=FINAL)
                    self.attempt(lambda: sender.send(self.answer(value)))
                threading.Thread(target=later, daemon=True).start()
            else:  # answered, and returned a response as well: the returned one is dropped
                sender.send(self.answer(value), flags=FINAL)
                returned[-1] = self.answer(value + 100)
        return None if all(r is None for r in returned) else returned
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }},
         {{ name: "ERRORS", data_type: TYPE_STRING, dims: [ 1 ] }} ]
{extra}
"""

MODES = {"in_thread": "", "process": PROCESS}
FLAG_FIRST = ("Unable to send response. Non-decoupled model cannot send complete final "
              "before sending a response.")
SECOND = "Unable to send response. Non-decoupled model cannot send more than one response."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("sender")
    repo = RepositoryBuilder(root / "models")
    for mode, extra in MODES.items():
        repo.add_model(f"sender_{mode}", config=CONFIG.format(name=f"sender_{mode}",
                                                              extra=extra),
                       model_py=SENDER_PY)
    started = ServeProcess(root / "server.log", f"--model-repository={repo.path}",
                           "--exit-timeout-secs=5")
    try:
        started.wait_ready(timeout=120)
        yield started
    finally:
        started.stop()


def _ask(client, module, model: str, value: int) -> tuple[int, list[str]]:
    tensor = module.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    result = client.infer(model, [tensor])
    errors = result.as_numpy("ERRORS")[0].decode()
    return int(result.as_numpy("OUT")[0]), [e for e in errors.split("|") if e]


@pytest.mark.parametrize("mode", MODES)
def test_answers_through_the_sender_with_tritons_errors(server, mode):
    model = f"sender_{mode}"
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert _ask(http, httpclient, model, 10) == (11, [FLAG_FIRST])
        assert _ask(grpc, grpcclient, model, 21) == (22, [FLAG_FIRST])  # after execute
        assert _ask(http, httpclient, model, 32) == (33, [FLAG_FIRST, SECOND])
        assert _ask(grpc, grpcclient, model, 40) == (41, [FLAG_FIRST, SECOND, FLAG_FIRST])
        statistics = http.get_inference_statistics(model)["model_stats"][0]
        assert int(statistics["inference_stats"]["success"]["count"]) == 4
    finally:
        http.close()
        grpc.close()
