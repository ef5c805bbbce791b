"""Python-backend semantics that Triton's own QA tests (qa/L0_backend_python) rely on,
found by running those tests against both servers: what a BLS call with
``exec(decoupled=True)`` yields, responses a model sends after ``execute`` returned (from
its threads, or from tasks its ``async def execute`` started), a decoupled
``async def execute`` left running while the instance takes the next request, modules
imported by name inside ``execute`` (``unittest.main("model")``), and the types some
pb_utils calls give or raise.

Each probe model reports what it saw as a JSON text output, so one answer shows it all.
"""

from __future__ import annotations

import numpy as np

from ..case import Case, GrpcStream, Http, Model, Suite, raw_tensor
from ..models import python_model

# -- decoupled targets of the BLS probe ------------------------------------------------------
REPEAT_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """N responses of OUT = i, then the final flag: alone ({bare}) or on the last one."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            for i in range(n):
                last = i == n - 1 and not {bare}
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]), flags=flags)
            if {bare} or n == 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

# (A decoupled target that sends an error response and then the final flag is left out:
# Triton 2.51's BLS iterator never ends on it.)
FAILS_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("the target fails"))
                for _ in requests]
'''


def _target(name: str, model_py: str, decoupled: bool = True) -> Model:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, model_py)


# -- the BLS probe ---------------------------------------------------------------------------
BLS_PROBE_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def describe(response):
    return {"outputs": [t.name() for t in response.output_tensors()],
            "values": [t.as_numpy().tolist() for t in response.output_tensors()],
            "error": response.error().message() if response.has_error() else None}


class TritonPythonModel:
    """Calls TARGET with IN = N; MODE "decoupled" lists every response the iterator of
    exec(decoupled=True) yields, MODE "single" describes what exec() returns;
    "no_input" is "decoupled" without the input."""

    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0].decode()
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            inputs = [] if mode == "no_input" else [pb_utils.Tensor("IN", n)]
            call = pb_utils.InferenceRequest(model_name=target, inputs=inputs,
                                             requested_output_names=["OUT"])
            if mode != "single":
                seen = [describe(r) for r in call.exec(decoupled=True)]
            else:
                seen = describe(call.exec())
            text = json.dumps(seen, sort_keys=True)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
        return responses
'''

BLS_PROBE_CONFIG = '''
name: "bls_probe"
backend: "python"
max_batch_size: 0
input [ { name: "TARGET" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''


def _bls(target: str, n: int, mode: str = "decoupled") -> Http:
    return Http("POST", "/v2/models/bls_probe/infer", json={"inputs": [
        {"name": "TARGET", "datatype": "BYTES", "shape": [1], "data": [target]},
        {"name": "MODE", "datatype": "BYTES", "shape": [1], "data": [mode]},
        {"name": "N", "datatype": "INT32", "shape": [1], "data": [n]}]})


# -- pb_utils values -----------------------------------------------------------------------
API_PROBE_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def outcome(make):
    try:
        made = make()
    except Exception as exc:  # the type only: pybind's texts list every signature
        return type(exc).__name__
    return "accepted" if made is not None else "None"


class TritonPythonModel:
    """Reports what some pb_utils calls give: the type of requested_output_names() (of the
    request received and of a BLS request), whether InferenceResponse takes a str error,
    and how a BLS response iterator behaves once exhausted."""

    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(model_name="repeat_bare",
                                            inputs=[pb_utils.Tensor("IN", np.array([2], np.int32))],
                                            requested_output_names=["OUT"])
            iterator = bls.exec(decoupled=True)
            first = len(list(iterator))
            try:
                next(iterator)
                after = "a response"
            except StopIteration:
                after = "StopIteration"
            again = len(list(iterator))
            seen = {
                "received_names": [type(request.requested_output_names()).__name__,
                                   sorted(request.requested_output_names())],
                "bls_names": type(bls.requested_output_names()).__name__,
                "response_error_str": outcome(lambda: pb_utils.InferenceResponse(error="text")),
                "response_outputs_str": outcome(lambda: pb_utils.InferenceResponse("text")),
                "response_outputs_ints": outcome(lambda: pb_utils.InferenceResponse([1])),
                "request_inputs_ints": outcome(lambda: pb_utils.InferenceRequest(
                    model_name="x", inputs=[1], requested_output_names=[])),
                "iterate_first": first, "next_after_end": after, "iterate_again": again,
            }
            text = json.dumps(seen, sort_keys=True)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_)),
                pb_utils.Tensor("OUT0", np.array([0], dtype=np.int32))]))
        return responses
'''

API_PROBE_CONFIG = '''
name: "api_probe"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "OUT0" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "OUT1" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

_API_PROBE = Http("POST", "/v2/models/api_probe/infer", json={
    "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}],
    "outputs": [{"name": "SEEN"}, {"name": "OUT0"}]})


# -- imports by name from execute -------------------------------------------------------------
LAZY_IMPORT_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Imports, inside execute, a sibling file and the model file itself by their names (as
    Triton's QA models run their tests with unittest.main("model"))."""

    def execute(self, requests):
        import helper
        import model
        seen = {"helper": helper.WORD, "model": model.__name__,
                "has_class": hasattr(model, "TritonPythonModel")}
        text = json.dumps(seen, sort_keys=True)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", np.array([text], np.object_))])
                for _ in requests]
'''

LAZY_IMPORT_CONFIG = '''
name: "lazy_import"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

_LAZY_IMPORT = Model("lazy_import", LAZY_IMPORT_CONFIG,
                     {"1/model.py": LAZY_IMPORT_PY, "1/helper.py": 'WORD = "sibling"\n'})


# -- answers after execute returned ------------------------------------------------------------
LATE_PY = '''
import asyncio
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Not decoupled: execute keeps each request's response sender and returns {ret};
    the answer (OUT = IN + 1, then the final flag on its own) is sent {how}."""

    def initialize(self, args):
        self._tasks = set()

    def _answer(self, sender, value):
        sender.send(pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", (value + 1).astype(np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    {define} execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            {start}
        return {ret}
'''

_THREAD_START = '''def later(sender=sender, value=value):
                time.sleep(0.3)
                self._answer(sender, value)
            threading.Thread(target=later, daemon=True).start()'''

_TASK_START = '''async def later(sender=sender, value=value):
                await asyncio.sleep(0.3)
                self._answer(sender, value)
            task = asyncio.create_task(later())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)'''


def _late_model(name: str, *, ret: str, asynchronous: bool) -> Model:
    model_py = LATE_PY.format(
        ret=ret, how="from a task the coroutine started" if asynchronous else "from a thread",
        define="async def" if asynchronous else "def",
        start=_TASK_START if asynchronous else _THREAD_START)
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, model_py)


def _infer_in(model: str, value: int) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
        {"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]})


# -- a decoupled coroutine left running --------------------------------------------------------
WAITER_PY = '''
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled, one instance: IN = 0 waits until a later request with IN = 1 arrives;
    each answers OUT = IN with the final flag. Only an instance that leaves a decoupled
    coroutine running while it takes the next request answers both."""

    def initialize(self, args):
        self._arrived = asyncio.Event()

    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] == 0:
                await asyncio.wait_for(self._arrived.wait(), 10)
            else:
                self._arrived.set()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

WAITER_CONFIG = '''
name: "async_waiter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''


def _stream_in(model: str, *values: int) -> GrpcStream:
    requests = [{"model_name": model, "id": f"r{i}", "inputs": [
        {"name": "IN", "datatype": "INT32", "shape": ["1"]}]} for i in range(len(values))]
    raw = [[raw_tensor(np.array([v], dtype=np.int32))] for v in values]
    return GrpcStream(requests=requests, raw=raw)


_MODELS = [
    _target("repeat_bare", REPEAT_PY.format(bare="True")),
    _target("repeat_flagged", REPEAT_PY.format(bare="False")),
    _target("fails", FAILS_PY, decoupled=False),
    python_model("bls_probe", BLS_PROBE_CONFIG, BLS_PROBE_PY),
    _late_model("late_thread_none", ret="None", asynchronous=False),
    _late_model("late_thread_list", ret="[None] * len(requests)", asynchronous=False),
    _late_model("late_task_none", ret="None", asynchronous=True),
    python_model("async_waiter", WAITER_CONFIG, WAITER_PY),
    python_model("api_probe", API_PROBE_CONFIG, API_PROBE_PY),
    _LAZY_IMPORT,
]

_CASES = [
    Case("bls_decoupled_bare_final", [_bls("repeat_bare", 2)],
         note="two responses, then the final flag sent alone: the iterator yields a third, "
              "empty response"),
    Case("bls_decoupled_zero_responses", [_bls("repeat_bare", 0)],
         note="only the final flag: one empty response"),
    Case("bls_decoupled_flag_on_last", [_bls("repeat_flagged", 2)],
         note="the final flag on the last response: no empty one after it"),
    Case("bls_decoupled_unknown_model", [_bls("no_such_model", 1), _bls("repeat_bare", 1)],
         note="refused on entry: one error response, nothing after it"),
    Case("bls_decoupled_missing_input", [_bls("repeat_bare", 1, mode="no_input")]),
    Case("bls_single_unknown_model", [_bls("no_such_model", 1, mode="single")]),
    Case("bls_single_on_decoupled_target", [_bls("repeat_bare", 2, mode="single"),
                                            _bls("fails", 1, mode="single")],
         note="exec() without decoupled=True is refused by a decoupled model"),
    Case("bls_single_error_response", [_bls("fails", 1, mode="single")],
         note="the target's own error response comes back as it is"),
    Case("bls_single_missing_input", [_bls("fails", 1, mode="no_input")]),
    Case("pb_utils_values", [_API_PROBE],
         note="requested_output_names() is a set; an exhausted BLS iterator starts over"),
    Case("import_by_name_in_execute", [_infer_in("lazy_import", 1), _infer_in("lazy_import", 1)],
         note="the model's folder is on the import path while it runs; asked twice"),
    Case("late_from_thread_after_none", [_infer_in("late_thread_none", 4)],
         note="execute returned None; the response comes from the model's thread later"),
    Case("late_from_thread_after_list_of_none", [_infer_in("late_thread_list", 4)]),
    Case("late_from_task_after_none", [_infer_in("late_task_none", 4)],
         note="async execute returned None; a task it started answers after it returned"),
    Case("decoupled_coroutine_left_running", [_stream_in("async_waiter", 0, 1)],
         note="the first request's coroutine waits for the second request: the instance "
              "must take it while the first is still running"),
]

SUITES = [
    Suite("qa_python_backend", "python_backend", _MODELS,
          (), _CASES),
]
