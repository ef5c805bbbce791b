"""The frontends' own timestamps in a Triton trace file, for each way a request comes.

Triton's HTTP frontend adds HTTP_RECV_START and HTTP_RECV_END, INFER_RESPONSE_COMPLETE
and HTTP_SEND_START / HTTP_SEND_END to the trace of a request it received; the gRPC
frontend GRPC_WAITREAD_START / GRPC_WAITREAD_END, INFER_RESPONSE_COMPLETE and
GRPC_SEND_START / GRPC_SEND_END. On a stream, INFER_RESPONSE_COMPLETE comes once (the
first response) and each message written has its send pair. The traces of an ensemble's
steps and of BLS calls (children: ``parent_id``) have none of them. Triton's QA summary
(qa/common/trace_summary.py, used by qa/L0_trace) counts a trace only when its root has
its frontend's first timestamp, so the ``summary`` of each file is compared too.

With ``log-frequency=1`` every client request's traces go to a file of their own,
``<file>.<n>`` in the order the requests were sent: each case reads the next one.
"""

from __future__ import annotations

import numpy as np

from ..case import Case, Grpc, GrpcStream, Http, Model, Suite, TraceFile, raw_tensor
from ..models import add_sub, decoupled_repeat, python_model
from .metadata import _ENSEMBLE, _ENSEMBLE_DECOUPLED

_FILE = "{tmp}/frontends.json"

_BLS_CONFIG = '''
name: "bls_simple"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

# calls "simple" with its own request's trace, so the call's trace is a child of it
_BLS_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
                trace=request.trace())
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", out.as_numpy())]))
        return responses
'''


def _bls() -> Model:
    return python_model("bls_simple", _BLS_CONFIG, _BLS_PY)


def _http(model: str, a: str = "INPUT0", b: str = "INPUT1") -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
        {"name": a, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": b, "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})


def _grpc_request(model: str, a: str = "INPUT0", b: str = "INPUT1") -> dict:
    return {"model_name": model, "inputs": [
        {"name": a, "datatype": "INT32", "shape": ["1", "16"]},
        {"name": b, "datatype": "INT32", "shape": ["1", "16"]}]}


def _raw() -> list[bytes]:
    return [raw_tensor(np.arange(16, dtype=np.int32)), raw_tensor(np.ones(16, np.int32))]


def _grpc(model: str, a: str = "INPUT0", b: str = "INPUT1") -> Grpc:
    return Grpc("ModelInfer", _grpc_request(model, a, b), raw=_raw())


def _repeat(model: str, name: str) -> GrpcStream:
    return GrpcStream(requests=[{"model_name": model, "id": "r0", "inputs": [
        {"name": name, "datatype": "INT32", "shape": ["3"]}]}],
        raw=[[raw_tensor(np.array([1, 2, 3], np.int32))]])


def _trace(index: int) -> TraceFile:
    return TraceFile(f"{_FILE}.{index}", summary=True)


_CASES = [
    Case("http_infer", [_http("simple"), _trace(0)]),
    Case("grpc_infer", [_grpc("simple"), _trace(1)]),
    Case("http_ensemble", [_http("ensemble_simple", "A", "B"), _trace(2)],
         note="the step's trace is a child, without frontend timestamps"),
    Case("grpc_ensemble", [_grpc("ensemble_simple", "A", "B"), _trace(3)]),
    Case("http_bls", [_http("bls_simple"), _trace(4)],
         note="the BLS call's trace is a child, without frontend timestamps"),
    Case("grpc_bls", [_grpc("bls_simple"), _trace(5)]),
    Case("grpc_stream_decoupled", [_repeat("repeat_int32", "IN"), _trace(6)],
         note="three responses: INFER_RESPONSE_COMPLETE once, a send pair per message"),
    Case("grpc_stream_decoupled_ensemble", [_repeat("ensemble_repeat", "X"), _trace(7)]),
    Case("grpc_stream_one_response",
         [GrpcStream(requests=[_grpc_request("simple")], raw=[_raw()]), _trace(8)]),
    Case("grpc_infer_after_streams", [_grpc("simple"), _trace(9)],
         note="the files go on in order after the streams"),
    Case("http_refused_before_the_model",  # a body that is not JSON
         [Http("POST", "/v2/models/simple/infer", body="{not json"), _http("simple"),
          TraceFile(f"{_FILE}.10", summary=True), TraceFile(f"{_FILE}.11", summary=True)]),
    Case("grpc_refused_before_the_model",
         [Grpc("ModelInfer", {"model_name": "simple", "inputs": [
             {"name": "INPUT0", "datatype": "INT32", "shape": ["1", "16"]}]},
             raw=_raw()[:1]), _grpc("simple"),
          TraceFile(f"{_FILE}.12", summary=True), TraceFile(f"{_FILE}.13", summary=True)],
         note="gRPC refused by the model's checks: no trace at all, the next request's "
              "goes to the next file"),
    Case("http_refused_by_the_model",
         [Http("POST", "/v2/models/simple/infer", json={"inputs": [
             {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
              "data": list(range(16))}]}), _http("simple"),
          TraceFile(f"{_FILE}.13", summary=True), TraceFile(f"{_FILE}.14", summary=True)],
         note="refused by the model's checks: no trace written, as over gRPC (a body that "
              "cannot be decoded leaves a trace of the receive timestamps only)"),
]

_FLAGS = ["--trace-config=triton,file=" + _FILE, "--trace-config=level=TIMESTAMPS",
          "--trace-config=rate=1", "--trace-config=triton,log-frequency=1"]

SUITES = [
    Suite("trace_frontends", "trace",
          [add_sub(), decoupled_repeat(), _ENSEMBLE, _ENSEMBLE_DECOUPLED, _bls()],
          _FLAGS, _CASES),
]
