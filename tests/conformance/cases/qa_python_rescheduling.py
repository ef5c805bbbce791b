"""Request rescheduling, as Triton's QA test ``qa/L0_backend_python/request_rescheduling``
uses it: a Python model releases a request with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` and, in a model whose sequence batcher has
``iterative_sequence: true``, the request runs again.

- a decoupled countdown model (one response per execution, rescheduled until it reaches
  0), over gRPC streams: without a correlation id (Triton gives the request a sequence of
  its own) and with one; what the model saw (its flags: START on the first execution only;
  the correlation id given) comes back in the responses;
- a non-decoupled model that answers None for a request it reschedules, and answers it on
  the next execution; one that answers a rescheduled request (refused, with Triton's
  typo'd text);
- a decoupled model that sends its final response and then reschedules the request (it
  runs once more, answering nothing);
- the statistics: every execution counts as an inference, and each request that ends is
  counted as a failure too (Triton ends its sequence by cancelling the request);
- a model without ``iterative_sequence``: Triton logs that it cannot reschedule and never
  answers the request; infercore answers with that text (a departure).
"""

from __future__ import annotations

import numpy as np

from ..case import Case, GrpcStream, Http, Suite, raw_tensor
from ..models import python_model

_COUNTDOWN_PY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """IN responses per request, counting down to 0; each names the flags and the
    correlation id its execution saw."""

    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            key = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[key] = int(pb_utils.get_input_tensor_by_name(
                    request, "IN").as_numpy()[0])
            self.left[key] -= 1
            seen = json.dumps({"flags": request.flags(), "correlation_id": key})
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([self.left[key]], np.int32)),
                pb_utils.Tensor("SEEN", np.array([seen], np.object_))])
            sender = request.get_response_sender()
            if self.left[key] <= 0:
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
'''

_ONCE_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = X + the number of executions so far; the first request is rescheduled once
    (MODE answer: it is answered anyway, which is refused)."""

    def initialize(self, args):
        import json
        config = json.loads(args["model_config"])
        self.answer_rescheduled = config["parameters"].get("MODE", {}).get(
            "string_value") == "answer"
        self.runs = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.runs += 1
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + self.runs)])
            if self.runs == 1 or self.answer_rescheduled:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(response if self.answer_rescheduled else None)
            else:
                responses.append(response)
        return responses
'''

_FINAL_FIRST_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sends its answer and the final flag, then reschedules the request, once."""

    def initialize(self, args):
        self.done = False

    def execute(self, requests):
        for request in requests:
            if self.done:
                continue
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([0], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            self.done = True
        return None
'''

_ITERATIVE = "sequence_batching { iterative_sequence: true }"
_DECOUPLED = "model_transaction_policy { decoupled: true }"


def _config(name: str, tensors: str, extra: str) -> str:
    return f'''
name: "{name}"
backend: "python"
max_batch_size: 0
{tensors}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''


_IN_OUT = '''
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
'''
_X_Y = '''
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''

_MODELS = [
    python_model("countdown", _config("countdown", _IN_OUT, f"{_ITERATIVE}\n{_DECOUPLED}"),
                 _COUNTDOWN_PY),
    python_model("once", _config("once", _X_Y, _ITERATIVE), _ONCE_PY),
    python_model("answers_rescheduled", _config(
        "answers_rescheduled", _X_Y,
        f'{_ITERATIVE}\nparameters: {{ key: "MODE" value: {{ string_value: "answer" }} }}'),
        _ONCE_PY),
    python_model("final_first", _config("final_first", _IN_OUT, f"{_ITERATIVE}\n{_DECOUPLED}"),
                 _FINAL_FIRST_PY),
    python_model("not_iterative", _config("not_iterative", _X_Y, ""), _ONCE_PY),
]


def _stream(model: str, value: int, **parameters: dict[str, object]) -> GrpcStream:
    return GrpcStream(requests=[{
        "model_name": model, "id": "r", "parameters": parameters,
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": ["1"]}]}],
        raw=[[raw_tensor(np.array([value], np.int32))]])


def _infer(model: str, value: int = 5) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [value]}]})


def _stats(model: str) -> Http:
    return Http("GET", f"/v2/models/{model}/stats")


_SEQUENCE = {"sequence_id": {"int64_param": 7}, "sequence_start": {"bool_param": True}}

_CASES = [
    Case("countdown_without_correlation_id", [_stream("countdown", 3)],
         note="three responses from three executions; START on the first only; the "
              "request runs under a correlation id the server gave it"),
    Case("countdown_second_request_new_id", [_stream("countdown", 2)],
         note="the next request without an id gets the next id"),
    Case("countdown_with_sequence_id", [_stream("countdown", 3, **_SEQUENCE)]),
    Case("none_for_rescheduled_then_answered", [_infer("once"), _infer("once", 9)],
         note="the first request answers on its second execution"),
    Case("answered_rescheduled_request_refused", [_infer("answers_rescheduled")]),
    Case("final_sent_before_rescheduling", [_stream("final_first", 0)],
         note="the request runs once more (answering nothing), then its stream ends"),
    Case("statistics", [_stats("once")],
         note="an inference per execution; a failure per request that ended"),
    Case("statistics_decoupled", [_stats("countdown")], departure=(
        "infercore also reports response_stats for a decoupled Python model, where "
        "Triton 2.51's Python backend reports none; the counts compared here are Triton's"),
        expect=[{"status": 200, "body": {"model_stats": [{
            "inference_count": 8, "execution_count": 8, "inference_stats": {
                "success": {"count": 8}, "fail": {"count": 3}}}]}}],
        note="8 executions for 3 requests; each of the 3 ended with a failure counted"),
    Case("not_iterative_model", [_infer("not_iterative"), _infer("not_iterative")],
         departure=(
             "Triton 2.51 logs 'Failed to release request: Request is released with "
             "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to "
             "handle such a flag.' and never answers the request (its client waits until "
             "it gives up); infercore answers it with that text, as an error"),
         expect=[{"status": 500, "body": {"error": (
             "Failed to release request: Request is released with "
             "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to "
             "handle such a flag.")}},
             {"status": 200, "body": {"outputs": [{"data": [7]}]}}]),
]

SUITES = [Suite("qa_python_backend_rescheduling", "python_backend", _MODELS, (), _CASES)]
