"""SequenceBatcher: slots, order, controls, implicit state, idle release, errors, shutdown.

Time is a ManualClock: delays and idle timeouts pass only when a test advances it. A lane
(an instance's slots) belongs to the thread that first calls ``next_payload``: most tests
call it from the test's own thread, so they see one instance. "Executing" a payload here
means answering its requests through their senders, as a backend would.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.errors import CancelledError, InvalidArgumentError, UnavailableError
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.scheduling.sequence import SequenceBatcher
from infercore.stats import ModelStats
from infercore.tensor import DataType, Tensor, serialize_bytes_tensor
from infercore.testing import ManualClock

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
"""
STATE = """
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 2 ]
            initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "zero" } } ]
"""


def _batcher(sequence: str = "", max_batch_size: int = 0, clock: ManualClock | None = None,
             outputs: str = "", model_dir=None):
    config = text_format.Parse(
        f"""
        name: "m"
        max_batch_size: {max_batch_size}
        input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
        output [ {{ name: "Y", data_type: TYPE_INT32, dims: [ 1 ] }} {outputs} ]
        sequence_batching {{ max_sequence_idle_microseconds: 1000 {sequence} }}
        """,
        model_config_pb2.ModelConfig(),
    )
    failed: list[InferRequest] = []
    clock = clock or ManualClock()
    return SequenceBatcher(config, clock, failed.append, model_dir), clock, failed


def _request(correlation_id: int | str, name: str = "", *, start: bool = False,
             end: bool = False, batched: bool = False, batch: int = 1, timeout_us: int = 0
             ) -> tuple[InferRequest, ResponseStream]:
    shape = (batch, 1) if batched else (1,)
    x = Tensor.from_numpy(np.ones(shape, np.int32))
    request = InferRequest("m", {"X": x}, id=name, correlation_id=correlation_id,
                           sequence_start=start, sequence_end=end, timeout_us=timeout_us)
    request.batch_size = batch
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    return request, stream


def _enqueue(batcher, *args, **kwargs) -> ResponseStream:
    request, stream = _request(*args, **kwargs)
    batcher.enqueue(request)
    return stream


def _ids(payload) -> list[str]:
    return [r.id for r in payload.requests]


def _answer(payload, **outputs: np.ndarray) -> None:
    for request in payload.requests:
        request.sender.send({"Y": Tensor.from_numpy(np.zeros((1,), np.int32)),
                             **{k: Tensor.from_numpy(v) for k, v in outputs.items()}})


def _error(stream: ResponseStream) -> Exception | None:
    return stream.result(timeout=5).error


def _refused(batcher, *args, **kwargs) -> InvalidArgumentError:
    """The error ``enqueue`` raises for a request that cannot belong to a sequence."""
    with pytest.raises(InvalidArgumentError) as refused:
        _enqueue(batcher, *args, **kwargs)
    return refused.value


def _in_thread(target) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(target()))
    thread.start()
    return thread, got


# -- order and slots -------------------------------------------------------------------------
def test_requests_of_a_sequence_run_in_arrival_order_one_at_a_time():
    batcher, _, _ = _batcher()
    for name, flags in (("a1", {"start": True}), ("a2", {}), ("a3", {"end": True})):
        _enqueue(batcher, 7, name, **flags)
    assert [_ids(batcher.next_payload()) for _ in range(3)] == [["a1"], ["a2"], ["a3"]]
    assert batcher.statistics().seated == 0  # END ran: the slot is free again


def test_direct_batch_holds_one_request_per_slot_in_slot_order():
    batcher, _, _ = _batcher("direct { }", max_batch_size=2)
    for name, cid, flags in (("a1", 1, {"start": True}), ("b1", 2, {"start": True}),
                             ("a2", 1, {}), ("b2", 2, {})):
        _enqueue(batcher, cid, name, batched=True, **flags)
    assert _ids(batcher.next_payload()) == ["a1", "b1"]
    assert _ids(batcher.next_payload()) == ["a2", "b2"]


def _padding_config() -> str:
    return ('direct { } control_input [ '
            '{ name: "READY" control [ { kind: CONTROL_SEQUENCE_READY '
            'int32_false_true: [ 0, 1 ] } ] }, '
            '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [ 0, 1 ] } ] }, '
            '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
            'data_type: TYPE_UINT64 } ] } ]')


def test_direct_pads_the_empty_slots_below_the_highest_one():
    # Triton's direct strategy: batch index = slot; empty slots below get null requests
    # (conformance qa_sequence_direct_padding)
    batcher, _, _ = _batcher(_padding_config(), max_batch_size=4)
    for cid in (1, 2, 3):
        _enqueue(batcher, cid, f"s{cid}", start=True, batched=True)
    assert _ids(batcher.next_payload()) == ["s1", "s2", "s3"]
    _enqueue(batcher, 3, "s3b", batched=True)
    payload = batcher.next_payload()
    assert _ids(payload) == ["", "", "s3b"] and payload.batch_size == 3
    null, real = payload.requests[0], payload.requests[2]
    assert null.padding and not real.padding
    controls = {name: null.inputs[name].to_numpy().tolist()
                for name in ("READY", "START", "CORRID")}
    assert controls == {"READY": [[0]], "START": [[0]], "CORRID": [[0]]}
    assert real.inputs["READY"].to_numpy().tolist() == [[1]]
    assert null.inputs["X"].to_numpy().tolist() == [[0]]  # zeros of the real input's shape
    for request in payload.requests:  # the backend answers every request it was given
        request.sender.send({"Y": Tensor.from_numpy(np.zeros((1, 1), np.int32))}, final=True)
    assert null.sender.closed


def test_null_requests_count_in_the_batch_size_only():
    batcher, _, _ = _batcher(_padding_config(), max_batch_size=4)
    _enqueue(batcher, 1, "a", start=True, batched=True)
    _enqueue(batcher, 2, "b", start=True, batched=True)
    batcher.next_payload()
    _enqueue(batcher, 2, "b2", batched=True)
    payload = batcher.next_payload()
    stats = ModelStats("m", 1)
    for request in payload.requests:
        request.compute_start_ns = request.compute_input_end_ns = 1
        request.compute_output_start_ns = request.compute_end_ns = 2
    stats.record_execution(payload.requests, 3)
    snapshot = stats.snapshot()
    assert (snapshot.inference_count, snapshot.execution_count) == (1, 1)
    assert [b.batch_size for b in snapshot.batch_stats] == [2]


def test_direct_does_not_pad_a_model_that_does_not_batch():
    batcher, _, _ = _batcher("direct { }")
    _enqueue(batcher, 1, "a", start=True)
    assert _ids(batcher.next_payload()) == ["a"]


def test_a_sequence_without_a_free_slot_waits_in_the_backlog():
    batcher, _, _ = _batcher()  # max_batch_size 0: one slot
    _enqueue(batcher, 1, "a1", start=True)
    _enqueue(batcher, 2, "b1", start=True, end=True)
    assert _ids(batcher.next_payload()) == ["a1"]
    assert batcher.statistics().backlogged == 1
    _enqueue(batcher, 1, "a2", end=True)
    assert _ids(batcher.next_payload()) == ["a2"]
    assert _ids(batcher.next_payload()) == ["b1"]  # seated when a's END left its slot


def test_direct_waits_for_slot_utilization_until_the_delay():
    batcher, clock, _ = _batcher(
        "direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 1.0 }",
        max_batch_size=2)
    _enqueue(batcher, 1, "a1", start=True, batched=True)
    thread, got = _in_thread(batcher.next_payload)
    clock.wait_for_sleepers(1)
    clock.advance(us=99)
    clock.wait_for_sleepers(1)
    assert got == []
    clock.advance(us=1)
    thread.join(5)
    assert _ids(got[0]) == ["a1"]


def test_direct_goes_before_the_delay_once_enough_slots_are_ready():
    batcher, clock, _ = _batcher(
        "direct { max_queue_delay_microseconds: 1000000 minimum_slot_utilization: 1.0 }",
        max_batch_size=2)
    _enqueue(batcher, 1, "a1", start=True, batched=True)
    thread, got = _in_thread(batcher.next_payload)
    clock.wait_for_sleepers(1)
    _enqueue(batcher, 2, "b1", start=True, batched=True)
    thread.join(5)
    assert _ids(got[0]) == ["a1", "b1"]


def test_each_sequence_stays_on_the_lane_that_seated_it():
    batcher, _, _ = _batcher()  # one slot per lane
    for cid in (1, 2, 3, 4):
        for step in range(3):
            _enqueue(batcher, cid, f"{cid}.{step}", start=step == 0, end=step == 2)
    batcher.stop()  # no more requests: the lanes run what is queued, then get None
    runs: dict[str, list[list[str]]] = {}

    def lane(name: str) -> None:
        while (payload := batcher.next_payload()) is not None:
            runs.setdefault(name, []).append(_ids(payload))

    threads = [threading.Thread(target=lane, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    lane_of = {}
    for name, batches in runs.items():
        for batch in batches:
            assert len(batch) == 1
            lane_of.setdefault(batch[0].split(".")[0], set()).add(name)
    assert sorted(lane_of) == ["1", "2", "3", "4"]
    assert all(len(lanes) == 1 for lanes in lane_of.values())
    order = [r for batches in runs.values() for b in batches for r in b]
    for cid in "1234":
        assert [r for r in order if r.startswith(cid + ".")] == [f"{cid}.0", f"{cid}.1",
                                                                 f"{cid}.2"]


def test_oldest_batches_the_heads_of_the_oldest_sequences():
    batcher, clock, _ = _batcher(
        "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }", max_batch_size=4)
    for name, cid, flags in (("a1", 1, {"start": True}), ("b1", 2, {"start": True}),
                             ("c1", 3, {"start": True}), ("a2", 1, {})):
        _enqueue(batcher, cid, name, batched=True, **flags)
        clock.advance(ns=1)
    assert _ids(batcher.next_payload()) == ["a1", "b1"]  # one request per sequence
    assert _ids(batcher.next_payload()) == ["c1", "a2"]  # oldest head first


def test_oldest_waits_for_the_queue_delay_to_reach_a_preferred_size():
    batcher, clock, _ = _batcher(
        "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
        "max_queue_delay_microseconds: 100 }", max_batch_size=4)
    _enqueue(batcher, 1, "a1", start=True, batched=True)
    thread, got = _in_thread(batcher.next_payload)
    clock.wait_for_sleepers(1)
    clock.advance(us=99)
    clock.wait_for_sleepers(1)
    assert got == []
    clock.advance(us=1)
    thread.join(5)
    assert _ids(got[0]) == ["a1"]


def test_a_second_start_continues_the_live_sequence_in_its_slot(caplog):
    batcher, _, _ = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    with caplog.at_level(logging.WARNING):
        _enqueue(batcher, 1, "a2", start=True)
    assert "Previous sequence will be terminated early" in caplog.text
    _enqueue(batcher, 2, "b1", start=True)
    assert [_ids(batcher.next_payload()) for _ in range(2)] == [["a1"], ["a2"]]
    assert batcher.statistics().backlogged == 1


def test_callers_never_run_its_requests():
    batcher, _, _ = _batcher()
    request, _ = _request(1, start=True)
    assert batcher.enqueue(request, take=True) is None  # never a payload for the caller
    assert not batcher.callers_run
    assert batcher.take(request) is None
    assert batcher.queued_count() == 1


# -- control inputs ----------------------------------------------------------------------------
def test_control_inputs_carry_the_flags_in_their_datatypes():
    batcher, _, _ = _batcher(CONTROLS, max_batch_size=4)
    for name, flags in (("first", {"start": True}), ("middle", {}), ("last", {"end": True})):
        _enqueue(batcher, 2**64 - 1, name, batched=True, **flags)
    seen = {}
    for _ in range(3):
        (request,) = batcher.next_payload().requests
        seen[request.id] = request.inputs
    for name, start, end in (("first", 1, 0), ("middle", 0, 0), ("last", 0, 1)):
        inputs = seen[name]
        assert inputs["START"].data_type is DataType.INT32
        assert inputs["START"].to_numpy().tolist() == [[start]]
        assert inputs["END"].data_type is DataType.FP32
        assert inputs["END"].to_numpy().tolist() == [[float(end)]]
        assert inputs["READY"].data_type is DataType.BOOL
        assert inputs["READY"].to_numpy().tolist() == [[True]]
        assert inputs["CORRID"].data_type is DataType.UINT64
        assert inputs["CORRID"].to_numpy().tolist() == [[2**64 - 1]]


def test_controls_have_no_batch_dim_when_the_model_does_not_batch():
    batcher, _, _ = _batcher(CONTROLS)
    _enqueue(batcher, 5, "a", start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["START"].shape == (1,) and request.inputs["CORRID"].shape == (1,)


def test_a_string_correlation_id_goes_into_a_string_corrid_control():
    batcher, _, _ = _batcher(CONTROLS.replace("TYPE_UINT64", "TYPE_STRING"))
    _enqueue(batcher, "user-42", "a", start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["CORRID"].data_type is DataType.BYTES
    assert request.inputs["CORRID"].to_numpy().tolist() == [b"user-42"]


def test_a_32_bit_corrid_control_keeps_the_low_order_bits():
    batcher, _, _ = _batcher(CONTROLS.replace("TYPE_UINT64", "TYPE_UINT32"))
    _enqueue(batcher, (5 << 32) | 9, "a", start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["CORRID"].to_numpy().tolist() == [9]


@pytest.mark.parametrize("corrid_type, correlation_id, expected", [
    ("TYPE_STRING", 3, "must specify a string correlation ID"),
    ("TYPE_UINT64", "three", "must specify an integer correlation ID"),
])
def test_a_correlation_id_of_the_wrong_type_is_rejected(corrid_type, correlation_id, expected):
    batcher, _, failed = _batcher(CONTROLS.replace("TYPE_UINT64", corrid_type))
    assert expected in str(_refused(batcher, correlation_id, start=True))
    assert not failed


# -- bad requests ------------------------------------------------------------------------------
@pytest.mark.parametrize("correlation_id", [0, ""])
def test_a_request_without_a_correlation_id_is_rejected(correlation_id):
    batcher, _, failed = _batcher()
    error = _refused(batcher, correlation_id, start=True)
    assert str(error) == ("inference request to model 'm' must specify a non-zero or "
                          "non-empty correlation ID")
    assert not failed and batcher.queued_count() == 0  # Triton counts no failure


@pytest.mark.parametrize("flags", [{}, {"end": True}])
def test_a_request_without_start_for_an_unknown_sequence_is_rejected(flags):
    batcher, _, _ = _batcher()
    assert str(_refused(batcher, 12, **flags)) == (
        "inference request for sequence 12 to model 'm' must specify the START flag on the "
        "first request of the sequence")


def test_a_request_after_the_end_is_rejected():
    batcher, _, _ = _batcher()
    _enqueue(batcher, "s", start=True, end=True)
    assert "must specify the START flag" in str(_refused(batcher, "s"))
    assert _ids(batcher.next_payload()) == [""]  # the one-request sequence still runs


def test_a_batch_of_more_than_one_is_rejected():
    batcher, _, _ = _batcher(max_batch_size=4)
    assert str(_refused(batcher, 1, start=True, batched=True, batch=2)) == (
        "inference request to model 'm' must specify batch-size 1 due to requirements of "
        "sequence batcher")


def test_cancelling_a_queued_request_ends_its_sequence():
    batcher, _, failed = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    request, stream = _request(1, "a2")
    batcher.enqueue(request)
    behind = _enqueue(batcher, 1, "a3")
    other = _enqueue(batcher, 2, "b1", start=True)
    request.cancel()
    assert isinstance(_error(stream), CancelledError)
    assert isinstance(_error(behind), CancelledError)
    assert len(failed) == 2
    assert _ids(batcher.next_payload()) == ["a1"]  # ahead of the cancel: still runs
    assert "must specify the START flag" in str(_refused(batcher, 1, "a4"))
    assert _ids(batcher.next_payload()) == ["b1"]  # a's slot went to the backlog
    assert not other.done


def test_a_backlogged_sequence_is_rejected_when_its_timeout_passes():
    batcher, clock, failed = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    assert _ids(batcher.next_payload()) == ["a1"]
    late = _enqueue(batcher, 2, "b1", start=True, timeout_us=10)
    late_too = _enqueue(batcher, 2, "b2")
    _enqueue(batcher, 1, "a2")
    clock.advance(us=10)
    assert _ids(batcher.next_payload()) == ["a2"]
    for stream in (late, late_too):
        error = _error(stream)
        assert isinstance(error, UnavailableError)
        assert str(error) == "timeout of the corresponding sequence has been expired"
    assert len(failed) == 2 and batcher.statistics().backlogged == 0


# -- idle sequences ----------------------------------------------------------------------------
def test_an_idle_sequence_is_released_and_later_requests_fail():
    batcher, clock, _ = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    assert _ids(batcher.next_payload()) == ["a1"]
    clock.advance(us=999)
    _enqueue(batcher, 1, "a2")  # 999 us idle: still alive
    assert _ids(batcher.next_payload()) == ["a2"]
    clock.advance(us=1000)
    assert "must specify the START flag" in str(_refused(batcher, 1, "a3"))
    assert batcher.statistics().seated == 0


def test_other_sequences_are_unaffected_by_an_idle_release():
    batcher, clock, _ = _batcher(max_batch_size=2)
    _enqueue(batcher, 1, "a1", start=True, batched=True)
    clock.advance(us=600)
    _enqueue(batcher, 2, "b1", start=True, batched=True)
    assert _ids(batcher.next_payload()) == ["a1", "b1"]
    clock.advance(us=600)  # a: 1200 us idle, b: 600 us
    assert "must specify the START flag" in str(_refused(batcher, 1, "a2", batched=True))
    _enqueue(batcher, 2, "b2", batched=True, end=True)
    assert _ids(batcher.next_payload()) == ["", "b2"]  # b keeps slot 1: slot 0 is padded


def test_an_idle_deadline_wakes_the_lane_that_holds_the_sequence():
    batcher, clock, _ = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    first: list = []
    second: list = []

    def lane() -> None:  # one thread, so one lane, for both calls
        first.append(batcher.next_payload())
        second.append(batcher.next_payload())

    thread = threading.Thread(target=lane)
    thread.start()
    clock.wait_for_sleepers(1)  # ran a1, now waits with a's idle deadline
    assert _ids(first[0]) == ["a1"]
    _enqueue(batcher, 2, "b1", start=True, end=True)  # no free slot: backlogged
    assert batcher.statistics().backlogged == 1
    clock.advance(us=1000)
    thread.join(5)
    assert _ids(second[0]) == ["b1"]


# -- implicit state ----------------------------------------------------------------------------
def test_implicit_state_starts_at_the_initial_state_and_follows_the_outputs():
    batcher, _, _ = _batcher(STATE)
    streams = [_enqueue(batcher, 1, "a1", start=True), _enqueue(batcher, 1, "a2")]
    payload = batcher.next_payload()
    (first,) = payload.requests
    assert first.inputs["STATE_IN"].to_numpy().tolist() == [0, 0]
    _answer(payload, STATE_OUT=np.array([3, 4], np.int32))
    (second,) = batcher.next_payload().requests
    assert second.inputs["STATE_IN"].to_numpy().tolist() == [3, 4]
    response = streams[0].result(timeout=5)
    assert sorted(response.outputs) == ["Y"]  # not listed in output: hidden from clients


def test_a_state_output_listed_in_the_config_reaches_the_client():
    batcher, _, _ = _batcher(
        STATE, outputs=', { name: "STATE_OUT", data_type: TYPE_INT32, dims: [ 2 ] }')
    stream = _enqueue(batcher, 1, "a1", start=True)
    _answer(batcher.next_payload(), STATE_OUT=np.array([3, 4], np.int32))
    assert stream.result(timeout=5).outputs["STATE_OUT"].to_numpy().tolist() == [3, 4]


def test_start_resets_the_state():
    batcher, _, _ = _batcher(STATE)
    _enqueue(batcher, 1, "a1", start=True)
    _answer(batcher.next_payload(), STATE_OUT=np.array([3, 4], np.int32))
    _enqueue(batcher, 1, "again", start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["STATE_IN"].to_numpy().tolist() == [0, 0]


def test_states_of_interleaved_sequences_stay_apart():
    batcher, _, _ = _batcher(STATE, max_batch_size=2)
    _enqueue(batcher, 1, "a1", start=True, batched=True)
    _enqueue(batcher, 2, "b1", start=True, batched=True)
    payload = batcher.next_payload()
    for request, value in zip(payload.requests, (1, 2), strict=True):
        request.sender.send({"STATE_OUT": Tensor.from_numpy(np.full((1, 2), value, np.int32))})
    _enqueue(batcher, 2, "b2", batched=True)
    _enqueue(batcher, 1, "a2", batched=True)
    states = {r.id: r.inputs["STATE_IN"].to_numpy().tolist()
              for r in batcher.next_payload().requests}
    assert states == {"a2": [[1, 1]], "b2": [[2, 2]]}


def test_without_initial_state_the_state_is_zeros_with_variable_dims_as_one():
    batcher, _, _ = _batcher(
        'state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]',
        max_batch_size=2)
    _enqueue(batcher, 1, start=True, batched=True)
    (request,) = batcher.next_payload().requests
    state = request.inputs["S"].to_numpy()
    assert state.shape == (1, 1, 3) and state.dtype == np.float32 and not state.any()


def test_initial_state_can_come_from_a_file(tmp_path):
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init.bin").write_bytes(
        np.array([7, 8], np.int32).tobytes())
    batcher, _, _ = _batcher(STATE.replace("zero_data: true", 'data_file: "init.bin"'),
                             model_dir=tmp_path)
    _enqueue(batcher, 1, start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["STATE_IN"].to_numpy().tolist() == [7, 8]


def test_a_string_initial_state_file_holds_length_prefixed_elements(tmp_path):
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s").write_bytes(serialize_bytes_tensor([b"hi"]))
    batcher, _, _ = _batcher(
        'state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_STRING dims: [ 1 ] '
        'initial_state { data_type: TYPE_STRING dims: [ 1 ] data_file: "s" name: "i" } } ]',
        model_dir=tmp_path)
    _enqueue(batcher, 1, start=True)
    (request,) = batcher.next_payload().requests
    assert request.inputs["S"].to_numpy().tolist() == [b"hi"]


@pytest.mark.parametrize("initial, message", [
    ('data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "i"',
     "The data type used for 'initial_state' field of state 'STATE_IN' does not match"),
    ('data_type: TYPE_INT32 dims: [ 2 ] zero_data: true',
     "Field 'name' must be set when using initial_state for state input 'STATE_IN'."),
    ('data_type: TYPE_INT32 dims: [ 3 ] zero_data: true name: "i"',
     "'initial_state' dim for input name 'STATE_IN' doesn't match 'state' dim description. "
     "3 != 2"),
    ('data_type: TYPE_INT32 dims: [ 2 ] data_file: "missing" name: "i"',
     "failed to read initial_state file 'missing'"),
])
def test_a_bad_initial_state_is_rejected(tmp_path, initial, message):
    sequence = (STATE.replace('data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "zero"',
                              initial))
    with pytest.raises(InvalidArgumentError) as info:
        _batcher(sequence, model_dir=tmp_path)
    assert message in str(info.value)


# -- shutdown ----------------------------------------------------------------------------------
def test_stop_runs_what_is_queued_then_returns_none():
    batcher, _, _ = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    _enqueue(batcher, 2, "b1", start=True)  # backlogged: seated once a can take no more
    batcher.stop()
    assert _ids(batcher.next_payload()) == ["a1"]
    assert _ids(batcher.next_payload()) == ["b1"]
    assert batcher.next_payload() is None
    with pytest.raises(UnavailableError):
        batcher.enqueue(_request(3, start=True)[0])


def test_drain_answers_leftovers_with_unavailable():
    batcher, _, failed = _batcher()
    streams = [_enqueue(batcher, 1, "a1", start=True), _enqueue(batcher, 2, "b1", start=True)]
    batcher.drain()
    assert all(isinstance(_error(s), UnavailableError) for s in streams)
    assert len(failed) == 2 and batcher.queued_count() == 0


def test_a_start_without_a_free_slot_releases_idle_sequences_first():
    batcher, clock, _ = _batcher()
    _enqueue(batcher, 1, "a1", start=True)
    assert _ids(batcher.next_payload()) == ["a1"]
    clock.advance(us=1000)  # the lane is not waiting: nobody reaps a before b arrives
    _enqueue(batcher, 2, "b1", start=True)
    assert batcher.statistics().backlogged == 0
    assert _ids(batcher.next_payload()) == ["b1"]


# -- iterative sequences (request rescheduling) ------------------------------------------------
def test_iterative_request_without_correlation_id_gets_a_sequence_of_its_own():
    batcher, _, _ = _batcher("iterative_sequence: true")
    _enqueue(batcher, 0, "a")
    _enqueue(batcher, "", "b")
    first, second = batcher.next_payload(), None
    request = first.requests[0]
    assert (request.correlation_id, request.sequence_start) == (1, True)
    _answer(first)
    second = batcher.next_payload()
    assert (second.requests[0].correlation_id, second.requests[0].sequence_start) == (2, True)


def test_a_plain_sequence_batcher_still_refuses_correlation_id_zero():
    batcher, _, _ = _batcher()
    assert "non-zero or non-empty correlation ID" in str(_refused(batcher, 0, start=True))


def test_a_rescheduled_request_runs_again_without_start_then_releases_its_slot():
    batcher, _, failed = _batcher("iterative_sequence: true")
    stream = _enqueue(batcher, 5, "a", start=True)
    payload = batcher.next_payload()
    request = payload.requests[0]
    assert request.rescheduler is not None
    request.rescheduler(request)  # the model asked to run it again
    assert request.sender.late  # its instance leaves it unanswered for now
    again = batcher.next_payload()
    assert again.requests == [request]
    assert (request.sequence_start, request.sequence_end) == (False, False)
    assert batcher.statistics().seated == 1
    _answer(again)
    assert stream.result(timeout=5).error is None
    # the lane's next look settles the last batch: not rescheduled, so the sequence ends
    # (counted as a failure, as Triton's cancel of the request is)
    batcher.stop()
    assert batcher.next_payload() is None  # (this thread's lane: the one that ran it)
    assert failed == [request]
    assert batcher.statistics().seated == 0


def test_a_released_iterative_request_frees_the_slot_for_the_next_sequence():
    batcher, _, _ = _batcher("iterative_sequence: true")
    _enqueue(batcher, 0, "a")
    _enqueue(batcher, 0, "b")
    first = batcher.next_payload()
    assert batcher.statistics().backlogged == 1  # one slot: "b" waits for it
    _answer(first)
    assert _ids(batcher.next_payload()) == ["b"]


def test_rescheduling_a_request_that_is_not_executing_is_an_error():
    batcher, _, _ = _batcher("iterative_sequence: true")
    _enqueue(batcher, 3, "a", start=True)
    request = batcher.next_payload().requests[0]
    request.rescheduler(request)
    with pytest.raises(Exception, match="not executing"):
        request.rescheduler(request)


def test_a_plain_sequence_batcher_gives_no_rescheduler():
    batcher, _, _ = _batcher()
    _enqueue(batcher, 3, "a", start=True)
    assert batcher.next_payload().requests[0].rescheduler is None
