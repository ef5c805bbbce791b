"""BLS with decoupled models through a real ``infercore serve`` and tritonclient, in-thread
and process-isolated: python_backend's ``bls_decoupled`` example (its sync and async
models over the decoupled ``square`` model, checked as its clients check them: SUM is
IN * IN, twice that for the async one, as the int64 the model summed into), a model name
given as bytes, cancelling a decoupled BLS iterator, and a child's error in Triton's
words. Recorded from Triton 2.51 in tests/conformance/cases/qa_python_bls.py."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import ServeProcess
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

SQUARE_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            threading.Thread(target=self.answer, daemon=True,
                             args=(request.get_response_sender(), value)).start()
        return None

    def answer(self, sender, value):
        for _ in range(int(value[0])):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array(value, dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

SUMMER_PY = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


def add(total, responses):
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        if len(response.output_tensors()) > 0:
            total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()


class TritonPythonModel:
    async def execute(self, requests):
        count = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        target = pb_utils.get_input_tensor_by_name(requests[0], "TARGET").as_numpy()[0]
        calls = [pb_utils.InferenceRequest(model_name=target, inputs=[count],
                                           requested_output_names=["OUT"])
                 for _ in range(CALLS)]
        total = np.array([0])
        if CALLS == 1:
            add(total, calls[0].exec(decoupled=True))
        else:
            for responses in await asyncio.gather(
                    *[call.async_exec(decoupled=True) for call in calls]):
                add(total, responses)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
"""

CANCELLER_PY = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if not DECOUPLED:
            responses = []
            for request in requests:
                target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0]
                iterator = pb_utils.InferenceRequest(
                    model_name=target, requested_output_names=["OUT"],
                    inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                ).exec(decoupled=True)
                seen = []
                for response in iterator:
                    seen.append(int(response.output_tensors()[0].as_numpy()[0]))
                    if len(seen) == 2:
                        iterator.cancel()
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("SUM", np.array(seen[:2] + seen[-1:]))]))
            return responses
        for request in requests:
            threading.Thread(target=self.tick, args=(request,), daemon=True).start()
        return None

    def tick(self, request):
        sender = request.get_response_sender()
        for i in range(100):
            if request.is_cancelled():
                break
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i]))]))
            time.sleep(0.05)
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([-1]))]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

RAISES_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("the child gives up")
"""

MODES = {"in_thread": "", "process": PROCESS}


def _config(name: str, extra: str, *, decoupled: bool = False, target: bool = False) -> str:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    more = ', { name: "TARGET", data_type: TYPE_STRING, dims: [ 1 ] }' if target else ""
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    {policy}
    input [ {{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }}{more} ]
    output [ {{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }},
             {{ name: "SUM", data_type: TYPE_INT32, dims: [ 1 ] }} ]
    {extra}
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("bls_decoupled")
    repo = RepositoryBuilder(root / "models")
    for mode, extra in MODES.items():
        models = {
            "square_int32": (SQUARE_PY, True, False),
            "bls_decoupled_sync": (SUMMER_PY.replace("CALLS", "1"), False, True),
            "bls_decoupled_async": (SUMMER_PY.replace("CALLS", "2"), False, True),
            "ticker": (CANCELLER_PY.replace("DECOUPLED", "True"), True, False),
            "canceller": (CANCELLER_PY.replace("DECOUPLED", "False"), False, True),
            "raises": (RAISES_PY, False, False),
        }
        for base, (source, decoupled, target) in models.items():
            name = f"{base}_{mode}"
            repo.add_model(name, config=_config(name, extra, decoupled=decoupled,
                                                target=target), model_py=source)
    started = ServeProcess(root / "server.log", f"--model-repository={repo.path}",
                           "--exit-timeout-secs=5")
    try:
        started.wait_ready(timeout=120)
        yield started
    finally:
        started.stop()


def _sum(server: ServeProcess, model: str, value: int, target: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        count = httpclient.InferInput("IN", [1], "INT32")
        count.set_data_from_numpy(np.array([value], np.int32))
        name = httpclient.InferInput("TARGET", [1], "BYTES")
        name.set_data_from_numpy(np.array([target.encode()], np.object_))
        return client.infer(model, [count, name], request_id="1",
                            outputs=[httpclient.InferRequestedOutput("SUM")]).as_numpy("SUM")
    finally:
        client.close()


@pytest.mark.parametrize("mode", MODES)
def test_the_bls_decoupled_example_passes_its_clients_checks(server, mode):
    for value in (4, 2, 0, 1):
        expected = np.array([value * value])
        # the model name arrives as bytes (a BYTES element), as Triton's BLS takes it
        sync = _sum(server, f"bls_decoupled_sync_{mode}", value, f"square_int32_{mode}")
        assert sync.dtype == np.int64 and np.allclose(sync, expected)
        asynchronous = _sum(server, f"bls_decoupled_async_{mode}", value,
                            f"square_int32_{mode}")
        assert asynchronous.dtype == np.int64 and np.allclose(asynchronous, 2 * expected)


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_the_iterator_cancels_the_child(server, mode):
    seen = _sum(server, f"canceller_{mode}", 0, f"ticker_{mode}")
    assert seen.tolist() == [0, 1, -1]  # the child saw is_cancelled() and ended


@pytest.mark.parametrize("mode", MODES)
def test_a_child_error_reaches_the_parent_in_tritons_words(server, mode):
    with pytest.raises(InferenceServerException) as raised:
        _sum(server, f"bls_decoupled_sync_{mode}", 1, f"raises_{mode}")
    assert f"Failed to process the request(s) for model 'raises_{mode}_0', message: " \
           "TritonModelException: the child gives up" in raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        _sum(server, f"bls_decoupled_sync_{mode}", 1, "nope")
    assert ("TritonModelException: Model nope - Error when running inference: Failed for "
            "execute the inference request. Model 'nope' is not ready.") in raised.value.message()
    assert _sum(server, f"bls_decoupled_sync_{mode}", 3, f"square_int32_{mode}")[0] == 9
