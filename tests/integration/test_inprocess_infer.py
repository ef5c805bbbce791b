"""The in-process API end to end: real Python models, sync and async inference."""

from __future__ import annotations

import asyncio
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import infercore
from infercore import (
    CancelledError,
    InvalidArgumentError,
    NotFoundError,
    Options,
    Server,
    Tensor,
    UnavailableError,
)


def _pair(batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
    b = np.full((batch, 4), 2.0, dtype=np.float32)
    return a, b


def test_sync_infer_returns_sum_and_difference(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        a, b = _pair(3)
        responses = list(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
        assert len(responses) == 1
        response = responses[0]
        assert response.final and response.error is None
        assert response.model == "add_sub" and response.model_version == 1
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + b)
        np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT1"]), a - b)


def test_result_and_request_options_pass_through(add_sub_repo):
    with Server(Options(model_repository=[add_sub_repo.path])) as server:
        a, b = _pair()
        response = server.model("add_sub").infer(
            inputs={"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"], request_id="r-7"
        ).result(timeout=10)
        assert response.request_id == "r-7"
        assert list(response.outputs) == ["OUTPUT1"]


def test_list_inputs_take_the_configured_datatype(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        response = server.model("add_sub").infer(
            inputs={"INPUT0": [[1, 2, 3, 4]], "INPUT1": [[1, 1, 1, 1]]}
        ).result()
        out = response.outputs["OUTPUT0"]
        assert out.data_type is infercore.DataType.FP32
        assert out.to_numpy().tolist() == [[2, 3, 4, 5]]


async def test_async_infer_await_and_async_for(add_sub_repo):
    async with Server(model_repository=add_sub_repo.path) as server:
        model = server.model("add_sub")
        a, b = _pair(2)
        response = await model.async_infer(inputs={"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + b)
        seen = [r async for r in model.infer(inputs={"INPUT0": a, "INPUT1": b})]
        assert len(seen) == 1 and seen[0].final
        many = await asyncio.gather(
            *(model.async_infer(inputs={"INPUT0": a * i, "INPUT1": b}) for i in range(20))
        )
        for i, r in enumerate(many):
            np.testing.assert_array_equal(r.outputs["OUTPUT1"].to_numpy(), a * i - b)


def test_concurrent_callers_on_two_instances(repo, add_sub_source):
    config, model_py = add_sub_source
    repo.add_model("add_sub", config=config.replace("count: 1", "count: 2"), model_py=model_py)
    with Server(model_repository=repo.path) as server:
        names = {t.name for t in threading.enumerate()}
        assert {"infercore-add_sub-add_sub_0_0", "infercore-add_sub-add_sub_0_1"} <= names
        errors: list[BaseException] = []

        def call(i: int) -> None:
            try:
                a, b = _pair()
                for _ in range(25):
                    r = server.model("add_sub").infer(inputs={"INPUT0": a + i, "INPUT1": b})
                    np.testing.assert_array_equal(r.result().outputs["OUTPUT0"].to_numpy(),
                                                  a + i + b)
            except BaseException as exc:  # collected and re-raised on the main thread
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        stats = server.model("add_sub").statistics()[0]
        assert stats.inference_count == 100 and stats.execution_count == 100


ALL_TYPES = {
    "BOOL": np.array([True, False, True]),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-3, 0, 3], dtype=np.int16),
    "INT32": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64),
    "UINT8": np.array([0, 1, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 1, 2**64 - 1], dtype=np.uint64),
    "FP16": np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    "FP32": np.array([0.25, -1.5, 3.0e38], dtype=np.float32),
    "FP64": np.array([1e-300, -2.0, 1e300]),
    "BF16": np.array([1.0, -2.0, 0.5], dtype=ml_dtypes.bfloat16),
    "BYTES": np.array([b"a", b"", "\u00e9t\u00e9".encode()], dtype=np.object_),
}


def _identity_repo(repo):
    inputs = ",\n".join(
        f'{{ name: "IN_{t}", data_type: TYPE_{"STRING" if t == "BYTES" else t}, '
        f"dims: [ -1 ], optional: true }}"
        for t in ALL_TYPES
    )
    outputs = ",\n".join(
        f'{{ name: "OUT_{t}", data_type: TYPE_{"STRING" if t == "BYTES" else t}, dims: [ -1 ] }}'
        for t in ALL_TYPES
    )
    repo.add_model(
        "identity_all",
        config=f'name: "identity_all"\nbackend: "python"\nmax_batch_size: 0\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n",
        model_py="""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    outs = [pb_utils.Tensor("OUT_" + t.name()[3:], t.as_numpy())
                            for t in request.inputs()]
                    responses.append(pb_utils.InferenceResponse(output_tensors=outs))
                return responses
        """,
    )


@pytest.mark.parametrize("datatype", list(ALL_TYPES))
def test_every_datatype_round_trips_sync_and_async(repo, datatype):
    _identity_repo(repo)
    value = ALL_TYPES[datatype]
    with Server(model_repository=repo.path) as server:
        model = server.model("identity_all")
        response = model.infer(inputs={f"IN_{datatype}": value}).result()
        out = response.outputs[f"OUT_{datatype}"]
        assert out.data_type.value == datatype
        if datatype == "BYTES":
            assert out.to_bytes_array().tolist() == value.tolist()
        else:
            assert out.to_numpy().dtype == value.dtype
            np.testing.assert_array_equal(out.to_numpy(), value)

        async def run():
            return await model.async_infer(inputs={f"IN_{datatype}": Tensor.from_object(value)})

        again = asyncio.run(run()).outputs[f"OUT_{datatype}"]
        assert again.shape == value.shape


def test_string_inputs_become_bytes(repo):
    _identity_repo(repo)
    with Server(model_repository=repo.path) as server:
        response = server.model("identity_all").infer(inputs={"IN_BYTES": ["x", "yz"]}).result()
        assert response.outputs["OUT_BYTES"].to_string_array().tolist() == ["x", "yz"]


# -- bad input: clear errors, nothing else affected ----------------------------------------

@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ({"INPUT0": np.zeros((1, 4), np.float32)}, None,
         "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], "
         "but missing required input(s) ['INPUT1']. Please provide all required input(s)."),
        ({"INPUT0": np.zeros((1, 4), np.float32), "INPUT1": np.zeros((1, 4), np.float32),
          "EXTRA": np.zeros((1, 4), np.float32)}, None,
         "expected 2 inputs but got 3 inputs for model 'add_sub'. Got input(s) "
         "['EXTRA','INPUT1','INPUT0'], but missing required input(s) ]."),
        ({"INPUT0": np.zeros((1, 4), np.float32), "EXTRA": np.zeros((1, 4), np.float32)},
         None, "unexpected inference input 'EXTRA' for model 'add_sub'"),
        ({"INPUT0": np.zeros((1, 4), np.float64), "INPUT1": np.zeros((1, 4), np.float32)}, None,
         "inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'"),
        ({"INPUT0": np.zeros((1, 5), np.float32), "INPUT1": np.zeros((1, 5), np.float32)}, None,
         "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [-1,4], got [1,5]."),
        ({"INPUT0": np.zeros((9, 4), np.float32), "INPUT1": np.zeros((9, 4), np.float32)}, None,
         "inference request batch-size must be <= 8 for 'add_sub'"),
        ({"INPUT0": np.zeros((1, 4), np.float32), "INPUT1": np.zeros((1, 4), np.float32)},
         ["NOPE"], "unexpected inference output 'NOPE' for model 'add_sub'"),
    ],
)
def test_invalid_requests_raise_and_server_keeps_serving(add_sub_repo, inputs, outputs, message):
    with Server(model_repository=add_sub_repo.path) as server:
        model = server.model("add_sub")
        with pytest.raises(InvalidArgumentError) as caught:
            model.infer(inputs=inputs, outputs=outputs)
        assert message in str(caught.value)
        a, b = _pair()
        assert model.infer(inputs={"INPUT0": a, "INPUT1": b}).result().error is None
        stats = model.statistics()[0]
        # refused before the model: in no statistics, as in Triton
        assert stats.fail.count == 0 and stats.success.count == 1


def test_unknown_model_and_version(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        with pytest.raises(NotFoundError, match="Request for unknown model: 'nope' is not found"):
            server.model("nope").infer(inputs={})
        with pytest.raises(NotFoundError, match="'add_sub' version 5 is not found"):
            server.model("add_sub", 5).infer(inputs={})
        assert not server.model("nope").ready()
        assert server.model("add_sub").ready()


def test_stopped_server_refuses_requests(add_sub_repo):
    server = Server(model_repository=add_sub_repo.path).start()
    model = server.model("add_sub")
    server.stop()
    assert not server.live()
    with pytest.raises(UnavailableError):
        model.infer(inputs={})


# -- cancellation ---------------------------------------------------------------------------

WAIT_FOR_CANCEL_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils
import sync_point


class TritonPythonModel:
    def execute(self, requests):
        sync_point.executing.set()
        responses = []
        for request in requests:
            deadline = time.monotonic() + 10
            while not request.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.001)
            if request.is_cancelled():
                error = pb_utils.TritonError("cancelled by the client",
                                             pb_utils.TritonError.CANCELLED)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""

WAIT_CONFIG = """
name: "waiter"
backend: "python"
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


@pytest.fixture
def sync_point(tmp_path, monkeypatch):
    """A module both the test and the model import: its event says 'execute has begun'."""
    (tmp_path / "sync_point.py").write_text("import threading\nexecuting = threading.Event()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sync_point", raising=False)
    import sync_point

    yield sync_point
    sys.modules.pop("sync_point", None)


def test_cancel_reaches_executing_and_queued_requests(repo, sync_point):
    repo.add_model("waiter", config=WAIT_CONFIG, model_py=WAIT_FOR_CANCEL_PY)
    with Server(model_repository=repo.path) as server:
        model = server.model("waiter")
        x = np.array([1], dtype=np.int32)
        running = model.infer(inputs={"X": x})
        queued = model.infer(inputs={"X": x})
        assert sync_point.executing.wait(10)
        queued.cancel()
        running.cancel()
        with pytest.raises(CancelledError):
            running.result(timeout=10)
        with pytest.raises(CancelledError, match="cancelled"):
            queued.result(timeout=10)
        stats = model.statistics()[0]
        assert stats.execution_count == 1  # the queued request never ran


async def test_cancelling_the_awaiting_task_cancels_the_request(repo, sync_point):
    repo.add_model("waiter", config=WAIT_CONFIG, model_py=WAIT_FOR_CANCEL_PY)
    async with Server(model_repository=repo.path) as server:
        stream = server.model("waiter").infer(inputs={"X": np.array([1], dtype=np.int32)})
        task = asyncio.ensure_future(_await(stream))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.request.is_cancelled()
        with pytest.raises(CancelledError):
            await asyncio.to_thread(stream.result, 10)


async def _await(stream):
    return await stream
