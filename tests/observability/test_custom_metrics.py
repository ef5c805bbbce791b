"""Custom metrics: the in-process API and pb_utils in Python models, on server.metrics()."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import triton_python_backend_utils as pb_utils
from infercore import (
    AlreadyExistsError,
    InvalidArgumentError,
    Metric,
    MetricFamily,
    MetricKind,
    Server,
)
from infercore.backends.base import InstanceInfo, ModelContext
from infercore.backends.python.backend import PythonBackend
from infercore.backends.python.pb_utils.metrics import use_metrics_backend
from infercore.config import parse_model_config
from infercore.observability.custom_metrics import REGISTRY, CustomMetricsRegistry


def samples(text: str, family_name: str) -> dict[tuple[str, tuple], float]:
    """Sample name and sorted labels -> value (the parser's ``_total`` on counters undone)."""
    return {(s.name.removesuffix("_total") if family.type == "counter" else s.name,
             tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) if family.name == family_name
            for s in family.samples}


@pytest.fixture
def empty_server(tmp_path):
    (tmp_path / "models").mkdir()
    with Server(model_repository=tmp_path / "models") as server:
        yield server


def test_counter_gauge_and_histogram_appear_on_the_metrics(empty_server):
    counter = MetricFamily(MetricKind.COUNTER, "t_requests", "requests seen")
    gauge = MetricFamily(MetricKind.GAUGE, "t_queue", "queue depth")
    histogram = MetricFamily(MetricKind.HISTOGRAM, "t_latency", "latency")
    c = Metric(counter, {"model": "m"})
    g = Metric(gauge)
    h = Metric(histogram, {"k": "v"}, buckets=[0.1, 1.0, 2.5, 5.0, 10.0])
    c.increment(2)
    c.increment(0.5)
    g.set_value(7)
    g.increment(-2)
    for datum in (0.05, 1.5, 6.0):
        h.observe(datum)
    assert (c.value, g.value) == (2.5, 5.0)
    text = empty_server.metrics()
    assert "# TYPE t_requests counter\n" in text and 't_requests{model="m"} 2.5' in text
    assert samples(text, "t_queue") == {("t_queue", ()): 5.0}
    assert samples(text, "t_latency") == {
        ("t_latency_bucket", (("k", "v"), ("le", "0.1"))): 1.0,
        ("t_latency_bucket", (("k", "v"), ("le", "1.0"))): 1.0,
        ("t_latency_bucket", (("k", "v"), ("le", "2.5"))): 2.0,
        ("t_latency_bucket", (("k", "v"), ("le", "5.0"))): 2.0,
        ("t_latency_bucket", (("k", "v"), ("le", "10.0"))): 3.0,
        ("t_latency_bucket", (("k", "v"), ("le", "+Inf"))): 3.0,
        ("t_latency_count", (("k", "v"),)): 3.0,
        ("t_latency_sum", (("k", "v"),)): 7.55,
    }


def test_kind_rules_are_tritons():
    counter = Metric(MetricFamily(MetricKind.COUNTER, "t_rules_c", ""))
    with pytest.raises(InvalidArgumentError):
        counter.increment(-1)
    with pytest.raises(InvalidArgumentError):
        counter.set_value(3)
    with pytest.raises(InvalidArgumentError):
        counter.observe(3)
    family = MetricFamily(MetricKind.HISTOGRAM, "t_rules_h", "")
    histogram = Metric(family, buckets=[1, 2])
    for operation in (histogram.increment, histogram.set_value):
        with pytest.raises(InvalidArgumentError):
            operation(1)
    with pytest.raises(InvalidArgumentError):
        histogram.value  # noqa: B018
    with pytest.raises(InvalidArgumentError):
        Metric(family)  # histograms need buckets
    for buckets in ([2.5, 0.1], [1, 1, 2]):
        with pytest.raises(InvalidArgumentError):
            Metric(family, buckets=buckets)
    Metric(family, {"other": "x"}, buckets=[])  # only +Inf
    for labels in ({"k": 1}, {1: "v"}, {"le": "x"}, {"bad-name": "v"}):
        with pytest.raises(InvalidArgumentError):
            Metric(family, labels, buckets=[1])


def test_same_name_shares_the_family_and_keeps_its_kind_and_first_description(empty_server):
    first = MetricFamily(MetricKind.COUNTER, "t_dup", "first description")
    second = MetricFamily(MetricKind.COUNTER, "t_dup", "second description")
    with pytest.raises(InvalidArgumentError):
        MetricFamily(MetricKind.GAUGE, "t_dup", "")
    a = Metric(first, {"k": "1"})
    b = Metric(second, {"k": "1"})  # same labels: the same metric
    a.increment(7.5)
    assert b.value == 7.5
    del first, a
    text = empty_server.metrics()
    assert "# HELP t_dup first description" in text and 't_dup{k="1"} 7.5' in text


def test_last_reference_removes_the_family_and_invalidates_its_metrics(empty_server):
    family = MetricFamily(MetricKind.GAUGE, "t_lifetime", "")
    metric = Metric(family, {"k": "v"})
    metric.set_value(1)
    assert "t_lifetime" in empty_server.metrics()
    del family
    gc.collect()
    assert "t_lifetime" not in empty_server.metrics()
    with pytest.raises(InvalidArgumentError, match="'MetricFamily' has been deleted"):
        metric.set_value(2)
    MetricFamily(MetricKind.COUNTER, "t_lifetime", "")  # the name is free again


def test_deleting_a_metric_removes_its_series(empty_server):
    family = MetricFamily(MetricKind.COUNTER, "t_series", "")
    kept = Metric(family, {"k": "kept"})
    dropped = Metric(family, {"k": "dropped"})
    kept.increment(1)
    dropped.increment(1)
    del dropped
    assert samples(empty_server.metrics(), "t_series") == {("t_series", (("k", "kept"),)): 1.0}


def test_server_family_names_and_bad_names_are_refused():
    with pytest.raises(AlreadyExistsError):
        MetricFamily(MetricKind.COUNTER, "nv_inference_count", "")
    with pytest.raises(InvalidArgumentError):
        MetricFamily(MetricKind.COUNTER, "bad-name", "")
    keep = MetricFamily(MetricKind.COUNTER, "t_twin", "")
    with pytest.raises(AlreadyExistsError):
        MetricFamily(MetricKind.COUNTER, "t_twin_total", "")
    assert keep.name == "t_twin"


def test_counters_named_total_keep_their_name(empty_server):
    family = MetricFamily(MetricKind.COUNTER, "t_tokens_total", "tokens")
    bare = Metric(family)  # a metric lives as long as its object, as in Triton
    bare.increment(3)
    metric = Metric(family, {"x": "y"})
    metric.increment(1)
    text = empty_server.metrics()
    assert "# TYPE t_tokens_total counter\n" in text
    assert "t_tokens_total 3\n" in text  # prometheus-cpp's spelling, as Triton
    del family


CUSTOM_MODEL_CONFIG = """
name: "counted"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

CUSTOM_MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="t_model_requests", description="requests this model saw",
            kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.family.Metric(labels={"model": args["model_name"]})
        # Families must outlive their metrics (as in Triton): keep a reference.
        self.sizes_family = pb_utils.MetricFamily(
            name="t_model_sizes", description="input values",
            kind=pb_utils.MetricFamily.HISTOGRAM)
        self.sizes = self.sizes_family.Metric(labels={}, buckets=[1.0, 10.0])
        try:
            pb_utils.MetricFamily(name="t_model_requests", description="",
                                  kind=pb_utils.MetricFamily.GAUGE)
        except pb_utils.TritonModelException:
            self.kind_error = True

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.metric.increment(1)
            self.sizes.observe(float(x[0]))
            try:
                self.metric.set(5)
                checked = -1.0
            except pb_utils.TritonModelException:
                checked = self.metric.value() if self.kind_error else -2.0
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", x * 0 + checked)]))
        return responses
"""


def test_python_models_report_custom_metrics(repo):
    repo.add_model("counted", config=CUSTOM_MODEL_CONFIG, model_py=CUSTOM_MODEL_PY)
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=["counted"]) as server:
        model = server.model("counted")
        answers = [model.infer(inputs={"X": np.array([v], np.float32)}).result()
                   .outputs["Y"].to_numpy()[0] for v in (0.5, 5.0, 50.0)]
        text = server.metrics()
        assert answers == [1.0, 2.0, 3.0]  # set() refused, value() counts, kind clash refused
        assert samples(text, "t_model_requests") == {
            ("t_model_requests", (("model", "counted"),)): 3.0}
        sizes = samples(text, "t_model_sizes")
        assert sizes[("t_model_sizes_bucket", (("le", "1.0"),))] == 1
        assert sizes[("t_model_sizes_bucket", (("le", "10.0"),))] == 2
        assert sizes[("t_model_sizes_count", ())] == 3
        server.unload("counted")
        gc.collect()
        # the model object is gone, and with it its families
        assert "t_model_requests" not in server.metrics()


@pytest.fixture
def process_registry():
    """pb_utils metrics in this process's registry, as a server's Python model has them."""
    previous = use_metrics_backend(REGISTRY)
    yield
    use_metrics_backend(previous)


def test_pb_utils_errors_are_triton_model_exceptions(process_registry):
    family = pb_utils.MetricFamily(name="t_pb_rules", description="",
                                   kind=pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"a": "b"})
    with pytest.raises(pb_utils.TritonModelException):
        metric.increment(-1)
    with pytest.raises(pb_utils.TritonModelException):
        metric.observe(1)
    with pytest.raises(pb_utils.TritonModelException):
        family.Metric(labels={"a": 1})
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.MetricFamily(name="t_pb_rules", description="",
                              kind=pb_utils.MetricFamily.HISTOGRAM)
    histogram = pb_utils.MetricFamily(name="t_pb_hist", description="",
                                      kind=pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException):
        histogram.Metric(labels={}, buckets=None)
    del family
    gc.collect()
    with pytest.raises(pb_utils.TritonModelException, match="has been deleted"):
        metric.value()


HANDED_MODEL_PY = """
import triton_python_backend_utils as pb_utils

AT_IMPORT = pb_utils.MetricFamily(name="t_handed_import", description="",
                                  kind=pb_utils.MetricFamily.GAUGE)


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(name="t_handed_init", description="made here",
                                            kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.family.Metric(labels={"m": "1"})
        self.metric.increment(2)
"""


def test_python_models_keep_their_metrics_in_the_registry_the_engine_hands_them(tmp_path):
    version_dir = tmp_path / "handed" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "model.py").write_text(HANDED_MODEL_PY)
    config = parse_model_config(CUSTOM_MODEL_CONFIG.replace('"counted"', '"handed"'),
                                model_name="handed")
    registry = CustomMetricsRegistry()
    context = ModelContext(name="handed", version=1, config=config,
                           model_dir=tmp_path / "handed", version_dir=version_dir,
                           repository=tmp_path, metrics=registry)
    previous = use_metrics_backend(None)
    try:
        model = PythonBackend().create_model(context)
        instance = model.create_instance(InstanceInfo("handed_0", "handed", 0, "KIND_CPU", 0))
        # at the module's import and in initialize: the handed registry, not the process's
        assert sorted(f.name for f in registry.families()) == ["t_handed_import",
                                                               "t_handed_init"]
        assert "t_handed_init" not in {f.name for f in REGISTRY.families()}
        text = "".join(str(family) for family in registry.collect())
        assert "t_handed_init" in text and "2.0" in text
        instance.finalize()
        model.finalize()
    finally:
        use_metrics_backend(previous)


def test_pb_utils_metrics_without_a_server_say_so():
    previous = use_metrics_backend(None)
    try:
        with pytest.raises(pb_utils.TritonModelException,
                           match="Error when creating MetricFamily: custom metrics are kept "
                                 "by the server"):
            pb_utils.MetricFamily(name="t_no_server", description="",
                                  kind=pb_utils.MetricFamily.COUNTER)
    finally:
        use_metrics_backend(previous)


def test_a_registry_sent_to_another_process_arrives_as_that_process_own():
    # A Ray actor's spec carries the server's registry: the actor's models define their
    # families in the actor process's registry, never in a copy of the server's state.
    import pickle

    separate = CustomMetricsRegistry()
    separate.family(pb_utils.MetricFamily.COUNTER, "sent_along", "a family")
    assert pickle.loads(pickle.dumps(separate)) is REGISTRY
    assert pickle.loads(pickle.dumps(REGISTRY)) is REGISTRY
