"""pb_utils custom metrics from process-isolated Python models, on the server's metrics.

The same model runs isolated ("metered") and in-thread ("metered_local"): values, metrics
text and error texts must agree.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infercore import Server
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "VALUES", data_type: TYPE_FP32, dims: [ -1 ] }} ]
output [
  {{ name: "RESULT", data_type: TYPE_FP64, dims: [ -1 ] }},
  {{ name: "TEXT", data_type: TYPE_STRING, dims: [ -1 ] }}
]
{extra}
"""

METERED_PY = """
import gc
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

Family = pb_utils.MetricFamily


def errors_of(*attempts):
    texts = []
    for attempt in attempts:
        try:
            attempt()
            texts.append("no error")
        except pb_utils.TritonModelException as exc:
            texts.append(exc.message())
    return texts


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.requests = Family(name="iso_requests", description="requests seen",
                               kind=Family.COUNTER)
        self.depth = Family(name="iso_depth", description="queue depth", kind=Family.GAUGE)
        self.sizes = Family(name="iso_sizes", description="sizes", kind=Family.HISTOGRAM)
        labels = {"model": self.name}
        self.counter = self.requests.Metric(labels=labels)
        self.gauge = self.depth.Metric(labels=labels)
        self.histogram = self.sizes.Metric(labels=labels, buckets=[1, 10, 100])

    def execute(self, requests):
        return [self.one(request) for request in requests]

    def one(self, request):
        action = json.loads(request.parameters())["action"]
        values = pb_utils.get_input_tensor_by_name(request, "VALUES").as_numpy()
        result, texts = [], []
        if action == "update":
            for value in values:
                self.counter.increment(float(value))
                self.gauge.set(float(value))
                self.histogram.observe(float(value))
            self.gauge.increment(-1)
            result = [self.counter.value(), self.gauge.value()]
        elif action == "errors":
            texts = errors_of(
                lambda: self.counter.increment(-1),
                lambda: self.counter.set(1),
                lambda: self.counter.observe(1),
                lambda: self.histogram.increment(1),
                lambda: self.histogram.value(),
                lambda: self.gauge.set("x"),
                lambda: Family(name="iso_requests", description="", kind=Family.GAUGE),
                lambda: Family(name="bad name", description="", kind=Family.GAUGE),
                lambda: Family(name="nv_inference_count", description="", kind=Family.GAUGE),
                lambda: self.sizes.Metric(labels={"model": self.name}, buckets=[1, 2]),
                lambda: self.sizes.Metric(labels={}, buckets=[3, 2]),
                lambda: self.depth.Metric(labels={"k": 1}),
                lambda: self.depth.Metric(labels={}, buckets=[1]),
            )
            result = [self.counter.value()]  # nothing above changed it
        elif action == "deleted":
            family = Family(name="iso_temp_" + self.name, description="", kind=Family.GAUGE)
            metric = family.Metric(labels={})
            metric.set(5)
            result = [metric.value()]
            del family
            gc.collect()
            texts = errors_of(lambda: metric.set(1), lambda: metric.value(),
                              lambda: metric.increment(1))
        elif action == "count":  # no value(): nothing here waits for the server
            for value in values:
                self.counter.increment(float(value))
        elif action == "pid":
            result = [float(os.getpid())]
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("RESULT", np.array(result, np.float64)),
            pb_utils.Tensor("TEXT", np.array([t.encode() for t in texts], np.object_)),
        ])
"""

MODELS = ("metered", "metered_local")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = RepositoryBuilder(tmp_path_factory.mktemp("isolated_metrics") / "models")
    repo.add_model("metered", config=CONFIG.format(name="metered", extra=PROCESS),
                   model_py=METERED_PY)
    repo.add_model("metered_local", config=CONFIG.format(name="metered_local", extra=""),
                   model_py=METERED_PY)
    options = {"model_control_mode": "explicit", "startup_models": MODELS}
    with Server(model_repository=repo.path, **options) as started:
        yield started


def run(server: Server, model: str, action: str, values: list[float] | None = None
        ) -> tuple[list[float], list[str]]:
    response = server.model(model).infer(
        {"VALUES": np.array(values or [0.0], np.float32)}, parameters={"action": action}
    ).result()
    assert response is not None
    return (response.outputs["RESULT"].to_numpy().tolist(),
            [text.decode() for text in response.outputs["TEXT"].to_numpy()])


def samples(text: str, family_name: str) -> dict[tuple[str, tuple], float]:
    """Sample name and sorted labels -> value (the parser's ``_total`` on counters undone)."""
    return {(s.name.removesuffix("_total") if family.type == "counter" else s.name,
             tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) if family.name == family_name
            for s in family.samples}


def test_counter_gauge_and_histogram_reach_the_servers_metrics(server: Server):
    pid, _ = run(server, "metered", "pid")
    assert pid != [0.0]
    for model in MODELS:
        # value() travels behind the updates sent before it, so it sees all of them
        assert run(server, model, "update", [1, 5, 50]) == ([56.0, 49.0], [])
    text = server.metrics()
    assert "# TYPE iso_requests counter\n" in text
    for model in MODELS:  # one family per name, shared by the worker and this process
        label = (("model", model),)
        assert samples(text, "iso_requests")[("iso_requests", label)] == 56.0
        assert samples(text, "iso_depth")[("iso_depth", label)] == 49.0
        sizes = samples(text, "iso_sizes")
        assert {le: sizes[("iso_sizes_bucket", (("le", le), *label))]
                for le in ("1.0", "10.0", "100.0", "+Inf")} == {
            "1.0": 1.0, "10.0": 2.0, "100.0": 3.0, "+Inf": 3.0}
        assert sizes[("iso_sizes_count", label)] == 3.0
        assert sizes[("iso_sizes_sum", label)] == 56.0


def test_updates_before_a_response_are_on_the_metrics_once_it_arrives(server: Server):
    for _ in range(20):
        for model in MODELS:  # (both, so that they keep counting alike)
            label = ("iso_requests", (("model", model),))
            before = samples(server.metrics(), "iso_requests")[label]
            run(server, model, "count", [1.0, 2.0])
            assert samples(server.metrics(), "iso_requests")[label] == before + 3.0


def test_errors_are_raised_in_the_worker_with_in_thread_texts(server: Server):
    isolated = run(server, "metered", "errors")
    local = run(server, "metered_local", "errors")
    assert isolated[1] == [text.replace("metered_local", "metered") for text in local[1]]
    assert "no error" not in isolated[1]
    assert ("Failed to increment metric value: counter 'iso_requests' can only be "
            "incremented by a value >= 0") in isolated[1]
    assert any("already exists with kind COUNTER" in text for text in isolated[1])
    assert isolated[0] == local[0]


def test_metric_of_a_deleted_family_fails_as_in_thread(server: Server):
    isolated = run(server, "metered", "deleted")
    local = run(server, "metered_local", "deleted")
    assert isolated == local
    assert isolated[0] == [5.0]
    deleted = "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."
    assert isolated[1] == [f"Failed to set metric value: {deleted}",
                           f"Failed to get metric value: {deleted}",
                           f"Failed to increment metric value: {deleted}"]
    assert "iso_temp_metered" not in server.metrics()


def test_unloading_the_model_removes_its_metrics(server: Server):
    run(server, "metered", "update", [2])
    assert ("iso_requests", (("model", "metered"),)) in samples(server.metrics(),
                                                                 "iso_requests")
    server.unload("metered")
    try:
        series = samples(server.metrics(), "iso_requests")
        assert ("iso_requests", (("model", "metered"),)) not in series
        assert ("iso_requests", (("model", "metered_local"),)) in series  # still held
    finally:
        server.load("metered")
    # A new worker starts its metrics afresh.
    assert run(server, "metered", "update", [3]) == ([3.0, 2.0], [])


def test_updates_from_many_requests_all_count(server: Server):
    before, _ = run(server, "metered", "update", [0])
    streams = [server.model("metered").infer({"VALUES": np.ones(4, np.float32)},
                                             parameters={"action": "update"})
               for _ in range(25)]
    for stream in streams:
        stream.result()
    after, _ = run(server, "metered", "update", [0])
    assert after[0] - before[0] == 100.0
