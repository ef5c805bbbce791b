"""Instance groups, dynamic batching, rate limiting and host policies with real models."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from infercore import Options, RateLimiterResource, RateLimitMode, Server, UnavailableError


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A module both the test and the models import, for events and observations."""
    (tmp_path / "shared_state.py").write_text(
        "import threading\n"
        "lock = threading.Lock()\n"
        "started = threading.Event()\n"
        "go = threading.Event()\n"
        "initialized = []\n"
        "batches = []\n"
        "executed_by = []\n"
        "running = 0\n"
        "max_running = 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shared_state", raising=False)
    import shared_state

    yield shared_state
    shared_state.go.set()
    sys.modules.pop("shared_state", None)


OBSERVER_PY = """
import os
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils
import shared_state as state


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        state.initialized.append(self.name)

    def execute(self, requests):
        with state.lock:
            state.running += 1
            state.max_running = max(state.max_running, state.running)
        state.batches.append(len(requests))
        state.executed_by.append(self.name)
        if not state.started.is_set():
            state.started.set()
            state.go.wait(10)
        time.sleep(0.002)  # a window in which another execution could overlap
        with state.lock:
            state.running -= 1
        cores = np.array(sorted(os.sched_getaffinity(0)), dtype=np.int32)
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("BATCH", np.array([len(requests)], np.int32)),
            pb_utils.Tensor("CORES", cores)]) for _ in requests]
"""


def _config(name: str, extra: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "BATCH", data_type: TYPE_INT32, dims: [ 1 ] }},
         {{ name: "CORES", data_type: TYPE_INT32, dims: [ -1 ] }} ]
{extra}
"""


X = {"X": np.array([[1]], np.int32)}


def _fire(model, count: int) -> list:
    return [model.infer(inputs=X) for _ in range(count)]


def test_instance_groups_count_names_and_passive(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config("obs", """
instance_group [ { name: "a" count: 2 kind: KIND_CPU },
                 { name: "b" count: 1 kind: KIND_CPU passive: true } ]"""))
    shared.go.set()
    with Server(model_repository=repo.path) as server:
        assert sorted(shared.initialized) == ["a_0", "a_1", "b_0"]
        threads = {t.name for t in threading.enumerate()}
        assert {"infercore-obs-a_0", "infercore-obs-a_1"} <= threads
        assert "infercore-obs-b_0" not in threads  # passive: loaded, never scheduled
        for stream in _fire(server.model("obs"), 30):
            stream.result(timeout=10)
        assert set(shared.executed_by) <= {"a_0", "a_1"}
        executions = server.model("obs").statistics()[0].instance_executions
        assert set(executions) <= {"a_0", "a_1"} and sum(executions.values()) == len(
            shared.executed_by)


def test_dynamic_batching_gathers_requests_queued_behind_a_busy_instance(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY,
                   config=_config("obs", "dynamic_batching { }"))
    with Server(model_repository=repo.path) as server:
        model = server.model("obs")
        first = model.infer(inputs=X)
        assert shared.started.wait(10)
        queued = _fire(model, 7)  # all wait while the only instance is busy
        shared.go.set()
        assert first.result(timeout=10).outputs["BATCH"].to_numpy().tolist() == [1]
        sizes = [s.result(timeout=10).outputs["BATCH"].to_numpy()[0] for s in queued]
        assert sizes == [7] * 7
        stats = model.statistics()[0]
        assert stats.execution_count == 2 and stats.inference_count == 8
        assert {b.batch_size for b in stats.batch_stats} == {1, 7}


def test_without_dynamic_batching_each_request_runs_alone(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config("obs"))
    with Server(model_repository=repo.path) as server:
        model = server.model("obs")
        first = model.infer(inputs=X)
        assert shared.started.wait(10)
        queued = _fire(model, 3)
        shared.go.set()
        for stream in [first, *queued]:
            assert stream.result(timeout=10).outputs["BATCH"].to_numpy().tolist() == [1]


def test_queued_request_past_its_timeout_is_rejected_unexecuted(repo, shared):
    policy = ("dynamic_batching { default_queue_policy { default_timeout_microseconds: "
              "60000000 allow_timeout_override: true } }")
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config("obs", policy))
    with Server(model_repository=repo.path) as server:
        model = server.model("obs")
        first = model.infer(inputs=X)
        assert shared.started.wait(10)
        late = model.infer(inputs=X, timeout=1)  # 1 us: expired by the time it is dequeued
        shared.go.set()
        first.result(timeout=10)
        with pytest.raises(UnavailableError, match="Request timeout expired"):
            late.result(timeout=10)
        assert model.statistics()[0].execution_count == 1


@pytest.mark.parametrize("extra", ["", "dynamic_batching { default_queue_policy { "
                                       "allow_timeout_override: true } }"])
def test_a_request_timeout_alone_never_expires_in_the_queue(repo, shared, extra):
    # Triton 2.51 (benchmarks/qa_schedulers.py): without dynamic batching the request's
    # timeout is never looked at, and with it the timeout only shortens a default one
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config("obs", extra))
    with Server(model_repository=repo.path) as server:
        model = server.model("obs")
        first = model.infer(inputs=X)
        assert shared.started.wait(10)
        late = model.infer(inputs=X, timeout=1)
        shared.go.set()
        first.result(timeout=10)
        assert late.result(timeout=10).outputs["BATCH"].to_numpy().tolist() == [1]


def test_rate_limiter_keeps_two_models_from_running_together(repo, shared):
    limited = ('instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ '
               '{ name: "R" global: true count: 1 } ] } } ]')
    repo.add_model("left", model_py=OBSERVER_PY, config=_config("left", limited))
    repo.add_model("right", model_py=OBSERVER_PY, config=_config("right", limited))
    shared.go.set()
    options = Options(model_repository=repo.path, rate_limiter_mode=RateLimitMode.EXEC_COUNT,
                      rate_limiter_resources=[RateLimiterResource("R", 1)])
    with Server(options) as server:
        streams = []
        for _ in range(10):
            streams += _fire(server.model("left"), 1) + _fire(server.model("right"), 1)
        for stream in streams:
            stream.result(timeout=10)
        assert shared.max_running == 1


def test_a_model_asking_more_than_a_resource_holds_fails_to_load(repo, shared):
    greedy = 'instance_group [ { rate_limiter { resources [ { name: "R" count: 4 } ] } } ]'
    repo.add_model("greedy", model_py=OBSERVER_PY, config=_config("greedy", greedy))
    options = Options(model_repository=repo.path, rate_limiter_mode="execution_count",
                      rate_limiter_resources=[RateLimiterResource("R", 2)],
                      exit_on_error=False)
    with Server(options) as server:
        (entry,) = server.repository_index()
        assert entry.state.value == "UNAVAILABLE" and "limited to 2" in entry.reason


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity")
def test_host_policy_pins_the_instance_thread(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config(
        "obs", 'instance_group [ { count: 1 kind: KIND_CPU host_policy: "first_core" } ]'))
    shared.go.set()
    first_core = min(os.sched_getaffinity(0))
    options = Options(model_repository=repo.path,
                      host_policies={"first_core": {"cpu-cores": f"{first_core}-{first_core}"}})
    with Server(options) as server:
        cores = server.model("obs").infer(inputs=X).result().outputs["CORES"].to_numpy()
        assert cores.tolist() == [first_core]


def test_unknown_host_policy_fails_the_load(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config(
        "obs", 'instance_group [ { host_policy: "nowhere" } ]'))
    with Server(model_repository=repo.path, exit_on_error=False) as server:
        (entry,) = server.repository_index()
        assert "host policy 'nowhere'" in entry.reason


def test_a_full_queue_refuses_at_once_and_leaks_nothing(repo, shared):
    repo.add_model("obs", model_py=OBSERVER_PY, config=_config(
        "obs", "dynamic_batching { default_queue_policy { max_queue_size: 1 } }"))
    with Server(model_repository=repo.path) as server:
        model = server.model("obs")
        first = model.infer(inputs=X)
        assert shared.started.wait(10)  # the only instance is busy with it
        queued = model.infer(inputs=X)
        with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
            model.infer(inputs=X)
        shared.go.set()
        first.result(timeout=10)
        queued.result(timeout=10)
        assert model.statistics()[0].fail.count == 1
    # stop() returned promptly: no request was left counted in flight
