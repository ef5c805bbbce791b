"""Responses into a caller's queue, what each response exposes, and input buffer release."""

from __future__ import annotations

import asyncio
import queue
import threading

import numpy as np
import pytest
import torch
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, gated_add_sub_py, install_gate

from infercore import (
    CancelledError,
    DataType,
    InferResponse,
    InvalidArgumentError,
    MemoryType,
    Options,
    Server,
)

A = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
B = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)

# Decoupled: one response per element of X (each with a parameter), then a bare final
# flag; waits on the gate after the first response.
REPEAT_CONFIG = """
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

REPEAT_PY = """
import numpy as np
import api_queues_gate as gate
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            for index, value in enumerate(x):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", np.array([value], np.float32))],
                    parameters={"index": index}))
                if index == 0 and gate.hold:
                    gate.entered.set()
                    gate.release.wait(60)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

GATED_PY = gated_add_sub_py("api_queues_gate")


@pytest.fixture
def gate(monkeypatch):
    module = install_gate(monkeypatch, "api_queues_gate")
    module.hold = False  # the repeat model holds its first response only when asked
    yield module
    module.release.set()


@pytest.fixture
def server(add_sub_repo, gate):
    add_sub_repo.add_model("repeat", config=REPEAT_CONFIG, model_py=REPEAT_PY)
    add_sub_repo.add_model("gated", config=ADD_SUB_CONFIG.replace('"add_sub"', '"gated"'),
                           model_py=GATED_PY)
    add_sub_repo.add_model(
        "cached", model_py=ADD_SUB_PY,
        config=ADD_SUB_CONFIG.replace('"add_sub"', '"cached"')
        + "response_cache { enable: true }\n")
    options = Options(model_repository=add_sub_repo.path,
                      cache_config={"local": {"size": 1 << 20}})
    with Server(options) as running:
        yield running


def drain(sink: queue.SimpleQueue | queue.Queue) -> list[InferResponse]:
    responses = []
    while True:
        response = sink.get(timeout=30)
        responses.append(response)
        if response.final:
            return responses


def test_a_simple_queue_receives_every_response_in_order(server):
    sink: queue.SimpleQueue[InferResponse] = queue.SimpleQueue()
    model = server.model("repeat")
    request = model.create_request(request_id="q", response_queue=sink,
                                   inputs={"X": np.array([1, 2, 3], np.float32)})
    stream = model.infer(request)
    responses = drain(sink)
    assert [r.outputs["Y"].to_numpy().tolist() for r in responses[:3]] == [[1], [2], [3]]
    assert [r.parameters for r in responses[:3]] == [{"index": 0}, {"index": 1},
                                                     {"index": 2}]
    assert [r.final for r in responses] == [False, False, False, True]
    last = responses[-1]  # the bare final flag still reaches the queue
    assert (last.model, last.model_version, last.request_id, last.outputs) == (
        "repeat", 1, "q", {})
    assert stream.result(timeout=30) is None and stream.done  # nothing left on the stream


def test_an_unbounded_queue_queue_works_too(server):
    sink: queue.Queue[InferResponse] = queue.Queue()
    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B}, response_queue=sink)
    model.infer(request)
    (response,) = drain(sink)
    assert response.outputs["OUTPUT0"].to_numpy().tolist() == (A + B).tolist()


def test_an_asyncio_queue_receives_responses_on_its_loop(server):
    model = server.model("repeat")

    async def main():
        sink: asyncio.Queue[InferResponse] = asyncio.Queue()
        request = model.create_request(response_queue=sink,
                                       inputs={"X": np.array([5, 6], np.float32)})
        model.infer(request)
        responses = []
        while not responses or not responses[-1].final:
            responses.append(await asyncio.wait_for(sink.get(), 30))
        return responses

    responses = asyncio.run(main())
    assert [r.outputs["Y"].to_numpy().tolist() for r in responses[:2]] == [[5], [6]]
    assert responses[-1].final and len(responses) == 3


def test_an_asyncio_queue_needs_infer_on_its_loop(server):
    request = server.model("add_sub").create_request(
        inputs={"INPUT0": A, "INPUT1": B}, response_queue=asyncio.Queue())
    with pytest.raises(InvalidArgumentError, match="event loop"):
        server.model("add_sub").infer(request)
    assert not request.in_flight


@pytest.mark.parametrize("sink", [queue.Queue(maxsize=1), asyncio.Queue(maxsize=2)],
                         ids=["queue.Queue", "asyncio.Queue"])
def test_bounded_queues_are_refused_and_the_server_keeps_serving(server, sink):
    released = []
    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B}, response_queue=sink,
                                   release_callback=released.append)
    with pytest.raises(InvalidArgumentError, match="response_queue must be unbounded"):
        model.infer(request)
    assert not request.in_flight and released == []  # refused before it was submitted
    request.response_queue = None
    assert model.infer(request).result().outputs["OUTPUT0"].to_numpy().tolist() == (
        A + B).tolist()


def test_a_full_queue_is_refused_up_front(server):
    sink: queue.Queue[int] = queue.Queue(maxsize=1)
    sink.put(0)  # full already: no response could ever be put
    request = server.model("add_sub").create_request(inputs={"INPUT0": A, "INPUT1": B},
                                                     response_queue=sink)
    with pytest.raises(InvalidArgumentError, match="maxsize is 1"):
        server.model("add_sub").infer(request)


def test_something_else_as_a_queue_is_refused(server):
    request = server.model("add_sub").create_request(response_queue=[])
    with pytest.raises(InvalidArgumentError, match="queue.SimpleQueue"):
        server.model("add_sub").infer(request)


def test_error_responses_go_to_the_queue(server):
    sink: queue.SimpleQueue[InferResponse] = queue.SimpleQueue()
    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B}, response_queue=sink,
                                   output_buffers={"OUTPUT1": bytearray(1)})
    model.infer(request)  # raise_on_error does not apply to a queue
    (response,) = drain(sink)
    assert isinstance(response.error, InvalidArgumentError) and response.final


def test_each_response_exposes_its_outputs_zero_copy(server):
    model = server.model("add_sub")
    response = model.infer(model.create_request(request_id="r7",
                                                inputs={"INPUT0": A, "INPUT1": B})).result()
    assert (response.model, response.model_version, response.request_id) == ("add_sub", 1,
                                                                             "r7")
    assert response.error is None and response.final and response.parameters == {}
    tensor = response.outputs["OUTPUT0"]
    assert (tensor.data_type, tensor.shape, tensor.memory_type) == (
        DataType.FP32, (1, 4), MemoryType.CPU)
    array = tensor.to_numpy()
    assert array is tensor.to_numpy()  # the same array each time: no copy
    assert np.shares_memory(torch.from_dlpack(tensor).numpy(), array)


# -- input buffer lifetime -----------------------------------------------------------------

def test_inputs_are_released_after_execution_before_the_response(server):
    events = []
    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B},
                                   release_callback=lambda r: events.append(("released", r)))
    response = model.infer(request).result()
    assert events == [("released", request)]  # once, before the caller saw the response
    assert response.error is None


def test_a_decoupled_request_is_released_when_the_model_releases_it(server, gate):
    gate.hold = True
    released = threading.Event()
    sink: queue.SimpleQueue[InferResponse] = queue.SimpleQueue()
    model = server.model("repeat")
    request = model.create_request(response_queue=sink,
                                   release_callback=lambda r: released.set(),
                                   inputs={"X": np.array([1, 2], np.float32)})
    model.infer(request)
    first = sink.get(timeout=30)
    assert gate.entered.wait(30)
    assert not first.final and not released.is_set() and request.in_flight
    gate.release.set()
    rest = drain(sink)
    assert released.is_set() and rest[-1].final and not request.in_flight


def test_inputs_are_released_on_an_error_on_entry(server):
    released = []
    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A}, release_callback=released.append)
    with pytest.raises(InvalidArgumentError):
        model.infer(request)
    assert released == [request]


def test_inputs_are_released_when_a_queued_request_is_cancelled(server, gate):
    model = server.model("gated")
    first = model.infer({"INPUT0": A, "INPUT1": B})
    assert gate.entered.wait(30)
    released = []
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B},
                                   release_callback=released.append)
    stream = model.infer(request)
    stream.cancel()
    with pytest.raises(CancelledError):
        stream.result(timeout=30)
    assert released == [request]
    gate.release.set()
    assert first.result(timeout=30).error is None


def test_inputs_are_released_on_a_cache_hit(server):
    released = []
    model = server.model("cached")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B},
                                   release_callback=released.append)
    model.infer(request).result()
    hit = model.infer(request).result()
    assert released == [request, request]
    assert hit.outputs["OUTPUT0"].to_numpy().tolist() == (A + B).tolist()
    assert model.statistics()[0].cache_hit.count == 1


def test_a_release_callback_that_raises_is_logged_and_the_server_keeps_serving(server,
                                                                            caplog):
    def callback(request):
        raise RuntimeError("callback bug")

    model = server.model("add_sub")
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B},
                                   release_callback=callback)
    assert model.infer(request).result().error is None
    assert "release callback of request" in caplog.text and "callback bug" in caplog.text
    assert not request.in_flight
    assert model.infer(request).result().error is None


def test_an_outputs_classification_labels_come_from_its_model(add_sub_repo):
    config = ADD_SUB_CONFIG.replace('"add_sub"', '"labelled"').replace(
        'dims: [ 4 ] },\n  { name: "OUTPUT1"',
        'dims: [ 4 ], label_filename: "labels.txt" },\n  { name: "OUTPUT1"')
    add_sub_repo.add_model("labelled", config=config, model_py=ADD_SUB_PY,
                           files={"labels.txt": "cat\ndog\nbird\nfish\n"})
    with Server(model_repository=add_sub_repo.path) as server:
        model = server.model("labelled")
        response = model.infer(model.create_request(inputs={"INPUT0": A, "INPUT1": B})).result()
        best = int(np.argmax(response.outputs["OUTPUT0"].to_numpy()))
        assert model.labels("OUTPUT0")[best] == "fish"
        assert model.labels("OUTPUT1") == []


def test_cancelling_a_queued_request_puts_its_error_on_the_queue(server, gate):
    model = server.model("gated")
    first = model.infer({"INPUT0": A, "INPUT1": B})
    assert gate.entered.wait(30)
    sink: queue.SimpleQueue[InferResponse] = queue.SimpleQueue()
    request = model.create_request(inputs={"INPUT0": A, "INPUT1": B}, response_queue=sink)
    stream = model.infer(request)
    stream.cancel()
    (response,) = drain(sink)
    assert isinstance(response.error, CancelledError) and response.final
    assert stream.done and not request.in_flight
    gate.release.set()
    assert first.result(timeout=30).error is None
