"""Server metrics: Triton's families and labels, exact counts after known traffic, parsed
with prometheus_client's own parser."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sample_models import gated_identity_model, install_gate

from infercore import InvalidArgumentError, Options, Server, TritonError
from infercore.metrics_settings import MetricsSettings, parse_metrics_config
from infercore.observability.metrics import CpuSampler
from infercore.stats import LatencyWindow

ONES = np.ones((1, 4), np.float32)

# A model whose instance waits for the test: requests queue behind it deterministically.
GATE_CONFIG, GATE_PY = gated_identity_model("_metrics_gate")

DECOUPLED_CONFIG = """
name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
model_metrics { metric_control: [ {
  metric_identifier: { family: "nv_inference_first_response_histogram_ms" }
  histogram_options: { buckets: [ 1, 10, 100000 ] } } ] }
"""

DECOUPLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            for _ in range(3):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(text: str, name: str, **labels: str) -> float:
    """The one sample of family ``name`` whose labels include ``labels``."""
    found = [sample.value for family in text_string_to_metric_families(text)
             for sample in family.samples
             if family.name == name and sample.name in (name, name + "_total")
             and labels.items() <= sample.labels.items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture
def gate(monkeypatch):
    module = install_gate(monkeypatch, "_metrics_gate")
    yield module
    module.release.set()


def test_counts_after_known_traffic_are_exact(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        model = server.model("add_sub")
        for _ in range(3):
            model.infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        batch = np.ones((4, 4), np.float32)
        model.infer(inputs={"INPUT0": batch, "INPUT1": batch}).result()
        text = server.metrics()
        stats = server.statistics("add_sub")[0]
    labels = {"model": "add_sub", "version": "1"}
    assert value(text, "nv_inference_request_success", **labels) == 4
    assert value(text, "nv_inference_count", **labels) == 7  # 3 x batch 1 + batch 4
    assert value(text, "nv_inference_exec_count", **labels) == 4
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert value(text, "nv_inference_request_failure", reason=reason, **labels) == 0
    assert value(text, "nv_inference_pending_request_count", **labels) == 0
    # Durations come from the same statistics, in microseconds.
    assert value(text, "nv_inference_request_duration_us", **labels) == stats.success.ns // 1000
    assert value(text, "nv_inference_queue_duration_us", **labels) == stats.queue.ns // 1000
    assert (value(text, "nv_inference_compute_infer_duration_us", **labels)
            == stats.compute_infer.ns // 1000)
    assert stats.success.ns > 0


def test_exposition_uses_tritons_family_names_and_types(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        text = server.metrics()
    # prometheus_client would call these nv_inference_count_total; Triton does not.
    assert "# TYPE nv_inference_count counter\n" in text
    assert "# HELP nv_inference_request_success Number of successful" in text
    assert "# TYPE nv_inference_pending_request_count gauge\n" in text
    assert not re.search(r"^# (TYPE|HELP) nv_\S*_total ", text, re.MULTILINE)
    found = families(text)
    assert found["nv_inference_count"].type == "counter"
    assert found["nv_cpu_utilization"].type == "gauge"
    assert 0.0 <= value(text, "nv_cpu_utilization") <= 1.0
    assert value(text, "nv_cpu_memory_total_bytes") >= value(text, "nv_cpu_memory_used_bytes")


def test_exposition_writes_values_and_orders_families_as_triton(add_sub_repo):
    # recorded by hand from Triton 2.51's /metrics: prometheus-cpp writes 16 significant
    # digits ("1", "25275973632"), lists the failure reasons OTHER, CANCELED, BACKEND,
    # REJECTED, the pending count after the durations, and the pinned pool gauges
    with Server(model_repository=add_sub_repo.path) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        text = server.metrics()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert 'nv_inference_request_success{model="add_sub",version="1"} 1' in samples
    assert not [line for line in samples if re.search(r"\.0$|e\+", line)], samples
    reasons = re.findall(r'nv_inference_request_failure\{[^}]*reason="(\w+)"', text)
    assert reasons == ["OTHER", "CANCELED", "BACKEND", "REJECTED"]
    order = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert order.index("nv_inference_compute_output_duration_us") < order.index(
        "nv_inference_pending_request_count") < order.index(
        "nv_pinned_memory_pool_total_bytes") < order.index("nv_cpu_utilization")
    # the pool size asked for (256 MiB by default), though Triton could not allocate it
    assert "nv_pinned_memory_pool_total_bytes 268435456" in samples
    assert "nv_pinned_memory_pool_used_bytes 0" in samples
    assert int(value(text, "nv_cpu_memory_total_bytes")) > 0


def test_failures_count_by_tritons_reasons(repo, gate):
    # a queue policy with a default timeout, which a request's own timeout shortens (the
    # only queue timeouts Triton has)
    policy = ("dynamic_batching { default_queue_policy { default_timeout_microseconds: "
              "60000000 allow_timeout_override: true } }\n")
    repo.add_model("gate", config=GATE_CONFIG + policy, model_py=GATE_PY)
    with Server(model_repository=repo.path) as server:
        model = server.model("gate")
        with pytest.raises(InvalidArgumentError):  # wrong shape: refused before the model,
            model.infer(inputs={"X": np.ones(2, np.float32)})  # counted nowhere (Triton)
        running = model.infer(inputs={"X": np.ones(1, np.float32)})
        assert gate.entered.wait(10)
        cancelled = model.infer(inputs={"X": np.ones(1, np.float32)})
        expired = model.infer(inputs={"X": np.ones(1, np.float32)}, timeout=1)
        failing = model.infer(inputs={"X": -np.ones(1, np.float32)})
        pending = server.metrics()
        cancelled.cancel()
        gate.release.set()
        running.result()
        with pytest.raises(TritonError, match="timeout"):
            expired.result()
        with pytest.raises(TritonError, match="negative"):
            failing.result()
        with pytest.raises(TritonError):
            cancelled.result()
        text = server.metrics()
    labels = {"model": "gate", "version": "1"}
    assert value(pending, "nv_inference_pending_request_count", **labels) == 3
    assert value(text, "nv_inference_pending_request_count", **labels) == 0
    # the model's own error answer is a success, as Triton's Python backend counts it
    assert value(text, "nv_inference_request_success", **labels) == 2
    assert value(text, "nv_inference_request_failure", reason="REJECTED", **labels) == 1
    assert value(text, "nv_inference_request_failure", reason="CANCELED", **labels) == 1
    assert value(text, "nv_inference_request_failure", reason="BACKEND", **labels) == 0
    assert value(text, "nv_inference_request_failure", reason="OTHER", **labels) == 0


def test_counter_latencies_false_drops_the_duration_counters(add_sub_repo):
    options = Options(model_repository=add_sub_repo.path,
                      metrics_configuration={"": {"counter_latencies": "false"}})
    with Server(options) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        found = families(server.metrics())
    assert "nv_inference_count" in found
    assert not [name for name in found if name.endswith("_duration_us")]


def test_summaries_report_quantiles_and_match_the_counters(add_sub_repo):
    options = Options(model_repository=add_sub_repo.path, metrics_configuration={
        "": {"summary_latencies": "true", "summary_quantiles": "0.5:0.05,0.99:0.001"}})
    with Server(options) as server:
        for _ in range(5):
            server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        text = server.metrics()
    labels = {"model": "add_sub", "version": "1"}
    summary = families(text)["nv_inference_queue_summary_us"]
    assert summary.type == "summary"
    quantiles = sorted(s.labels["quantile"] for s in summary.samples if "quantile" in s.labels)
    assert quantiles == ["0.5", "0.99"]
    counts = {s.name: s.value for s in summary.samples if "quantile" not in s.labels}
    assert counts["nv_inference_queue_summary_us_count"] == 5
    assert (counts["nv_inference_queue_summary_us_sum"]
            == value(text, "nv_inference_queue_duration_us", **labels))


def test_first_response_histogram_for_decoupled_models(repo, add_sub_source):
    repo.add_model("stream", config=DECOUPLED_CONFIG, model_py=DECOUPLED_PY)
    repo.add_model("add_sub", config=add_sub_source[0], model_py=add_sub_source[1])
    options = Options(model_repository=repo.path,
                      metrics_configuration={"": {"histogram_latencies": "true"}})
    with Server(options) as server:
        for _ in range(2):
            assert len(list(server.model("stream").infer(inputs={"X": [1]}))) == 3
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        histogram = families(server.metrics())["nv_inference_first_response_histogram_ms"]
    samples = {(s.name, s.labels.get("le")): s.value for s in histogram.samples}
    assert {s.labels["model"] for s in histogram.samples} == {"stream"}  # decoupled only
    assert samples[("nv_inference_first_response_histogram_ms_count", None)] == 2
    assert samples[("nv_inference_first_response_histogram_ms_bucket", "+Inf")] == 2
    # the model's model_metrics buckets replace Triton's defaults
    assert {le for _, le in samples if le} == {"1.0", "10.0", "100000.0", "+Inf"}
    assert samples[("nv_inference_first_response_histogram_ms_bucket", "100000.0")] == 2


def test_histograms_are_off_by_default(repo):
    repo.add_model("stream", config=DECOUPLED_CONFIG, model_py=DECOUPLED_PY)
    with Server(model_repository=repo.path) as server:
        list(server.model("stream").infer(inputs={"X": [1]}))
        found = families(server.metrics())
    assert "nv_inference_first_response_histogram_ms" not in found
    assert "nv_inference_request_summary_us" not in found


def test_metrics_disabled_reports_no_server_families(add_sub_repo):
    with Server(model_repository=add_sub_repo.path, metrics=False) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        found = families(server.metrics())
    assert not [name for name in found if name.startswith("nv_")]


@pytest.mark.parametrize(("cpu_metrics", "expected"), [(True, 1 << 20), (False, 0)])
def test_the_pinned_pool_total_is_its_size_while_cpu_metrics_are_polled(
        repo, cpu_metrics, expected):
    # recorded by hand from Triton 2.51 on this host without CUDA: with
    # --pinned-memory-pool-byte-size=1048576 the total reads 1048576 once the CPU metrics
    # are polled (0 before the first poll); without CPU metrics it stays 0
    # (tests/conformance/cases/devices.py: devices_pinned_pool_*)
    with Server(model_repository=repo.path, pinned_memory_pool_size=1 << 20,
                cpu_metrics=cpu_metrics) as server:
        text = server.metrics()
    assert value(text, "nv_pinned_memory_pool_total_bytes") == expected
    assert value(text, "nv_pinned_memory_pool_used_bytes") == 0


def test_cpu_metrics_can_be_turned_off(add_sub_repo):
    with Server(model_repository=add_sub_repo.path, cpu_metrics=False) as server:
        server.model("add_sub").infer(inputs={"INPUT0": ONES, "INPUT1": ONES}).result()
        found = families(server.metrics())
    assert "nv_inference_count" in found
    assert "nv_cpu_utilization" not in found


def test_a_cancelled_ensemble_request_is_no_failure(repo, gate):
    repo.add_model("gate", config=GATE_CONFIG, model_py=GATE_PY)
    repo.add_model("pipe", config="""
name: "pipe"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "B", data_type: TYPE_FP32, dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "gate" model_version: -1
  input_map { key: "X" value: "A" } output_map { key: "Y" value: "B" } } ] }
""")
    with Server(model_repository=repo.path) as server:
        stream = server.model("pipe").infer(inputs={"A": np.ones(1, np.float32)})
        assert gate.entered.wait(10)
        stream.cancel()  # while its step runs: the ensemble fails, the step goes on
        with pytest.raises(TritonError):
            stream.result()
        gate.release.set()
        server.model("pipe").infer(inputs={"A": np.ones(1, np.float32)}).result()
        text = server.metrics()
    labels = {"model": "pipe", "version": "1"}
    assert value(text, "nv_inference_request_success", **labels) == 1
    failures = {reason: value(text, "nv_inference_request_failure", reason=reason, **labels)
                for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER")}
    # Triton 2.51 counts no failure for an ensemble request cancelled while its step ran
    # (probed over gRPC); a failing step counts two OTHER (qa_engine_ensemble_failure)
    assert failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}


def test_cpu_sampler_reads_proc_as_triton_does(tmp_path):
    now = [0]
    (tmp_path / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 1 1 1\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n")
    sampler = CpuSampler(1_000_000_000, proc=tmp_path, clock=lambda: now[0])
    # busy 200 -> 500 (+300), idle 800 -> 1500 (+700): 30% busy
    (tmp_path / "stat").write_text("cpu  250 0 250 1400 100 0 0 0 0 0\n")
    utilisation, total, used = sampler.values()
    assert utilisation == pytest.approx(0.3)
    assert (total, used) == (1000 * 1024, 750 * 1024)
    (tmp_path / "stat").write_text("cpu  1250 0 250 1400 100 0 0 0 0 0\n")
    assert sampler.values()[0] == pytest.approx(0.3)  # within the interval: not re-read
    now[0] = 1_000_000_000
    assert sampler.values()[0] == pytest.approx(1.0)  # +1000 busy, +0 idle


def test_cpu_sampler_without_proc_reports_nothing(tmp_path):
    assert CpuSampler(1, proc=tmp_path / "missing").values() is None


@pytest.mark.parametrize("configuration", [
    {"": {"summary_latencies": "maybe"}},
    {"": {"summary_quantiles": "0.5"}},
    {"": {"summary_quantiles": "2:0.1"}},
])
def test_bad_metrics_configuration_raises(configuration):
    with pytest.raises(InvalidArgumentError):
        MetricsSettings.from_configuration(configuration)


def test_metrics_config_flags_parse_to_tritons_configuration():
    assert parse_metrics_config(["summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01"]
                                ) == {"": {"summary_latencies": "true",
                                           "summary_quantiles": "0.5:0.05,0.9:0.01"}}
    with pytest.raises(InvalidArgumentError):
        parse_metrics_config(["summary_latencies"])


def test_metrics_interval_must_be_positive():
    with pytest.raises(InvalidArgumentError):
        Options(metrics_interval=0)


def test_latency_window_quantiles_are_nearest_rank_over_the_window():
    window = LatencyWindow(max_age_ns=1_000, max_samples=4)
    for i, request_us in enumerate((10, 20, 30, 40, 50)):  # the first falls out (max 4)
        window.add(100 + i, request_us * 1000, 0, 0, 0, 0)
    quantiles = window.quantiles(200, [0.0, 0.5, 0.75, 1.0])
    assert quantiles["request"] == [20.0, 30.0, 40.0, 50.0]
    assert window.quantiles(1_104, [0.5])["request"] == [50.0]  # older than max_age: gone
    assert math.isnan(window.quantiles(10_000, [0.5])["request"][0])
