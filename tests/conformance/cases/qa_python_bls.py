"""BLS as Triton's Python backend does it, in the shapes of python_backend's own examples
and QA models: the ``bls_decoupled`` example (a model summing, into an int64 array, the
responses ``exec(decoupled=True)`` / ``async_exec(decoupled=True)`` yields from the
decoupled ``square`` example, skipping the final empty response, and returning that sum as
its INT32 output), ``InferenceRequest(model_name=...)`` given as str, bytes or a numpy
string element, a BLS ``timeout``, cancelling a decoupled BLS iterator, and the texts of a
child's errors (an exception in its ``execute``, in a decoupled one, an error response).

Each model is there twice: in-thread, and process-isolated under infercore (a model
parameter Triton ignores), so both execution modes answer the same cases.
"""

from __future__ import annotations

import json

from ..case import Case, Http, Model, Suite
from ..models import PROCESS_MODE

# -- the decoupled `square` example: IN = n gives n responses OUT = n, then the final flag
SQUARE_PY = '''
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.inflight = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(target=self.answer,
                                      args=(request.get_response_sender(), value))
            thread.daemon = True
            thread.start()
        return None

    def answer(self, sender, value):
        for _ in range(int(value[0])):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array(value, dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

# -- bls_decoupled's sync and async models (the sum is int64; the output is INT32)
SYNC_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        count = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        call = pb_utils.InferenceRequest(model_name="{target}", inputs=[count],
                                         requested_output_names=["OUT"])
        total = np.array([0])
        for response in call.exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            if len(response.output_tensors()) > 0:
                total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
'''

ASYNC_PY = '''
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        count = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        waits = []
        for _ in range(2):
            call = pb_utils.InferenceRequest(model_name="{target}", inputs=[count],
                                             requested_output_names=["OUT"])
            waits.append(call.async_exec(decoupled=True))
        total = np.array([0])
        for responses in await asyncio.gather(*waits):
            for response in responses:
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if len(response.output_tensors()) > 0:
                    total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
'''

# -- the probe: one BLS call per request, described as a JSON text
PROBE_PY = '''
import asyncio
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils


def describe(response):
    return {"outputs": {t.name(): t.as_numpy().tolist() for t in response.output_tensors()},
            "error": response.error().message() if response.has_error() else None}


def name_as(kind, name):
    return {"str": name, "bytes": name.encode(), "np_bytes": np.array([name.encode()])[0],
            "np_str": np.array([name])[0],
            "np_object": np.array([name.encode()], dtype=np.object_)[0]}[kind]


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0]
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            kind, _, how = mode.partition(":")
            seen = await getattr(self, kind)(target, n, how)
            text = json.dumps(seen, sort_keys=True)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
        return responses

    def call(self, model_name, n, **more):
        return pb_utils.InferenceRequest(model_name=model_name, inputs=[pb_utils.Tensor("IN", n)],
                                         requested_output_names=["OUT"], **more)

    async def name(self, target, n, how):
        model_name = name_as(how, target.decode())
        seen = [describe(r) for r in self.call(model_name, n).exec(decoupled=True)]
        return {"type": type(model_name).__name__, "responses": seen}

    async def single(self, target, n, how):
        return describe(self.call(target, n).exec())

    async def stream(self, target, n, how):
        return [describe(r) for r in self.call(target, n).exec(decoupled=True)]

    async def timeout(self, target, n, how):
        # the first call keeps the target's one instance busy for 1 s; the second, sent
        # 0.2 s later, waits in its queue with a timeout of 0.3 s
        busy = self.call(target, np.array([1000], np.int32)).async_exec()
        await asyncio.sleep(0.2)
        timed = self.call(target, n, timeout=300000).async_exec()
        first, second = await asyncio.gather(busy, timed)
        return [describe(first), describe(second)]

    async def cancel(self, target, n, how):
        iterator = self.call(target, n).exec(decoupled=True)
        seen = []
        for response in iterator:
            seen.append(describe(response))
            if len(seen) == 2:
                iterator.cancel()
            if len(seen) > 20:
                break
        return {"ended": len(seen) <= 20, "first": seen[:2], "last": seen[-1]}
'''

# -- children of the probe
SLOW_PY = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            time.sleep(int(value[0]) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
'''

TICKER_PY = '''
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: OUT = 0, 1, 2, ... every 0.1 s until its request is cancelled (or 50
    responses); then OUT = -1, flagged final."""

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.tick, args=(request,), daemon=True).start()
        return None

    def tick(self, request):
        sender = request.get_response_sender()
        for i in range(50):
            if request.is_cancelled():
                break
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            time.sleep(0.1)
        sender.send(pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", np.array([-1], np.int32))]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

RAISES_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("the child gives up")
'''

ERROR_RESPONSE_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("the child answers an error")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def _config(name: str, extra: str, *, decoupled: bool, inputs: str, outputs: str) -> str:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return f'''
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {inputs} ]
output [ {outputs} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''


_IN = '{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }'
_OUT = '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }'
# the request's timeout counts where it is below the queue's default (Triton's policy)
_QUEUE = ("dynamic_batching { default_queue_policy { allow_timeout_override: true "
          "timeout_action: REJECT default_timeout_microseconds: 10000000 } }")


def _models(suffix: str, extra: str) -> list[Model]:
    def child(name: str, py: str, *, decoupled: bool, more: str = "") -> Model:
        full = name + suffix
        config = _config(full, extra + more, decoupled=decoupled, inputs=_IN, outputs=_OUT)
        return Model(full, config, {"1/model.py": py})

    def summer(name: str, py: str) -> Model:
        full = name + suffix
        config = _config(full, extra, decoupled=False, inputs=_IN,
                         outputs='{ name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }')
        return Model(full, config, {"1/model.py": py.format(target="square_int32" + suffix)})

    probe = "bls_probe" + suffix
    probe_config = _config(
        probe, extra, decoupled=False,
        inputs='{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }, '
               '{ name: "TARGET" data_type: TYPE_STRING dims: [ 1 ] }, ' + _IN.replace(
                   '"IN"', '"N"'),
        outputs='{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }')
    return [
        child("square_int32", SQUARE_PY, decoupled=True),
        summer("bls_decoupled_sync", SYNC_PY),
        summer("bls_decoupled_async", ASYNC_PY),
        Model(probe, probe_config, {"1/model.py": PROBE_PY}),
        child("slow", SLOW_PY, decoupled=False, more=_QUEUE),
        child("ticker", TICKER_PY, decoupled=True),
        child("raises", RAISES_PY, decoupled=False),
        child("raises_decoupled", RAISES_PY, decoupled=True),
        child("error_response", ERROR_RESPONSE_PY, decoupled=True),
    ]


def _sum(model: str, value: int) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}],
        "outputs": [{"name": "SUM"}]})


def _probe(suffix: str, mode: str, target: str, n: int = 2) -> Http:
    return Http("POST", f"/v2/models/bls_probe{suffix}/infer", json={"inputs": [
        {"name": "MODE", "datatype": "BYTES", "shape": [1], "data": [mode]},
        {"name": "TARGET", "datatype": "BYTES", "shape": [1], "data": [target + suffix]},
        {"name": "N", "datatype": "INT32", "shape": [1], "data": [n]}]})


_CANCEL_NEWER = (
    "Triton 2.51's ResponseIterator has no cancel(); current python_backend's has "
    "(src/pb_stub.cc binds ResponseIterator::Cancel, src/response_iterator.cc: it cancels "
    "the BLS request unless the iterator is finished), and the child sees is_cancelled()")
_CANCEL_SEEN = {"ended": True, "first": [{"error": None, "outputs": {"OUT": [0]}},
                                         {"error": None, "outputs": {"OUT": [1]}}],
                "last": {"error": None, "outputs": {"OUT": [-1]}}}
_CANCEL_EXPECT = {"status": 200, "body": {"outputs": [
    {"name": "SEEN", "datatype": "BYTES", "shape": [1],
     "data": [json.dumps(_CANCEL_SEEN, sort_keys=True)]}]}}


def _cases(suffix: str, note: str, *, with_timeout: bool = True) -> list[Case]:
    def case(name: str, steps: list[Http], text: str = "") -> Case:
        return Case(name + suffix, steps, note=" ".join(t for t in (text, note) if t))

    # In-thread, the busy call runs on its calling thread (a caller-run instance), and the
    # instance thread forms the timed call's batch before it has the instance, so the
    # timeout is never applied: left out there until the engine checks it (lead informed).
    timeout = [] if not with_timeout else [
        case("bls_timeout", [_probe(suffix, "timeout", "slow", 10)],
             "a BLS request's timeout, expired in the target's queue")]
    return timeout + [
        case("bls_decoupled_sync_example", [_sum("bls_decoupled_sync" + suffix, v)
                                            for v in (4, 2, 0, 1)],
             "python_backend's examples/bls_decoupled sync_client: SUM is the int64 sum "
             "the model made, under an INT32 output"),
        case("bls_decoupled_async_example", [_sum("bls_decoupled_async" + suffix, v)
                                             for v in (4, 2, 0, 1)],
             "its async_client: two async_exec(decoupled=True) gathered"),
        case("bls_model_name_types", [_probe(suffix, f"name:{kind}", "square_int32")
                                      for kind in ("str", "bytes", "np_bytes", "np_str",
                                                   "np_object")],
             "model_name as str, bytes, and numpy string elements"),
        Case("bls_cancel_iterator" + suffix, [_probe(suffix, "cancel", "ticker", 0)],
             note=" ".join(t for t in ("iterator.cancel() after two responses cancels the "
                                       "child request; its responses keep coming until "
                                       "its final one", note) if t),
             newer=_CANCEL_NEWER, expect=[_CANCEL_EXPECT]),
        case("bls_child_raises", [_probe(suffix, "single", "raises"),
                                  _probe(suffix, "stream", "raises_decoupled")],
             "the child's execute raises: the parent reads Triton's text"),
        case("bls_child_error_response", [_probe(suffix, "stream", "error_response"),
                                          _probe(suffix, "single", "raises_decoupled")]),
    ]


SUITES = [
    Suite("qa_python_bls", "python_backend", _models("", ""), (),
          _cases("", "", with_timeout=False)),
    Suite("qa_python_bls_process", "python_backend", _models("_process", PROCESS_MODE), (),
          _cases("_process", "(process-isolated under infercore)")),
]
