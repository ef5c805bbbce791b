"""Per-request traces from the API: infercore.Trace with activity and tensor callbacks."""

from __future__ import annotations

import json
import logging
import threading

import numpy as np
import pytest
from sample_models import gated_add_sub_py, install_gate

from infercore import (
    DataType,
    InvalidArgumentError,
    Server,
    TensorTraceEvent,
    Trace,
    TraceActivity,
    TraceConfig,
    TraceEvent,
)

ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
A = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
B = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)

PIPE_CONFIG = """
name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "B", data_type: TYPE_FP32, dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "A" } ]
    output_map { key: "OUTPUT0" value: "twice" } },
  { model_name: "add_sub" model_version: -1
    input_map [ { key: "INPUT0" value: "twice" }, { key: "INPUT1" value: "A" } ]
    output_map { key: "OUTPUT0" value: "B" } } ] }
"""

BLS_CONFIG = """
name: "bls"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] },
         { name: "CONTEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().reshape(1, 4)
            inputs = [pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)]
            traced = pb_utils.InferenceRequest(
                model_name="add_sub", inputs=inputs, requested_output_names=["OUTPUT0"],
                trace=request.trace()).exec()
            pb_utils.InferenceRequest(model_name="add_sub", inputs=inputs,
                                      requested_output_names=["OUTPUT0"]).exec()
            y = pb_utils.get_output_tensor_by_name(traced, "OUTPUT0").as_numpy()
            context = np.array([str(request.trace().get_context())], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", y.reshape(4)), pb_utils.Tensor("CONTEXT", context)]))
        return responses
"""

GATE_PY = gated_add_sub_py("api_traces_gate")


@pytest.fixture
def server(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as running:
        yield running


def names(events: list[TraceEvent]) -> list[str]:
    return [event.name for event in events]


def test_activities_arrive_in_tritons_order_with_their_timestamps(server):
    received: list[TraceEvent] = []
    trace = Trace(activity=received.append)
    response = server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}, request_id="r-1",
                                             trace=trace).result()
    assert response.outputs["OUTPUT0"].to_numpy().tolist() == (A + B).tolist()
    assert trace.wait(30) and trace.done
    assert names(received) == ORDER
    assert all(event.trace is trace for event in received)
    assert [event.activity for event in received] == [TraceActivity(n) for n in ORDER]
    stamps = [event.timestamp_ns for event in received]
    assert stamps == sorted(stamps) and stamps[0] > 0
    assert trace.events == received
    assert (trace.model_name, trace.model_version, trace.request_id) == ("add_sub", 1, "r-1")
    assert trace.parent_id == 0 and trace.parent is None and trace.children == []


def test_custom_activities_take_their_place_by_timestamp(add_sub_repo, monkeypatch):
    gate = install_gate(monkeypatch, "api_traces_gate")
    add_sub_repo.add_model("add_sub", config=(add_sub_repo.path / "add_sub" /
                                              "config.pbtxt").read_text(), model_py=GATE_PY)
    received: list[TraceEvent] = []
    trace = Trace(activity=received.append)
    with Server(model_repository=add_sub_repo.path) as server:
        trace.report_activity("APP_PREPARE")
        stream = server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}, trace=trace)
        assert gate.entered.wait(30)
        trace.report_activity("APP_WHILE_EXECUTING")
        trace.report_activity("APP_AT_ZERO", timestamp_ns=0)
        gate.release.set()
        stream.result(30)
        assert trace.wait(30)
        trace.report_activity("APP_AFTER")  # the request ended: delivered at once
    # the Python backend marks its input end before calling execute, its output start
    # after: the activity reported from inside execute lies between them
    assert names(received) == ["APP_AT_ZERO", "APP_PREPARE", "REQUEST_START", "QUEUE_START",
                               "COMPUTE_START", "COMPUTE_INPUT_END", "APP_WHILE_EXECUTING",
                               "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
                               "APP_AFTER"]
    custom = [event for event in received if event.name.startswith("APP_")]
    assert {event.activity for event in custom} == {TraceActivity.CUSTOM_ACTIVITY}
    assert custom[0].timestamp_ns == 0
    stamps = [event.timestamp_ns for event in received]
    assert stamps == sorted(stamps)
    assert trace.events == received


def test_bad_custom_activities_are_refused():
    trace = Trace()
    for bad in ("", None):
        with pytest.raises(InvalidArgumentError, match="non-empty name"):
            trace.report_activity(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="non-negative integer of ns"):
        trace.report_activity("X", timestamp_ns=-1)


def test_the_tensor_callback_sees_inputs_and_the_requested_outputs(server):
    seen: list[tuple[str, str]] = []
    tensors: list[TensorTraceEvent] = []

    def on_tensor(event: TensorTraceEvent) -> None:
        tensors.append(event)
        seen.append((event.activity.value, event.name))

    trace = Trace(activity=lambda event: seen.append(("activity", event.name)),
                  tensor=on_tensor)
    server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}, outputs=["OUTPUT1"],
                                  trace=trace).result()
    assert trace.wait(30)
    assert seen == [
        ("activity", "REQUEST_START"), ("activity", "QUEUE_START"),
        ("TENSOR_QUEUE_INPUT", "INPUT0"), ("TENSOR_QUEUE_INPUT", "INPUT1"),
        ("activity", "COMPUTE_START"),
        ("TENSOR_BACKEND_INPUT", "INPUT0"), ("TENSOR_BACKEND_INPUT", "INPUT1"),
        ("activity", "COMPUTE_INPUT_END"), ("activity", "COMPUTE_OUTPUT_START"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
        ("activity", "COMPUTE_END"), ("activity", "REQUEST_END")]
    by_point = {(event.activity.value, event.name): event for event in tensors}
    queued = by_point[("TENSOR_QUEUE_INPUT", "INPUT0")]
    assert (queued.datatype, queued.shape) == (DataType.FP32, (1, 4))
    assert queued.tensor.to_numpy().tolist() == A.tolist()
    assert by_point[("TENSOR_BACKEND_INPUT", "INPUT1")].tensor.to_numpy().tolist() == B.tolist()
    output = by_point[("TENSOR_BACKEND_OUTPUT", "OUTPUT1")]
    assert output.tensor.to_numpy().tolist() == (A - B).tolist()
    assert all(event.trace is trace for event in tensors)


def test_ensemble_steps_are_child_traces_of_the_request(repo, add_sub_source):
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("pipe", config=PIPE_CONFIG)
    received: list[TraceEvent] = []
    lock = threading.Lock()

    def on_activity(event: TraceEvent) -> None:
        with lock:  # children end on other threads
            received.append(event)

    trace = Trace(activity=on_activity, context='{"app": "pipeline"}')
    with Server(model_repository=repo.path) as server:
        result = server.model("pipe").infer({"A": A}, trace=trace).result()
        assert result.outputs["B"].to_numpy().tolist() == (3 * A).tolist()
        assert trace.wait(30)
    # an ensemble computes nothing itself
    assert names(trace.events) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    children = trace.children
    assert [child.model_name for child in children] == ["add_sub", "add_sub"]
    for child in children:
        assert child.parent is trace and child.parent_id == trace.id and child.done
        assert names(child.events) == ORDER
        assert child.context == trace.context
        assert [e for e in received if e.trace is child] == child.events
    first, second = children  # the second step starts from the first one's output
    first_stamps = {event.name: event.timestamp_ns for event in first.events}
    assert first_stamps["COMPUTE_OUTPUT_START"] <= second.events[0].timestamp_ns
    assert len(received) == 3 + 2 * len(ORDER)
    assert len({trace.id, first.id, second.id}) == 3


def test_bls_calls_made_with_the_request_trace_are_children(repo, add_sub_source):
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("bls", config=BLS_CONFIG, model_py=BLS_PY)
    context = json.dumps({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-"
                                         "b7ad6b7169203331-01"})
    trace = Trace(context=context)
    with Server(model_repository=repo.path) as server:
        result = server.model("bls").infer({"X": A.reshape(4)}, trace=trace).result()
        assert trace.wait(30)
    # the model sees the caller's context
    seen = result.outputs["CONTEXT"].to_numpy()[0]
    assert json.loads(seen.decode() if isinstance(seen, bytes) else seen) == json.loads(context)
    (child,) = trace.children  # the call without trace= is not traced
    assert child.model_name == "add_sub" and child.parent_id == trace.id
    parent_stamps = {event.name: event.timestamp_ns for event in trace.events}
    child_stamps = {event.name: event.timestamp_ns for event in child.events}
    assert parent_stamps["COMPUTE_START"] <= child_stamps["REQUEST_START"]
    assert child_stamps["REQUEST_END"] <= parent_stamps["COMPUTE_END"]


def test_a_callback_that_raises_is_logged_and_the_request_goes_on(server, caplog):
    calls: list[str] = []

    def broken(event: object) -> None:
        calls.append(type(event).__name__)
        raise RuntimeError("callback bug")

    trace = Trace(activity=broken, tensor=broken)
    with caplog.at_level(logging.ERROR, logger="infercore"):
        response = server.model("add_sub").infer({"INPUT0": A, "INPUT1": B},
                                                 trace=trace).result()
        assert trace.wait(30)
    assert response.error is None
    assert calls.count("TraceEvent") == len(ORDER)  # each one was still called
    assert calls.count("TensorTraceEvent") == 2 + 2 + 2
    errors = [r for r in caplog.records if "callback of trace" in r.getMessage()]
    assert len(errors) == len(calls) and "callback bug" in errors[0].exc_text
    # the server keeps serving
    again = server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}).result()
    assert again.outputs["OUTPUT1"].to_numpy().tolist() == (A - B).tolist()


def test_a_trace_traces_one_request(server):
    trace = Trace()
    model = server.model("add_sub")
    with pytest.raises(InvalidArgumentError):  # rejected on entry: the trace is unused
        model.infer({"INPUT0": A}, trace=trace)
    assert not trace.done and trace.events == []
    model.infer({"INPUT0": A, "INPUT1": B}, trace=trace).result()
    assert trace.wait(30)
    with pytest.raises(InvalidArgumentError, match="make a new Trace for each request"):
        model.infer({"INPUT0": A, "INPUT1": B}, trace=trace)
    with pytest.raises(InvalidArgumentError, match="trace must be an infercore.Trace"):
        model.infer({"INPUT0": A, "INPUT1": B}, trace="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="callback must be callable"):
        Trace(activity=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="context must be a string"):
        Trace(context=b"x")  # type: ignore[arg-type]


def test_spawned_children_link_requests_the_caller_sends(server):
    received: list[TraceEvent] = []
    parent = Trace(activity=received.append, context="ctx")
    child = parent.spawn_child()
    assert (child.parent_id, child.context, parent.children) == (parent.id, "ctx", [child])
    model = server.model("add_sub")
    model.infer({"INPUT0": A, "INPUT1": B}, trace=parent).result()
    model.infer({"INPUT0": B, "INPUT1": A}, trace=child).result()
    assert child.wait(30) and parent.wait(30)
    assert {event.trace for event in received} == {parent, child}


def test_a_caller_trace_replaces_the_servers_sampling(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path))
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        trace = Trace()
        server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}, trace=trace).result()
        server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}).result()
        assert trace.wait(30)
    records = json.loads(path.read_text())
    assert len({record["id"] for record in records}) == 1  # only the sampled request
    assert names(trace.events) == ORDER


async def test_async_inference_is_traced_too(server):
    trace = Trace()
    await server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}, trace=trace)
    assert trace.wait(30)
    assert names(trace.events) == ORDER
