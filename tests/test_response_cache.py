"""The response cache in the engine, through the in-process API: hits skip execution,
statistics and metrics count them as Triton does, and the cases Triton excludes."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infercore import InvalidArgumentError, Options, Server
from infercore.stats import Duration

CACHE = {"local": {"size": "1048576"}}

# Counts its executions: CALL is the execution that produced a response, so a response
# served from the cache carries the number of an earlier execution.
COUNTER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if np.any(x < 0):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative input", pb_utils.TritonError.INVALID_ARG)))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", (x * 2).astype(np.float32)),
                pb_utils.Tensor("CALL", np.full((x.shape[0], 1), self.calls, np.int64)),
            ]))
        return responses
"""


def _counter_config(name: str, extra: str = "response_cache { enable: true }") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [
  {{ name: "Y", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "CALL", data_type: TYPE_INT64, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""


def _x(value: float) -> np.ndarray:
    return np.full((1, 4), value, np.float32)


def _infer(server: Server, model: str, value: float, **kwargs):
    return server.model(model).infer(inputs={"X": _x(value)}, **kwargs).result(timeout=30)


def _call(response) -> int:
    return int(response.outputs["CALL"].to_numpy()[0, 0])


@pytest.fixture
def counter_repo(repo):
    repo.add_model("cached", config=_counter_config("cached"), model_py=COUNTER_PY)
    repo.add_model("plain", config=_counter_config("plain", extra=""), model_py=COUNTER_PY)
    return repo


def test_hit_answers_from_the_cache_without_executing(counter_repo):
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        first, second, other, third = (_infer(server, "cached", v) for v in (1, 1, 2, 1))
        assert [_call(r) for r in (first, second, other, third)] == [1, 1, 2, 1]
        np.testing.assert_array_equal(second.outputs["Y"].to_numpy(), _x(2))
        assert second.model == "cached" and second.model_version == 1 and second.final
        stats = server.model("cached").statistics()[0]
        # Triton's figures: hits are successes and queue entries, never inferences,
        # executions or compute time.
        assert (stats.success.count, stats.fail.count) == (4, 0)
        assert (stats.inference_count, stats.execution_count) == (2, 2)
        assert stats.queue.count == 4
        assert (stats.compute_input.count, stats.compute_infer.count,
                stats.compute_output.count) == (2, 2, 2)
        assert stats.cache_hit.count == 2 and stats.cache_hit.ns > 0
        assert stats.cache_miss.count == 2 and stats.cache_miss.ns > 0
        assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(1, 2)]


async def test_async_callers_get_hits_too(counter_repo):
    async with Server(Options(model_repository=counter_repo.path,
                              cache_config=CACHE)) as server:
        model = server.model("cached")
        first = await model.async_infer(inputs={"X": _x(5)})
        again = [await model.async_infer(inputs={"X": _x(5)}) for _ in range(3)]
        assert {_call(r) for r in [first, *again]} == {1}
        stats = model.statistics()[0]
        assert (stats.cache_hit.count, stats.cache_miss.count) == (3, 1)
        assert stats.execution_count == 1


def test_models_without_response_cache_enabled_never_use_it(counter_repo):
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        assert [_call(_infer(server, "plain", 1)) for _ in range(3)] == [1, 2, 3]
        stats = server.model("plain").statistics()[0]
        assert stats.cache_hit == Duration(0, 0) and stats.cache_miss == Duration(0, 0)


def test_without_a_server_cache_an_enabled_model_loads_and_executes(counter_repo, caplog):
    with caplog.at_level(logging.INFO, logger="infercore.model"):
        with Server(model_repository=counter_repo.path) as server:
            assert [_call(_infer(server, "cached", 1)) for _ in range(2)] == [1, 2]
            stats = server.model("cached").statistics()[0]
            assert (stats.cache_hit.count, stats.cache_miss.count) == (0, 0)
    assert "enables the response cache, but the server has none" in caplog.text


def test_requested_outputs_are_part_of_the_key(counter_repo):
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        only_y = _infer(server, "cached", 1, outputs=["Y"])
        assert list(only_y.outputs) == ["Y"]
        both = _infer(server, "cached", 1)  # wants CALL too: not answered by only_y's entry
        assert _call(both) == 2
        again = _infer(server, "cached", 1, outputs=["Y"])
        assert list(again.outputs) == ["Y"]
        stats = server.model("cached").statistics()[0]
        assert (stats.cache_hit.count, stats.cache_miss.count, stats.execution_count) == (
            1, 2, 2)


def test_failed_responses_are_not_cached(counter_repo):
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        for _ in range(2):
            response = server.model("cached").infer(
                inputs={"X": _x(-1)}, raise_on_error=False).result(timeout=30)
            assert response.error is not None and "negative input" in response.error.message
        stats = server.model("cached").statistics()[0]
        # the model's own error answers: successes, as Triton's Python backend counts them
        assert (stats.execution_count, stats.fail.count, stats.success.count) == (2, 0, 2)
        assert (stats.cache_hit.count, stats.cache_miss.count) == (0, 2)


def test_cached_responses_cannot_be_corrupted_by_callers(counter_repo):
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        first = _infer(server, "cached", 3)
        first.outputs["Y"].to_numpy()[:] = -7  # the executed response's own arrays
        hit = _infer(server, "cached", 3)
        np.testing.assert_array_equal(hit.outputs["Y"].to_numpy(), _x(6))
        hit.outputs["Y"].to_numpy()[:] = -8  # a hit's arrays
        np.testing.assert_array_equal(_infer(server, "cached", 3).outputs["Y"].to_numpy(),
                                      _x(6))


def test_least_recently_used_responses_are_evicted(counter_repo):
    # One response is 24 bytes (Y: 16, CALL: 8): a 40-byte cache holds one.
    options = Options(model_repository=counter_repo.path, cache_config={
        "local": {"size": "40"}})
    with Server(options) as server:
        calls = [_call(_infer(server, "cached", v)) for v in (1, 1, 2, 1, 1)]
        assert calls == [1, 1, 2, 3, 3]  # 2 evicted 1; 1 evicted 2


def test_a_reloaded_model_never_answers_from_its_previous_load(counter_repo):
    options = Options(model_repository=counter_repo.path, cache_config=CACHE,
                      model_control_mode="explicit", startup_models=["cached"])
    with Server(options) as server:
        assert _infer(server, "cached", 1).outputs["Y"].to_numpy()[0, 0] == 2.0
        model_py = counter_repo.path / "cached" / "1" / "model.py"
        model_py.write_text(COUNTER_PY.replace("(x * 2)", "(x * 3)"))
        server.load("cached")
        assert _infer(server, "cached", 1).outputs["Y"].to_numpy()[0, 0] == 3.0
        assert _infer(server, "cached", 1).outputs["Y"].to_numpy()[0, 0] == 3.0
        stats = server.model("cached").statistics()[0]  # the new load's own figures
        assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 1)


def test_dynamic_batching_caches_each_request_of_a_batch(repo):
    repo.add_model("batched", config=_counter_config(
        "batched", "dynamic_batching { }\nresponse_cache { enable: true }"),
        model_py=COUNTER_PY)
    with Server(Options(model_repository=repo.path, cache_config=CACHE)) as server:
        batch = np.stack([np.full(4, v, np.float32) for v in (1, 2)])
        executed = server.model("batched").infer(inputs={"X": batch}).result(timeout=30)
        assert executed.outputs["CALL"].to_numpy().ravel().tolist() == [1, 1]
        hit = server.model("batched").infer(inputs={"X": batch}).result(timeout=30)
        np.testing.assert_array_equal(hit.outputs["Y"].to_numpy(), batch * 2)
        assert hit.outputs["CALL"].to_numpy().ravel().tolist() == [1, 1]
        stats = server.model("batched").statistics()[0]
        assert (stats.inference_count, stats.execution_count) == (2, 1)
        assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 1)


def test_decoupled_and_sequence_models_cannot_enable_the_cache(repo, caplog):
    repo.add_model("stream", config="""
name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
response_cache { enable: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
""", model_py="class TritonPythonModel:\n    def execute(self, requests):\n        return None\n")
    repo.add_model("sequence", config="""
name: "sequence"
backend: "python"
max_batch_size: 4
sequence_batching { }
response_cache { enable: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
""", model_py="class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    options = Options(model_repository=repo.path, cache_config=CACHE, exit_on_error=False)
    with Server(options) as server:
        reasons = {entry.name: (entry.state.value, entry.reason)
                   for entry in server.repository_index()}
    # refused when Triton validates the config (its poll): never loaded, the reason logged
    assert reasons["stream"] == reasons["sequence"] == ("UNKNOWN", "")
    assert ("Response Cache does not currently support model stream with 'decoupled' "
            "transaction policy") in caplog.text
    assert ("Response Cache does not currently support model sequence with sequence "
            "batching scheduler") in caplog.text


def test_a_bad_cache_config_is_refused_when_the_server_is_made(counter_repo):
    with pytest.raises(InvalidArgumentError, match="unsupported cache implementation"):
        Server(Options(model_repository=counter_repo.path,
                       cache_config={"redis": {"host": "127.0.0.1"}}))


ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "RESULT", data_type: TYPE_FP32, dims: [ 4 ] },
         { name: "STEP_CALL", data_type: TYPE_INT64, dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "plain" model_version: -1 input_map { key: "X" value: "X" }
    output_map [ { key: "Y" value: "RESULT" }, { key: "CALL" value: "STEP_CALL" } ] }
] }
response_cache { enable: true }
"""


def test_ensembles_cache_their_top_level_responses(counter_repo):
    counter_repo.add_model("pipeline", config=ENSEMBLE_CONFIG)
    with Server(Options(model_repository=counter_repo.path, cache_config=CACHE)) as server:
        responses = [server.model("pipeline").infer(inputs={"X": _x(4)}).result(timeout=30)
                     for _ in range(3)]
        assert [int(r.outputs["STEP_CALL"].to_numpy()[0, 0]) for r in responses] == [1, 1, 1]
        np.testing.assert_array_equal(responses[2].outputs["RESULT"].to_numpy(), _x(8))
        assert server.model("plain").statistics()[0].execution_count == 1
        stats = server.model("pipeline").statistics()[0]
        assert (stats.cache_hit.count, stats.cache_miss.count) == (2, 1)


def test_an_ensemble_with_a_decoupled_step_is_not_cached(repo, caplog):
    repo.add_model("fanout", config="""
name: "fanout"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] },
         { name: "CALL", data_type: TYPE_INT64, dims: [ 1 ] } ]
""", model_py="""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x), pb_utils.Tensor("CALL", np.zeros((1, 1), np.int64))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
""")
    repo.add_model("pipeline", config=ENSEMBLE_CONFIG.replace('"plain"', '"fanout"'))
    with caplog.at_level(logging.WARNING, logger="infercore.model"):
        with Server(Options(model_repository=repo.path, cache_config=CACHE)) as server:
            for _ in range(2):
                list(server.model("pipeline").infer(inputs={"X": _x(1)}))
            stats = server.model("pipeline").statistics()[0]
            assert (stats.cache_hit.count, stats.cache_miss.count) == (0, 0)
    assert "its step model fanout is decoupled" in caplog.text


def _families(text: str) -> dict[str, dict[str, float]]:
    """sample name -> {model label (+ quantile) -> value}; counters by their family name
    (the parser calls their samples <name>_total)."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = family.name if family.type == "counter" else sample.name
            label = sample.labels.get("model", "")
            if "quantile" in sample.labels:
                label += "@" + sample.labels["quantile"]
            found.setdefault(name, {})[label] = sample.value
    return found


def test_metrics_report_cache_hits_and_misses_of_cached_models(counter_repo):
    options = Options(model_repository=counter_repo.path, cache_config=CACHE,
                      metrics_configuration={"": {"summary_latencies": "true"}})
    with Server(options) as server:
        for value in (1, 1, 1, 2):
            _infer(server, "cached", value)
        _infer(server, "plain", 1)
        stats = server.model("cached").statistics()[0]
        found = _families(server.metrics())
    assert found["nv_cache_num_hits_per_model"] == {"cached": 2.0}
    assert found["nv_cache_num_misses_per_model"] == {"cached": 2.0}
    assert found["nv_cache_hit_duration_per_model"] == {"cached": stats.cache_hit.ns // 1000}
    assert found["nv_cache_miss_duration_per_model"] == {
        "cached": stats.cache_miss.ns // 1000}
    assert found["nv_inference_request_success"] == {"cached": 4.0, "plain": 1.0}
    assert found["nv_inference_count"] == {"cached": 2.0, "plain": 1.0}
    assert found["nv_cache_hit_summary_per_model_count"] == {"cached": 2.0}
    assert found["nv_cache_miss_summary_per_model_count"] == {"cached": 2.0}
    assert set(found["nv_cache_hit_summary_per_model"]) == {
        f"cached@{q}" for q in ("0.5", "0.9", "0.95", "0.99", "0.999")}
    # Triton leaves the request summary out for models using the cache
    assert set(found["nv_inference_request_summary_us_count"]) == {"plain"}
