"""The statistics extension: per model, per version and for every model, over HTTP and
gRPC, after successes, failures, batches, ensembles and unloads."""

from __future__ import annotations

import numpy as np

from ..case import Case, Grpc, Http, Suite, raw_tensor
from ..models import add_sub, identity, python_model
from .repository import INDEX, ensemble, grpc_infer, grpc_infer_ens, infer_simple, load, unload

FAILING_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("this request fails"))
                for _ in requests]
'''


RAISING_PY = '''
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("execute fails")
'''


def _failing(name: str = "failing", model_py: str = FAILING_PY) -> object:
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, model_py)


def stats(path: str = "") -> Http:
    """GET /v2/models[/<path>]/stats."""
    return Http("GET", f"/v2/models/{path}/stats" if path else "/v2/models/stats")


def grpc_stats(name: str = "", version: str = "") -> Grpc:
    request = {}
    if name:
        request["name"] = name
    if version:
        request["version"] = version
    return Grpc("ModelStatistics", request)


def _infer_batch(rows: int) -> Http:
    data = list(range(16)) * rows
    tensor = {"datatype": "INT32", "shape": [rows, 16], "data": data}
    return Http("POST", "/v2/models/simple/infer",
                json={"inputs": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]})


_RAW15 = raw_tensor(np.arange(15, dtype=np.int32))
_BAD_SHAPE = Grpc("ModelInfer", {"model_name": "simple", "inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": ["1", "15"]},
    {"name": "INPUT1", "datatype": "INT32", "shape": ["1", "15"]}]}, raw=[_RAW15, _RAW15])
_INFER_FAILING = Grpc("ModelInfer", {"model_name": "failing", "inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": ["2"]}]},
    raw=[raw_tensor(np.array([1.0, 2.0], dtype=np.float32))])
_INFER_RAISING = Grpc("ModelInfer", {"model_name": "raising", "inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": ["2"]}]},
    raw=[raw_tensor(np.array([1.0, 2.0], dtype=np.float32))])

_CASES = [
    Case("all_fresh", [stats()], note="every loaded version, nothing counted yet"),
    Case("model_fresh", [stats("simple")]),
    Case("version", [stats("simple/versions/1")]),
    Case("unknown_version", [stats("simple/versions/7"), stats("simple")]),
    Case("version_zero", [stats("simple/versions/0")]),
    Case("version_not_a_number", [stats("simple/versions/x")]),
    Case("unknown_model", [stats("nope")]),
    Case("model_not_loaded", [stats("idle"), grpc_infer("idle")],
         note="in the repository, never loaded"),
    Case("post", [Http("POST", "/v2/models/simple/stats"), Http("POST", "/v2/models/stats")]),
    Case("every_version", [stats("multi_all")]),
    Case("one_of_versions", [stats("multi_all/versions/2")]),
    Case("grpc_all_fresh", [grpc_stats()]),
    Case("grpc_model", [grpc_stats("simple")]),
    Case("grpc_version", [grpc_stats("simple", "1")]),
    Case("grpc_unknown_version", [grpc_stats("simple", "7")]),
    Case("grpc_version_not_a_number", [grpc_stats("simple", "x")]),
    Case("grpc_version_negative", [grpc_stats("simple", "-1")]),
    Case("grpc_unknown_model", [grpc_stats("nope")]),
    Case("grpc_model_not_loaded", [grpc_stats("idle")]),
    Case("grpc_every_version", [grpc_stats("multi_all")]),
    Case("grpc_version_without_name", [grpc_stats("", "1")]),
    Case("after_success", [infer_simple(), stats("simple")]),
    Case("after_batch", [_infer_batch(3), stats("simple")],
         note="a request of 3 rows: one execution, three inferences"),
    Case("after_grpc_infer", [grpc_infer(), grpc_stats("simple")]),
    Case("after_bad_shape", [_BAD_SHAPE, stats("simple")],
         note="a request refused before it reaches the model"),
    Case("after_model_error", [_INFER_FAILING, _INFER_FAILING, stats("failing")],
         note="the model answers each request with an error"),
    Case("grpc_after_model_error", [grpc_stats("failing")]),
    Case("after_execute_raises", [_INFER_RAISING, _INFER_RAISING, stats("raising")],
         note="execute raises: each request fails, yet the executions count in batch_stats"),
    Case("ensemble", [grpc_infer_ens(), stats("ens"), stats("ens_a"), stats("ens_b")]),
    Case("all_after_inferences", [stats()]),
    Case("after_unload", [unload("simple"), INDEX, stats("simple"), stats("simple/versions/1"),
                          grpc_stats("simple"), grpc_infer()],
         note="statistics of a model once unloaded"),
    Case("all_after_unload", [stats(), grpc_stats()]),
    Case("after_reload", [load("simple"), stats("simple")],
         note="a model loaded again starts from zero"),
]

SUITES = [
    Suite("statistics", "statistics",
          [add_sub(), add_sub("idle"), add_sub("multi_all", versions=(1, 2, 3),
                                              extra="version_policy: { all { } }"),
           _failing(), _failing("raising", RAISING_PY), ensemble(), identity("ens_a"),
           identity("ens_b")],
          ["--model-control-mode=explicit", "--load-model=simple", "--load-model=multi_all",
           "--load-model=failing", "--load-model=raising", "--load-model=ens"],
          _CASES),
]
