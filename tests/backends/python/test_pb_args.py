"""pb_utils arguments converted as Triton's pybind11 bindings convert them (pb_utils/args.py),
the texts of the refusals, and ``exec(decoupled=True)`` returning once the first response
is in. The outcomes Triton gives are recorded in the qa_python_backend_args suite; these
tests check what the wire does not show (texts, values kept, the event loop left free).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from infercore.backends.python.pb_utils.args import as_array, as_int, as_list, as_str, refused
from infercore.backends.python.pb_utils.request import _Scope, use_scope
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream


def test_refusals_open_as_pybind11_does():
    text = str(refused("InferenceRequest.__init__", "inputs", None, "a list"))
    assert text == ("__init__(): incompatible constructor arguments. InferenceRequest's "
                    "'inputs' must be a list, not NoneType")
    text = str(refused("log_info", "message", 1, "str"))
    assert text == "log_info(): incompatible function arguments. 'message' must be str, not int"


def test_conversions_take_what_pybind11_takes():
    assert as_str(b"name", "f", "a") == "name"
    assert type(as_str(np.str_("name"), "f", "a")) is str
    assert as_int(True, "f", "a") == 1 and as_int(np.int64(3), "f", "a") == 3
    assert as_list(("a", "b"), "f", "a") == ["a", "b"]
    array = np.zeros(2)
    assert as_array(array, "f", "a") is array
    for convert, value in [(as_str, None), (as_str, 1), (as_int, 1.0), (as_int, "1"),
                           (as_int, None), (as_list, "ab"), (as_list, None),
                           (as_array, [1, 2]), (as_array, None)]:
        with pytest.raises(TypeError, match="incompatible function arguments"):
            convert(value, "f", "a")


def test_bls_request_keeps_converted_values():
    request = pb_utils.InferenceRequest(
        model_name=b"m", inputs=(), requested_output_names=(b"A", "B"), request_id=b"r",
        model_version=np.int32(2), flags=True)
    assert request.request_id() == "r"
    assert request.requested_output_names() == {"A", "B"}
    assert request.flags() == 1
    with pytest.raises(pb_utils.TritonModelException,
                       match="^Input tensor for request with id 'r' and model name 'm' should"):
        pb_utils.InferenceRequest(model_name="m", inputs=[None], requested_output_names=[],
                                  request_id="r")
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID must be"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[],
                                  correlation_id=b"seq")
    with pytest.raises(TypeError, match="'correlation_id' must be int or str, not NoneType"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[],
                                  correlation_id=None)


def test_response_and_tensor_arguments():
    with pytest.raises(TypeError, match="'output_tensors' must be a list, not NoneType"):
        pb_utils.InferenceResponse(output_tensors=None)
    with pytest.raises(pb_utils.TritonModelException,
                       match="^Output tensor for inference response should not be empty.$"):
        pb_utils.InferenceResponse([None])
    tensor = pb_utils.Tensor(b"OUT", np.zeros(1, np.int32))
    assert tensor.name() == "OUT" and type(tensor.name()) is str
    assert len(pb_utils.InferenceResponse((tensor,)).output_tensors()) == 1
    with pytest.raises(TypeError, match="'numpy_array' must be a numpy.ndarray, not list"):
        pb_utils.Tensor("OUT", [1, 2])
    with pytest.raises(TypeError):  # the array is converted before the name is checked
        pb_utils.Tensor("", None)
    with pytest.raises(pb_utils.TritonModelException, match="empty string"):
        pb_utils.Tensor("", np.zeros(1))


def test_logger_takes_a_str_and_a_level(caplog):
    caplog.set_level("INFO", logger="infercore.model")
    pb_utils.Logger.log_info(b"as bytes")
    assert caplog.records[-1].getMessage() == "as bytes"
    with pytest.raises(TypeError, match="'level' must be a pb_utils.Logger level, not int"):
        pb_utils.Logger.log("text", 1)
    with pytest.raises(TypeError, match="^log_warn\\(\\): .*'message' must be str, not NoneType"):
        pb_utils.Logger.log_warn(None)


def test_async_exec_decoupled_waits_for_the_first_response_off_the_loop(tmp_path: Path):
    """As in Triton's QA test async_execute: a second call, started by the event loop while
    the first waits, is needed before either is answered. The loop must be free while the
    first call waits for its first response (Triton's exec returns once it is in); were the
    wait left to the ``for`` on the loop, only a timer thread would answer, after 10 s."""
    streams: list[ResponseStream] = []
    answered: list[ResponseStream] = []
    senders: list[str] = []
    lock = threading.Lock()

    def answer(by: str) -> None:
        with lock:
            waiting = [stream for stream in streams if stream not in answered]
            answered.extend(waiting)
            if waiting:
                senders.append(by)
        for stream in waiting:
            stream.request.sender.send({}, final=False)
            stream.request.sender.send({}, final=True)

    def infer(core: InferRequest) -> ResponseStream:
        stream = ResponseStream(core, raise_on_error=False)
        core.sender = ResponseSender(core, stream, core.model_name, 1)
        with lock:
            streams.append(stream)
            both = len(streams) == 2
        if both:
            threading.Thread(target=answer, args=("both",)).start()
        return stream

    async def one_call() -> list[int]:
        request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
        responses = await asyncio.wait_for(request.async_exec(decoupled=True), 30)
        return [len(response.output_tensors()) for response in responses]

    async def main() -> list[list[int]]:
        loop = asyncio.get_running_loop()
        second: asyncio.Future[asyncio.Task[list[int]]] = loop.create_future()
        loop.call_later(0.05, lambda: second.set_result(loop.create_task(one_call())))
        first = await one_call()
        return [first, await (await second)]

    fallback = threading.Timer(10, answer, ("timer",))
    fallback.start()
    try:
        with use_scope(_Scope("caller", 1, tmp_path, "caller_0", infer)):
            assert asyncio.run(main()) == [[0, 0], [0, 0]]
    finally:
        fallback.cancel()
    assert senders == ["both"]
