"""Trace recording: Triton's trace file JSON, sampling, parent links, OpenTelemetry spans."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from infercore import InvalidArgumentError, Server, TraceConfig
from infercore.observability import trace_export
from infercore.observability.tracing import parse_trace_config

ONES = np.ones((1, 4), np.float32)
ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]

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
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
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
            # Without the trace argument a BLS call is not traced (as in Triton).
            pb_utils.InferenceRequest(model_name="add_sub", inputs=inputs,
                                      requested_output_names=["OUTPUT0"]).exec()
            y = pb_utils.get_output_tensor_by_name(traced, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y.reshape(4))]))
        return responses
"""

STREAM_CONFIG = """
name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

STREAM_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


CONTEXT_CONFIG = """
name: "ctx"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "CONTEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

CONTEXT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            context = np.array([str(request.trace().get_context())], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("CONTEXT", context)]))
        return responses
"""


def traces(path: Path) -> dict[int, dict]:
    """Trace id -> {"info": the model record, "stamps": [(name, ns)], "tensors": [...]}."""
    found: dict[int, dict] = {}
    for record in json.loads(path.read_text()):
        trace = found.setdefault(record["id"], {"info": None, "stamps": [], "tensors": []})
        if "model_name" in record:
            assert trace["info"] is None, "one model record per trace"
            trace["info"] = record
        elif "timestamps" in record:
            trace["stamps"] += [(t["name"], t["ns"]) for t in record["timestamps"]]
        else:
            trace["tensors"].append(record)
    return found


def run(repo_path: Path, config: TraceConfig, model: str = "add_sub", count: int = 1,
        inputs: dict | None = None) -> Server:
    server = Server(model_repository=repo_path, trace_config=config)
    with server:
        for _ in range(count):
            server.model(model).infer(
                inputs=inputs or {"INPUT0": ONES, "INPUT1": ONES}).result()
    return server


def test_timestamps_are_written_in_tritons_order(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    run(add_sub_repo.path, TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path)), count=3)
    found = traces(path)
    assert sorted(found) == [1, 2, 3]
    for trace_id, trace in found.items():
        assert trace["info"] == {"id": trace_id, "model_name": "add_sub", "model_version": 1}
        names = [name for name, _ in trace["stamps"]]
        assert names == ORDER
        stamps = [ns for _, ns in trace["stamps"]]
        assert stamps == sorted(stamps) and stamps[0] > 0


def test_request_id_is_recorded_when_given(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path))
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES},
                                      request_id="req-7").result()
    assert traces(path)[1]["info"]["request_id"] == "req-7"


def test_rate_samples_every_nth_request(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    run(add_sub_repo.path, TraceConfig(level=("TIMESTAMPS",), rate=3, file=str(path)), count=7)
    assert len(traces(path)) == 2  # the 3rd and the 6th


def test_count_stops_tracing_and_reads_back_as_what_remains(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, count=2, file=str(path))
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        assert server.trace_settings()["trace_count"] == "2"
        for _ in range(5):
            server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        assert server.trace_settings()["trace_count"] == "0"
    # as Triton: the traces a count ran out on go to the next indexed file at once
    # (conformance qa_trace_log_count_at_start)
    assert not path.exists()
    assert len(traces(tmp_path / "trace.json.0")) == 2


def test_log_frequency_writes_indexed_files(add_sub_repo, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, log_frequency=2, file=str(path))
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        for _ in range(5):
            server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        assert sorted(p.name for p in folder.iterdir()) == ["trace.json.0", "trace.json.1"]
    assert not path.exists()
    assert [len(traces(folder / f"trace.json.{i}")) for i in range(3)] == [2, 2, 1]


def test_tracing_off_writes_nothing(add_sub_repo, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "trace.json"
    run(add_sub_repo.path, TraceConfig(level=("OFF",), rate=1, file=str(path)), count=2)
    run(add_sub_repo.path, TraceConfig(level=("TIMESTAMPS",), rate=1), count=2)  # no file
    assert list(folder.iterdir()) == []


def test_settings_change_at_runtime_and_per_model(repo, add_sub_source, tmp_path):
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("other", config=add_sub_source[0].replace('"add_sub"', '"other"'),
                   model_py=add_sub_source[1])
    path = tmp_path / "trace.json"
    inputs = {"INPUT0": ONES, "INPUT1": ONES}
    with Server(model_repository=repo.path) as server:
        server.model("add_sub").infer(inputs=inputs).result()  # off: not traced
        server.update_trace_settings("add_sub", trace_level=["TIMESTAMPS"], trace_rate="1",
                                     trace_file=str(path))
        server.model("add_sub").infer(inputs=inputs).result()
        server.model("other").infer(inputs=inputs).result()  # global settings: off
    found = traces(path)
    assert [trace["info"]["model_name"] for trace in found.values()] == ["add_sub"]


def test_ensemble_steps_are_children_of_the_ensemble_trace(repo, add_sub_source, tmp_path):
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("pipe", config=PIPE_CONFIG)
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path))
    run(repo.path, config, model="pipe", count=2, inputs={"A": ONES})
    records = json.loads(path.read_text())
    found = traces(path)
    parents = [t for t in found.values() if "parent_id" not in t["info"]]
    assert [t["info"]["model_name"] for t in parents] == ["pipe", "pipe"]
    for parent in parents:
        parent_id = parent["info"]["id"]
        children = [t for t in found.values() if t["info"].get("parent_id") == parent_id]
        assert [c["info"]["model_name"] for c in children] == ["add_sub", "add_sub"]
        for child in children:
            assert [name for name, _ in child["stamps"]] == ORDER
        # an ensemble has no compute of its own
        assert [name for name, _ in parent["stamps"]] == ["REQUEST_START", "QUEUE_START",
                                                          "REQUEST_END"]
        # the group is written together, the ensemble first
        ids = [r["id"] for r in records]
        group = {parent_id} | {c["info"]["id"] for c in children}
        positions = [i for i, trace_id in enumerate(ids) if trace_id in group]
        assert positions == list(range(positions[0], positions[0] + len(positions)))
        assert ids[positions[0]] == parent_id
    # steps of an untraced ensemble request are never sampled on their own
    assert len(found) == 6


def test_bls_calls_with_the_trace_argument_are_children(repo, add_sub_source, tmp_path):
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("bls", config=BLS_CONFIG, model_py=BLS_PY)
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path))
    run(repo.path, config, model="bls", inputs={"X": np.ones(4, np.float32)})
    found = traces(path)
    assert len(found) == 2  # the BLS call without trace= is not traced
    (parent,) = [t for t in found.values() if t["info"]["model_name"] == "bls"]
    (child,) = [t for t in found.values() if t["info"]["model_name"] == "add_sub"]
    assert child["info"]["parent_id"] == parent["info"]["id"]
    # the child ran inside the parent's compute
    parent_stamps, child_stamps = dict(parent["stamps"]), dict(child["stamps"])
    assert parent_stamps["COMPUTE_START"] <= child_stamps["REQUEST_START"]
    assert child_stamps["REQUEST_END"] <= parent_stamps["COMPUTE_END"]


def test_decoupled_request_end_is_not_before_compute_end(repo, tmp_path):
    repo.add_model("stream", config=STREAM_CONFIG, model_py=STREAM_PY)
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path))
    with Server(model_repository=repo.path, trace_config=config) as server:
        assert len(list(server.model("stream").infer(inputs={"X": [5]}))) == 1
    (trace,) = traces(path).values()
    assert [name for name, _ in trace["stamps"]] == ORDER
    stamps = [ns for _, ns in trace["stamps"]]
    assert stamps == sorted(stamps)


def test_tensors_level_records_inputs_and_outputs(add_sub_repo, tmp_path):
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS", "TENSORS"), rate=1, file=str(path))
    inputs = {"INPUT0": np.array([[1, 2, 3, 4]], np.float32), "INPUT1": ONES}
    run(add_sub_repo.path, config, inputs=inputs)
    (trace,) = traces(path).values()
    by_activity = {(r["activity"], r["tensor"]["name"]): r["tensor"] for r in trace["tensors"]}
    assert by_activity[("TENSOR_QUEUE_INPUT", "INPUT0")] == {
        "name": "INPUT0", "data": "1.0,2.0,3.0,4.0", "shape": "1,4", "dtype": "FP32"}
    assert by_activity[("TENSOR_BACKEND_OUTPUT", "OUTPUT1")]["data"] == "0.0,1.0,2.0,3.0"
    assert set(by_activity) == {("TENSOR_QUEUE_INPUT", "INPUT0"),
                                ("TENSOR_QUEUE_INPUT", "INPUT1"),
                                ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
                                ("TENSOR_BACKEND_OUTPUT", "OUTPUT1")}


def test_opentelemetry_spans_are_named_and_nested_as_tritons(repo, add_sub_source,
                                                             monkeypatch):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    monkeypatch.setattr(trace_export, "otlp_span_exporter", lambda url: exporter)
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    repo.add_model("pipe", config=PIPE_CONFIG)
    config = parse_trace_config(["mode=opentelemetry", "level=TIMESTAMPS", "rate=1",
                                 "opentelemetry,resource=service.name=test_infercore"])
    run(repo.path, config, model="pipe", inputs={"A": ONES})
    spans = exporter.get_finished_spans()
    names = {span.context.span_id: span.name for span in spans}
    children: dict[str, list[str]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(names[span.parent.span_id], []).append(span.name)
    assert {k: sorted(v) for k, v in children.items()} == {
        "InferRequest": ["pipe"], "pipe": ["add_sub", "add_sub"],
        "add_sub": ["compute", "compute"]}
    assert len({span.context.trace_id for span in spans}) == 1
    model_span = next(span for span in spans if span.name == "pipe")
    assert [e.name for e in model_span.events] == ["REQUEST_START", "QUEUE_START",
                                                   "REQUEST_END"]
    compute = next(span for span in spans if span.name == "compute")
    assert [e.name for e in compute.events] == ORDER[2:6]
    assert spans[0].resource.attributes["service.name"] == "test_infercore"


def test_models_see_their_opentelemetry_context(repo, monkeypatch, tmp_path):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    monkeypatch.setattr(trace_export, "otlp_span_exporter", lambda url: exporter)
    repo.add_model("ctx", config=CONTEXT_CONFIG, model_py=CONTEXT_PY)
    config = TraceConfig(level=("TIMESTAMPS",), rate=2, mode="opentelemetry")
    with Server(model_repository=repo.path, trace_config=config) as server:
        answers = [server.model("ctx").infer(inputs={"X": [1]}).result()
                   .outputs["CONTEXT"].to_numpy()[0].decode() for _ in range(2)]
    assert answers[0] == "None"  # not sampled: no context
    context = json.loads(answers[1])
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ctx"]
    assert context["traceparent"].startswith(
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")


def test_trace_config_flags_parse_as_tritonserver_reads_them():
    config = parse_trace_config([
        "triton,file=/tmp/trace.json", "triton,log-frequency=50", "rate=100",
        "level=TIMESTAMPS", "level=TENSORS", "count=10"])
    assert config == TraceConfig(level=("TIMESTAMPS", "TENSORS"), rate=100, count=10,
                                 file="/tmp/trace.json", log_frequency=50)
    otel = parse_trace_config(["mode=opentelemetry", "opentelemetry,url=http://c:4318/v1/t",
                               "opentelemetry,resource=a=b", "opentelemetry,bsp_schedule_delay=9"])
    assert (otel.mode, otel.url, dict(otel.resource), dict(otel.batch)) == (
        "opentelemetry", "http://c:4318/v1/t", {"a": "b"}, {"bsp_schedule_delay": 9})
    # as tritonserver: unknown settings are kept (triton mode) or ignored (global), a count
    # below -1 is taken, a negative rate wraps
    quirks = parse_trace_config(["triton,speed=1", "speed=2", "count=-2", "rate=-1"])
    assert quirks.settings()["speed"] == "1"
    assert (quirks.count, quirks.rate, dict(quirks.extra)) == (-2, 4294967295,
                                                               {"triton": {"speed": "1"}})
    for bad, message in ((["level=LOUD"], "invalid value for trace level option: loud"),
                         (["rate=x"], "Invalid option value. Got x"),
                         (["rate=99999999999"], "Provided option value is out of bound"),
                         (["zipkin,url=x"], "invalid value for trace mode option: zipkin"),
                         (["level"], "--trace-config option format is"),
                         (["rate="], "--trace-config option format is"),
                         (["mode=zipkin"], "invalid value for trace mode option: zipkin")):
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            parse_trace_config(bad)


def _frontend_request(stamps: list[tuple[str, int]]):
    from infercore.request import InferRequest
    from infercore.tensor import Tensor

    request = InferRequest("add_sub", {"INPUT0": Tensor.from_numpy(ONES),
                                       "INPUT1": Tensor.from_numpy(ONES)})
    request.frontend_stamps = stamps
    return request


def test_a_frontends_trace_is_written_once_the_frontend_answered(add_sub_repo, tmp_path):
    from infercore.frontends.trace_stamps import held_trace

    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path), log_frequency=1)
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        tracer = server.tracer
        assert tracer.active
        received = tracer.now_ns()
        request = _frontend_request([("HTTP_RECV_START", received),
                                             ("HTTP_RECV_END", received + 1)])
        server.infer(request).result()
        trace = held_trace(request)
        assert trace is not None
        written = tmp_path / "trace.json.0"
        assert not written.exists()  # the request ended; the frontend has not answered
        trace.frontend_stamp("INFER_RESPONSE_COMPLETE")
        trace.frontend_stamp("HTTP_SEND_START")
        trace.frontend_stamp("HTTP_SEND_END")
        trace.frontend_done()
        trace.frontend_done()  # idempotent
        records = json.loads(written.read_text())
    names = [r["timestamps"][0]["name"] if "timestamps" in r else "model" for r in records]
    # what came before the model's record as Triton writes it; the rest by time
    assert names == ["HTTP_RECV_START", "HTTP_RECV_END", "model", *ORDER,
                     "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    stamps = [r["timestamps"][0]["ns"] for r in records if "timestamps" in r]
    assert stamps == sorted(stamps)


def test_a_frontend_request_refused_by_its_model_is_not_traced(repo, add_sub_source,
                                                               tmp_path):
    from infercore.frontends.trace_stamps import release

    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path), log_frequency=1)
    with Server(model_repository=repo.path, trace_config=config) as server:
        now = server.tracer.now_ns()
        request = _frontend_request([("GRPC_WAITREAD_START", now),
                                             ("GRPC_WAITREAD_END", now)])
        request.inputs.pop("INPUT1")  # refused by the model's validator, not traced
        with pytest.raises(InvalidArgumentError):
            server.infer(request)
        release(request)  # nothing held: a no-op
        good = _frontend_request([("GRPC_WAITREAD_START", now),
                                          ("GRPC_WAITREAD_END", now)])
        server.infer(good).result()
        release(good)
        records = json.loads((tmp_path / "trace.json.0").read_text())
    assert [r["timestamps"][0]["name"] for r in records[:2]] == ["GRPC_WAITREAD_START",
                                                                 "GRPC_WAITREAD_END"]
    assert not (tmp_path / "trace.json.1").exists()


def test_tracer_is_active_only_while_some_scope_may_sample(add_sub_repo, tmp_path):
    config = TraceConfig(level=("OFF",), rate=1, file=str(tmp_path / "t.json"))
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        assert not server.tracer.active
        server.update_trace_settings("add_sub", trace_level=["TIMESTAMPS"])
        assert server.tracer.active
        server.update_trace_settings("add_sub", trace_level=None)
        assert not server.tracer.active
    assert not server.tracer.active


def test_a_request_refused_before_its_model_leaves_the_frontends_stamps(add_sub_repo,
                                                                       tmp_path):
    path = tmp_path / "trace.json"
    config = TraceConfig(level=("TIMESTAMPS",), rate=2, file=str(path), log_frequency=1)
    with Server(model_repository=add_sub_repo.path, trace_config=config) as server:
        stamps = [("HTTP_RECV_START", 5), ("HTTP_RECV_END", 7)]
        server.tracer.refused("add_sub", stamps)  # the 1st of every 2: not sampled
        assert not (tmp_path / "trace.json.0").exists()
        server.tracer.refused("add_sub", stamps)  # sampled: written at once
        records = json.loads((tmp_path / "trace.json.0").read_text())
    assert records == [{"id": 1, "timestamps": [{"name": "HTTP_RECV_START", "ns": 5}]},
                       {"id": 1, "timestamps": [{"name": "HTTP_RECV_END", "ns": 7}]}]
