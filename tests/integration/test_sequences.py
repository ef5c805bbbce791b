"""Sequence batching end to end: real Python models, control inputs, implicit state, idle
release and bad requests, through the in-process API.

The accumulator keeps its running sums in its instance, keyed by the CORRID control, so a
sequence that moved to another instance would fail with a KeyError; it also reports its
instance's name. The state accumulator keeps nothing: its sum travels as implicit state.
"""

from __future__ import annotations

import numpy as np
import pytest

from infercore import InvalidArgumentError, Server
from infercore.model import ModelEnvironment
from infercore.repository.manager import RepositoryManager
from infercore.request import InferRequest
from infercore.tensor import Tensor
from infercore.testing import ManualClock

DIRECT = "direct { }"
OLDEST = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }"

ACCUMULATOR_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            if get("READY").reshape(-1)[0] != 1 and request.correlation_id() in (0, ""):
                # a null request padding an empty slot (direct strategy): no sequence
                shape = get("INPUT").shape
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT", np.zeros(shape, np.int32)),
                    pb_utils.Tensor("INSTANCE", np.full(shape, b"", np.object_))]))
                continue
            corrid = get("CORRID").reshape(-1)[0]
            expected = request.correlation_id()
            if corrid != (expected.encode() if isinstance(expected, str) else expected):
                raise ValueError(f"CORRID {corrid!r} is not the request's {expected!r}")
            if get("READY").reshape(-1)[0] != 1:
                raise ValueError("READY should be true")
            if get("START").reshape(-1)[0]:
                self.sums[corrid] = 0
            self.sums[corrid] += int(get("INPUT").reshape(-1)[0])  # KeyError: wrong instance
            total = self.sums[corrid]
            if get("END").reshape(-1)[0]:
                del self.sums[corrid]
            shape = get("INPUT").shape
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", np.full(shape, total, np.int32)),
                pb_utils.Tensor("INSTANCE", np.full(shape, self.name.encode(), np.object_)),
            ]))
        return responses
"""

STATE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = (state + value).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)]))
        return responses
"""


def _accumulator_config(strategy: str = DIRECT, *, max_batch_size: int = 4, count: int = 2,
                        corrid: str = "TYPE_UINT64", idle_us: int = 5_000_000) -> str:
    return f"""
name: "acc"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }},
         {{ name: "INSTANCE", data_type: TYPE_STRING, dims: [ 1 ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }} ] }}
  ]
}}
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
"""


def _state_config(strategy: str = DIRECT) -> str:
    return f"""
name: "state_acc"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
sequence_batching {{
  {strategy}
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state {{ data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }}
          }} ]
}}
instance_group [ {{ count: 2, kind: KIND_CPU }} ]
"""


def _run_interleaved(model, sequences: dict, steps: list[int], batched: bool = True):
    """Send every sequence's steps round-robin without waiting, then read the results:
    {correlation id: [(OUTPUT, INSTANCE), ...]}."""
    streams: dict = {cid: [] for cid in sequences}
    for index, value in enumerate(steps):
        for cid in sequences:
            streams[cid].append(model.infer(
                inputs={"INPUT": np.array([[value]] if batched else [value], np.int32)},
                correlation_id=cid, sequence_start=index == 0,
                sequence_end=index == len(steps) - 1))
    results = {}
    for cid, pending in streams.items():
        results[cid] = []
        for stream in pending:
            response = stream.result(timeout=10)
            instance = response.outputs.get("INSTANCE")
            results[cid].append((
                int(response.outputs["OUTPUT"].to_numpy().reshape(-1)[0]),
                None if instance is None else instance.to_numpy().reshape(-1)[0]))
    return results


@pytest.mark.parametrize("strategy", [DIRECT, OLDEST], ids=["direct", "oldest"])
@pytest.mark.parametrize("ids, corrid", [
    ([1, 2, 2**64 - 1, 77], "TYPE_UINT64"),
    (["alpha", "beta", "gamma", "delta"], "TYPE_STRING"),
], ids=["uint64", "string"])
def test_control_inputs_accumulate_interleaved_sequences(repo, strategy, ids, corrid):
    repo.add_model("acc", config=_accumulator_config(strategy, corrid=corrid),
                   model_py=ACCUMULATOR_PY)
    with Server(model_repository=repo.path) as server:
        results = _run_interleaved(server.model("acc"), dict.fromkeys(ids), [1, 2, 3, 4])
    for cid in ids:
        assert [total for total, _ in results[cid]] == [1, 3, 6, 10], cid
        assert len({instance for _, instance in results[cid]}) == 1, cid


def test_direct_keeps_each_sequence_on_one_instance_slot(repo):
    # one slot per instance, two instances: the two sequences run side by side
    repo.add_model("acc", config=_accumulator_config(max_batch_size=0, count=2),
                   model_py=ACCUMULATOR_PY)
    with Server(model_repository=repo.path) as server:
        model = server.model("acc")
        results = _run_interleaved(model, dict.fromkeys([5, 6]), [10, 20, 30], batched=False)
        stats = model.statistics()[0]
    assert [t for t, _ in results[5]] == [10, 30, 60] == [t for t, _ in results[6]]
    instances = {cid: {i for _, i in results[cid]} for cid in results}
    assert all(len(names) == 1 for names in instances.values())
    assert stats.inference_count == 6 and stats.success.count == 6


@pytest.mark.parametrize("strategy", [DIRECT, OLDEST], ids=["direct", "oldest"])
def test_implicit_state_carries_each_sequence_and_restarts_at_start(repo, strategy):
    repo.add_model("state_acc", config=_state_config(strategy), model_py=STATE_PY)
    with Server(model_repository=repo.path) as server:
        model = server.model("state_acc")
        results = _run_interleaved(model, dict.fromkeys([11, "s-12", 13]), [5, 1, 1])
        for cid in results:
            assert [total for total, _ in results[cid]] == [5, 6, 7]
        first = model.infer(inputs={"INPUT": [[2]]}, correlation_id=9, sequence_start=True)
        assert sorted(first.result(timeout=10).outputs) == ["OUTPUT"]  # state stays inside
        model.infer(inputs={"INPUT": [[3]]}, correlation_id=9).result(timeout=10)
        again = model.infer(inputs={"INPUT": [[4]]}, correlation_id=9, sequence_start=True)
        assert again.result(timeout=10).outputs["OUTPUT"].to_numpy().tolist() == [[4]]


def test_bad_sequence_requests_get_tritons_errors_and_spare_other_sequences(repo):
    repo.add_model("acc", config=_accumulator_config(), model_py=ACCUMULATOR_PY)
    with Server(model_repository=repo.path) as server:
        model = server.model("acc")

        def send(cid, value, **flags):
            return model.infer(inputs={"INPUT": [[value]]}, correlation_id=cid, **flags)

        assert send(3, 1, sequence_start=True).result(timeout=10) is not None
        with pytest.raises(InvalidArgumentError, match="must specify a non-zero or non-empty "
                                                       "correlation ID"):
            send(0, 1, sequence_start=True).result(timeout=10)
        for flags in ({}, {"sequence_end": True}):
            with pytest.raises(InvalidArgumentError) as info:
                send(404, 1, **flags).result(timeout=10)
            assert str(info.value) == (
                "inference request for sequence 404 to model 'acc' must specify the START "
                "flag on the first request of the sequence")
        with pytest.raises(InvalidArgumentError, match="must specify an integer correlation"):
            send("text", 1, sequence_start=True).result(timeout=10)
        last = send(3, 2, sequence_end=True).result(timeout=10)
        assert last.outputs["OUTPUT"].to_numpy().tolist() == [[3]]
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            send(3, 1).result(timeout=10)  # the sequence ended
        stats = model.statistics()[0]
    # refused by the sequence batcher's Enqueue: Triton counts them nowhere
    assert stats.success.count == 2 and stats.fail.count == 0


@pytest.fixture
def manual_manager(repo):
    """A repository manager whose models run on a manual clock (the server's clock seam)."""
    clock = ManualClock()
    repo.add_model("acc", config=_accumulator_config(max_batch_size=2, count=1, idle_us=1000),
                   model_py=ACCUMULATOR_PY)
    manager = RepositoryManager([repo.path], environment=ModelEnvironment(clock=clock))
    manager.load("acc")
    yield manager, clock
    manager.unload_all(timeout=5)


def _send(manager, cid, value, **flags):
    request = InferRequest("acc", {"INPUT": Tensor.from_object(np.array([[value]], np.int32))},
                           correlation_id=cid, **flags)
    return manager.get("acc").infer(request).result(timeout=10)


def test_an_idle_sequence_is_released_and_the_others_go_on(manual_manager):
    manager, clock = manual_manager
    assert _send(manager, 1, 5, sequence_start=True).outputs["OUTPUT"].to_numpy().tolist() \
        == [[5]]
    clock.advance(us=600)
    _send(manager, 2, 7, sequence_start=True)  # the instance's second slot
    clock.advance(us=600)  # sequence 1 idle for 1200 us, sequence 2 for 600 us
    with pytest.raises(InvalidArgumentError, match="for sequence 1 to model 'acc' must "
                                                   "specify the START flag"):
        _send(manager, 1, 1)
    assert _send(manager, 2, 1, sequence_end=True).outputs["OUTPUT"].to_numpy().tolist() \
        == [[8]]
    restarted = _send(manager, 1, 2, sequence_start=True, sequence_end=True)
    assert restarted.outputs["OUTPUT"].to_numpy().tolist() == [[2]]


def test_a_bad_initial_state_fails_the_load_with_tritons_message(repo):
    config = _state_config().replace('name: "zero"', "")
    repo.add_model("state_acc", config=config, model_py=STATE_PY)
    manager = RepositoryManager([repo.path])
    with pytest.raises(InvalidArgumentError, match="Field 'name' must be set when using "
                                                   "initial_state for state input 'STATE_IN'"):
        manager.load("state_acc")
    assert manager.loaded() == []
