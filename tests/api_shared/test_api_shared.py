"""The same application code against an in-process Server and a RemoteServer (HTTP, gRPC).

Every test takes ``api`` (see conftest_api.py) and uses only the API both share; what it
asserts holds for all three. The remote ones talk to a real ``infercore serve`` process.
"""

from __future__ import annotations

import asyncio
import json

import ml_dtypes
import numpy as np
import pytest

from infercore import (
    CancelledError,
    DataType,
    InferResponse,
    InternalError,
    InvalidArgumentError,
    Model,
    ModelState,
    ModelStatistics,
    NotFoundError,
    Tensor,
    TritonError,
    UnknownError,
)

pytest_plugins = ["conftest_api"]

A = np.arange(4, dtype=np.float32).reshape(1, 4)
B = np.full((1, 4), 2.0, dtype=np.float32)


def add_sub(api, **kwargs) -> InferResponse:
    return api.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": B}, **kwargs).result()


# -- health and descriptions ------------------------------------------------------------------

def test_server_is_live_and_ready(api) -> None:
    assert api.live() is True
    assert api.ready() is True


def test_server_metadata_names_the_server_and_its_extensions(api) -> None:
    metadata = api.metadata()
    assert metadata["name"] == "triton"
    assert isinstance(metadata["version"], str) and metadata["version"]
    assert "model_configuration" in metadata["extensions"]


def test_model_metadata_lists_inputs_and_outputs(api) -> None:
    metadata = api.model("add_sub").metadata()
    assert metadata["name"] == "add_sub"
    assert metadata["versions"] == ["1"]
    assert metadata["platform"] == "python"
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ]
    assert [o["name"] for o in metadata["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_tritons_json(api) -> None:
    model = api.model("add_sub")
    config = model.config()
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert model.config_proto().max_batch_size == 8
    assert model.max_batch_size == 8
    assert model.decoupled is False
    assert api.model("counter").decoupled is True


def test_model_readiness(api) -> None:
    assert api.model("add_sub").ready() is True
    assert api.model("add_sub", 1).ready() is True
    assert api.model("add_sub", 7).ready() is False
    assert api.model("no_such_model").ready() is False


def test_repository_index_and_models(api) -> None:
    index = {entry.name: entry for entry in api.repository_index()}
    assert {"add_sub", "counter", "echo", "mirror"} <= set(index)
    assert index["add_sub"].version == "1"
    assert index["add_sub"].state is ModelState.READY
    handles = api.models()
    assert ("add_sub", 1) in handles
    handle = handles[("add_sub", 1)]
    assert (handle.name, handle.version) == ("add_sub", 1)
    assert handle.infer(inputs={"INPUT0": A, "INPUT1": B}).result().model == "add_sub"


# -- inference --------------------------------------------------------------------------------

def test_infer_returns_tensors_and_the_response_fields(api) -> None:
    response = add_sub(api, request_id="req-7")
    assert response.model == "add_sub"
    assert response.model_version == 1
    assert response.request_id == "req-7"
    assert response.final is True
    assert response.error is None
    assert set(response.outputs) == {"OUTPUT0", "OUTPUT1"}
    out0 = response.outputs["OUTPUT0"]
    assert isinstance(out0, Tensor)
    assert out0.data_type is DataType.FP32
    assert out0.shape == (1, 4)
    np.testing.assert_array_equal(out0.to_numpy(), A + B)
    np.testing.assert_array_equal(np.asarray(response.outputs["OUTPUT1"]), A - B)


def test_iterating_a_stream_gives_the_one_response(api) -> None:
    responses = list(api.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": B}))
    assert len(responses) == 1
    np.testing.assert_array_equal(responses[0].outputs["OUTPUT0"].to_numpy(), A + B)


def test_lists_take_the_configured_datatype(api) -> None:
    response = api.model("add_sub").infer(
        inputs={"INPUT0": [[1, 2, 3, 4]], "INPUT1": [[1, 1, 1, 1]]}).result()
    out = response.outputs["OUTPUT0"]
    assert out.data_type is DataType.FP32
    np.testing.assert_array_equal(out.to_numpy(), [[2, 3, 4, 5]])


def test_only_the_requested_outputs_come_back(api) -> None:
    response = add_sub(api, outputs=["OUTPUT1"])
    assert list(response.outputs) == ["OUTPUT1"]
    np.testing.assert_array_equal(response.outputs["OUTPUT1"].to_numpy(), A - B)


def test_every_datatype_round_trips(api) -> None:
    values = {
        "BOOL": np.array([[True, False]]),
        "UINT8": np.array([[0, 255]], np.uint8),
        "UINT16": np.array([[0, 65535]], np.uint16),
        "UINT32": np.array([[0, 2**32 - 1]], np.uint32),
        "UINT64": np.array([[0, 2**64 - 1]], np.uint64),
        "INT8": np.array([[-128, 127]], np.int8),
        "INT16": np.array([[-2, 3]], np.int16),
        "INT32": np.array([[-2**31, 2**31 - 1]], np.int32),
        "INT64": np.array([[-2**63, 2**63 - 1]], np.int64),
        "FP16": np.array([[0.5, -1.5]], np.float16),
        "FP32": np.array([[1.25, -3.5]], np.float32),
        "FP64": np.array([[1e300, -2.5]], np.float64),
        "BF16": np.array([[1.5, -2.0]], ml_dtypes.bfloat16),
        "BYTES": np.array([[b"a\x00b", b"text"]], np.object_),
    }
    response = api.model("mirror").infer(
        inputs={f"IN_{t}": v for t, v in values.items()}).result()
    for datatype, value in values.items():
        out = response.outputs[f"OUT_{datatype}"]
        assert out.data_type is DataType(datatype)
        assert out.shape == (1, 2)
        assert out.to_numpy().dtype == value.dtype
        np.testing.assert_array_equal(out.to_numpy(), value)


def test_request_fields_and_parameters_reach_the_model(api) -> None:
    response = api.model("echo").infer(
        inputs={"X": np.array([1], np.int32)}, request_id="r1", correlation_id=42,
        timeout=5_000_000, parameters={"flag": True, "count": 3, "ratio": 0.5, "name": "x"}
    ).result()
    seen = json.loads(response.outputs["SEEN"].to_numpy()[0])
    assert seen["id"] == "r1"
    assert seen["correlation_id"] == 42
    assert seen["timeout"] == 5_000_000
    assert seen["parameters"] == {"flag": True, "count": 3, "ratio": 0.5, "name": "x"}


def test_response_parameters_come_back(api, api_kind: str) -> None:
    if api_kind.startswith("triton"):
        pytest.skip("Triton 2.51's Python backend sends no response parameters")
    response = api.model("echo").infer(inputs={"X": np.array([1], np.int32)}).result()
    assert response.parameters == {"flag": True, "number": 7, "text": "hello"}


def test_string_correlation_ids_reach_the_model(api) -> None:
    response = api.model("echo").infer(inputs={"X": np.array([1], np.int32)},
                                       correlation_id="session-9").result()
    assert json.loads(response.outputs["SEEN"].to_numpy()[0])["correlation_id"] == "session-9"


async def test_awaiting_a_stream_gives_the_response(api) -> None:
    response = await api.model("add_sub").async_infer(inputs={"INPUT0": A, "INPUT1": B})
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), A + B)


async def test_concurrent_async_requests_each_get_their_answer(api) -> None:
    model = api.model("add_sub")
    offsets = [np.full((1, 4), i, np.float32) for i in range(8)]
    responses = await asyncio.gather(
        *(model.infer(inputs={"INPUT0": A, "INPUT1": x}) for x in offsets))
    for response, x in zip(responses, offsets, strict=True):
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), A + x)


# -- decoupled models -------------------------------------------------------------------------

def test_a_decoupled_model_streams_its_responses(api) -> None:
    stream = api.model("counter").infer(inputs={"COUNT": np.array([3], np.int32)})
    indices = [int(r.outputs["INDEX"].to_numpy()[0]) for r in stream]
    assert indices == [0, 1, 2]
    assert stream.done


def test_a_decoupled_model_may_send_no_response(api) -> None:
    assert list(api.model("counter").infer(inputs={"COUNT": np.array([0], np.int32)})) == []
    assert api.model("counter").infer(inputs={"COUNT": [0]}).result() is None


async def test_a_decoupled_stream_is_async_iterable(api) -> None:
    stream = api.model("counter").async_infer(inputs={"COUNT": np.array([4], np.int32)})
    indices = [int(r.outputs["INDEX"].to_numpy()[0]) async for r in stream]
    assert indices == [0, 1, 2, 3]


def test_an_error_response_of_a_decoupled_model_arrives_in_order(api) -> None:
    stream = api.model("counter").infer(inputs={"COUNT": np.array([-1], np.int32)},
                                        raise_on_error=False)
    first = next(stream)
    # In process it is an InternalError; over HTTP it takes the status of the stream
    # (infercore 500, Triton 400); a gRPC stream message carries no code (UnknownError).
    assert isinstance(first.error, (InternalError, InvalidArgumentError, UnknownError))
    assert "negative count" in str(first.error)
    assert [int(r.outputs["INDEX"].to_numpy()[0]) for r in stream] == [0]
    with pytest.raises(TritonError, match="negative count"):
        api.model("counter").infer(inputs={"COUNT": np.array([-1], np.int32)}).result()


# -- cancellation -----------------------------------------------------------------------------

def test_cancel_stops_the_execution_in_the_server(api) -> None:
    slow = api.model("slow")
    long = slow.infer(inputs={"SECONDS": np.array([600], np.float32)})
    # One instance: this one runs only once the long one has stopped.
    short = slow.infer(inputs={"SECONDS": np.array([0], np.float32)})
    long.cancel()
    with pytest.raises(CancelledError):
        long.result()
    assert short.result().outputs["SLEPT"].to_numpy()[0] == 0
    assert add_sub(api).error is None  # still serving


async def test_cancel_ends_a_decoupled_stream_that_is_running(api) -> None:
    # Async: a sync reader of an in-process stream runs the request on its own thread
    # (docs/architecture.md, "caller runs") and would see nothing before it returns.
    ticker = api.model("ticker")
    stream = ticker.async_infer(inputs={"SECONDS": np.array([600], np.float32)})
    first = await stream.__anext__()
    assert first.outputs["STATE"].to_numpy()[0] == b"started"
    stream.cancel()
    try:
        rest = [r async for r in stream]  # in process: the model's own end, nothing more
    except CancelledError:  # remote: the call is gone, and the stream says why
        rest = []
    assert rest == []
    # One instance: the next request starts only once the first one's execution ended.
    again = ticker.async_infer(inputs={"SECONDS": np.array([0], np.float32)})
    assert [r.outputs["STATE"].to_numpy()[0] async for r in again] == [b"started"]


async def test_cancelling_the_awaiting_task_cancels_the_request(api) -> None:
    slow = api.model("slow")
    waiting = asyncio.ensure_future(
        _await(slow.async_infer(inputs={"SECONDS": np.array([600], np.float32)})))
    await asyncio.sleep(0)  # let the task start awaiting
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # One instance: this runs only once the cancelled request has stopped.
    response = await slow.async_infer(inputs={"SECONDS": np.array([0], np.float32)})
    assert response.outputs["SLEPT"].to_numpy()[0] == 0


async def _await(stream):
    return await stream


# -- statistics -------------------------------------------------------------------------------

def test_statistics_count_the_inferences(api) -> None:
    before = api.model("add_sub").statistics()
    assert len(before) == 1 and isinstance(before[0], ModelStatistics)
    add_sub(api)
    add_sub(api)
    after = api.model("add_sub").statistics()[0]
    assert (after.name, after.version) == ("add_sub", 1)
    assert after.inference_count == before[0].inference_count + 2
    assert after.success.count == before[0].success.count + 2
    assert after.success.ns > before[0].success.ns
    assert after.execution_count >= before[0].execution_count + 1
    assert after.last_inference_ms > 0
    everything = {(s.name, s.version): s for s in api.statistics()}
    assert everything[("add_sub", 1)].inference_count >= after.inference_count
    assert api.statistics("add_sub")[0].inference_count >= after.inference_count


def test_statistics_of_an_unknown_model_or_version_raise(api) -> None:
    # As Triton 2.51 answers (checked against it): INVALID_ARG, not NOT_FOUND
    with pytest.raises(InvalidArgumentError,
                       match="requested model 'no_such_model' is not available"):
        api.model("no_such_model").statistics()
    with pytest.raises(InvalidArgumentError, match="requested model version is not "
                                                   "available for model 'add_sub'"):
        api.model("add_sub", 9).statistics()


# -- model control (EXPLICIT mode) -------------------------------------------------------------

def test_unload_and_load_a_model(api) -> None:
    spare = api.model("spare")
    try:
        api.unload("spare")
        assert spare.ready() is False
        with pytest.raises(TritonError) as failed:
            spare.infer(inputs={"INPUT0": A, "INPUT1": B}).result()
        assert type(failed.value).__name__ in ("UnavailableError", "NotFoundError")
        states = {e.name: e.state for e in api.repository_index() if e.name == "spare"}
        # Triton returns from an unload before the version is gone
        assert states["spare"] in (ModelState.UNAVAILABLE, ModelState.UNLOADING)
        loaded = api.load("spare")
        assert loaded.name == "spare"
        assert spare.ready() is True
        response = spare.infer(inputs={"INPUT0": A, "INPUT1": B}).result()
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), A + B)
    finally:
        api.load("spare")


def test_load_with_a_config_override(api) -> None:
    config = api.model("spare").config()
    config["max_batch_size"] = 2
    try:
        api.load("spare", config=json.dumps(config))
        assert api.model("spare").config()["max_batch_size"] == 2
        assert api.model("spare").infer(inputs={"INPUT0": A, "INPUT1": B}).result().error is None
    finally:
        config["max_batch_size"] = 8
        api.load("spare", config=config)
    assert api.model("spare").config()["max_batch_size"] == 8


def test_loading_an_unknown_model_fails_with_its_reason(api) -> None:
    with pytest.raises(TritonError, match="no_such_model"):
        api.load("no_such_model")
    assert api.model("add_sub").ready() is True


# -- typed errors -----------------------------------------------------------------------------

def test_an_unknown_model_raises_not_found(api) -> None:
    with pytest.raises(NotFoundError, match="no_such_model"):
        api.model("no_such_model").infer(inputs={"INPUT0": A}).result()


async def test_an_unknown_model_raises_not_found_when_awaited(api) -> None:
    with pytest.raises(NotFoundError):
        await api.model("no_such_model").async_infer(inputs={"INPUT0": A})


def test_a_missing_input_raises_invalid_argument(api) -> None:
    with pytest.raises(InvalidArgumentError, match="INPUT1"):
        api.model("add_sub").infer(inputs={"INPUT0": A}).result()


def test_a_wrong_shape_raises_invalid_argument(api) -> None:
    wrong = np.zeros((1, 5), np.float32)
    with pytest.raises(InvalidArgumentError):
        api.model("add_sub").infer(inputs={"INPUT0": wrong, "INPUT1": wrong}).result()


def test_a_wrong_datatype_raises_invalid_argument(api) -> None:
    wrong = np.zeros((1, 4), np.int32)
    with pytest.raises(InvalidArgumentError):
        api.model("add_sub").infer(inputs={"INPUT0": wrong, "INPUT1": wrong}).result()


def test_the_server_keeps_serving_after_errors(api) -> None:
    for _ in range(3):
        with pytest.raises(TritonError):
            api.model("add_sub").infer(inputs={"INPUT0": A}).result()
    np.testing.assert_array_equal(add_sub(api).outputs["OUTPUT0"].to_numpy(), A + B)


# -- async twins (lifecycle.ServerAPI) ---------------------------------------------------------

async def test_async_twins_answer_as_the_blocking_calls(api) -> None:
    assert await api.alive() is True
    assert await api.aready() is True
    assert await api.ametadata() == api.metadata()
    handles = await api.amodels()
    assert handles[("add_sub", 1)] == api.models()[("add_sub", 1)]
    assert isinstance(handles[("add_sub", 1)], Model)
    assert ([e.name for e in await api.arepository_index(ready_only=True)]
            == [e.name for e in api.repository_index(ready_only=True)])
    stats = await api.astatistics("add_sub")
    assert isinstance(stats[0], ModelStatistics) and stats[0].name == "add_sub"
    assert [(s.name, s.version) for s in await api.astatistics()] == [
        (s.name, s.version) for s in api.statistics()]
    model = api.model("add_sub")
    assert await model.aready() is True
    assert await api.model("add_sub", 7).aready() is False
    assert await model.ametadata() == model.metadata()
    assert await model.aconfig() == model.config()
    assert (await model.aconfig_proto()).max_batch_size == 8
    assert (await model.astatistics())[0].version == 1
    with pytest.raises(InvalidArgumentError, match="no_such_model"):
        await api.model("no_such_model").astatistics()


async def test_async_unload_and_load(api) -> None:
    try:
        await api.aunload("spare")
        assert await api.model("spare").aready() is False
        loaded = await api.aload("spare")
        assert isinstance(loaded, Model) and loaded == api.model("spare")
        assert await loaded.aready() is True
        response = await loaded.async_infer(inputs={"INPUT0": A, "INPUT1": B})
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), A + B)
        with pytest.raises(TritonError, match="no_such_model"):
            await api.aload("no_such_model")
    finally:
        api.load("spare")


# -- log and trace settings (Triton's logging and trace extensions) --------------------------

LOG_KEYS = {"log_file", "log_info", "log_warning", "log_error", "log_verbose_level",
            "log_format"}


async def test_log_settings_are_read_and_changed(api) -> None:
    before = api.log_settings()
    assert LOG_KEYS <= set(before)
    assert isinstance(before["log_info"], bool)
    assert isinstance(before["log_verbose_level"], int)
    assert await api.alog_settings() == before
    try:
        changed = api.update_log_settings(log_verbose_level=1, log_warning=False)
        assert (changed["log_verbose_level"], changed["log_warning"]) == (1, False)
        assert api.log_settings() == changed
        again = await api.aupdate_log_settings(log_verbose_level=2)
        assert again["log_verbose_level"] == 2 and again["log_warning"] is False
    finally:
        api.update_log_settings(log_verbose_level=before["log_verbose_level"],
                                log_warning=before["log_warning"])
    assert api.log_settings() == before


def test_a_bad_log_setting_raises_and_changes_nothing_after_it(api) -> None:
    before = api.log_settings()
    with pytest.raises(TritonError):
        api.update_log_settings(log_format="no_such_format")
    assert api.log_settings()["log_format"] == before["log_format"]
    assert add_sub(api).error is None


async def test_trace_settings_are_read_and_changed_per_model(api) -> None:
    settings = api.trace_settings()
    assert {"trace_level", "trace_rate", "trace_count", "log_frequency"} <= set(settings)
    assert isinstance(settings["trace_level"], list)
    assert isinstance(settings["trace_rate"], str)
    assert await api.atrace_settings() == settings
    try:
        # numbers as the in-process API takes them; a string as the protocols carry them
        own = api.update_trace_settings("add_sub", trace_rate=7, log_frequency="3")
        assert (own["trace_rate"], own["log_frequency"]) == ("7", "3")
        assert api.trace_settings("add_sub")["trace_rate"] == "7"
        assert (await api.atrace_settings("add_sub"))["log_frequency"] == "3"
        assert api.trace_settings()["trace_rate"] == settings["trace_rate"]  # global kept
        cleared = await api.aupdate_trace_settings("add_sub", trace_rate=None)
        assert cleared["trace_rate"] == settings["trace_rate"]  # back to the global one
        assert cleared["log_frequency"] == "3"
    finally:
        api.update_trace_settings("add_sub", trace_rate=None, log_frequency=None)
    assert api.trace_settings("add_sub")["log_frequency"] == settings["log_frequency"]


def test_a_bad_trace_setting_raises_invalid_argument(api) -> None:
    with pytest.raises(InvalidArgumentError):
        api.update_trace_settings("add_sub", trace_rate="not_a_number")
    assert api.trace_settings("add_sub")["trace_rate"] == api.trace_settings()["trace_rate"]
    assert add_sub(api).error is None
