"""Model metadata and model configuration, over HTTP and gRPC."""

from __future__ import annotations

from ..case import Case, Grpc, Http, Model, Suite
from ..models import add_sub, broken, decoupled_repeat, identity

_BROKEN = broken()

_ENSEMBLE = Model("ensemble_simple", '''
name: "ensemble_simple"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "SUM" }
      output_map { key: "OUTPUT1" value: "DIFF" }
    }
  ]
}
''', {"1/.keep": ""})

_ENSEMBLE_DECOUPLED = Model("ensemble_repeat", '''
name: "ensemble_repeat"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "repeat_int32"
      model_version: -1
      input_map { key: "IN" value: "X" }
      output_map { key: "OUT" value: "Y" }
    }
  ]
}
''', {"1/.keep": ""})

_MODELS = [
    add_sub(),
    add_sub("simple_versions", versions=(1, 2, 3),
            extra="version_policy: { specific: { versions: [ 1, 3 ] } }"),
    identity("identity_bytes", datatype="TYPE_STRING", dims="[ -1 ]", max_batch_size=4),
    identity("identity_fp16", datatype="TYPE_FP16", dims="[ 2, -1 ]"),
    identity("identity_bool", datatype="TYPE_BOOL", dims="[ 1 ]", max_batch_size=2),
    decoupled_repeat(),
    _ENSEMBLE,
    _ENSEMBLE_DECOUPLED,
    _BROKEN,
]

# Current Triton's ModelConfig has ModelEnsembling.max_inflight_requests (common's
# protobuf/model_config.proto, the model_config_pb2 tritonclient 2.73 ships); 2.51's has
# not, so 2.51's JSON config of an ensemble lacks the field that current Triton prints.
_ENSEMBLE_NEWER = ("ModelEnsembling.max_inflight_requests, in current Triton's "
                   "model_config.proto (triton-inference-server/common), is printed with "
                   "its default 0 in the JSON config of an ensemble")
_ENSEMBLE_EXPECT = {
    "ensemble_simple": [{"status": 200, "body": {
        "ensemble_scheduling": {"max_inflight_requests": 0},
        "model_transaction_policy": {"decoupled": False}, "instance_group": [],
        "platform": "ensemble"}}],
    "ensemble_repeat": [{"status": 200, "body": {
        "ensemble_scheduling": {"max_inflight_requests": 0},
        "model_transaction_policy": {"decoupled": True}, "instance_group": [],
        "platform": "ensemble"}}],
}


def _config_case(model: str) -> Case:
    steps = [Http("GET", f"/v2/models/{model}/config")]
    if model in _ENSEMBLE_EXPECT:
        return Case(f"http_config_{model}", steps, newer=_ENSEMBLE_NEWER,
                    expect=_ENSEMBLE_EXPECT[model])
    return Case(f"http_config_{model}", steps)


_CASES: list[Case] = []
for _model in ("simple", "identity_bytes", "identity_fp16", "identity_bool", "repeat_int32",
               "ensemble_simple", "ensemble_repeat", "simple_versions"):
    _CASES += [
        Case(f"http_metadata_{_model}", [Http("GET", f"/v2/models/{_model}")]),
        _config_case(_model),
        Case(f"grpc_metadata_{_model}", [Grpc("ModelMetadata", {"name": _model})]),
        Case(f"grpc_config_{_model}", [Grpc("ModelConfig", {"name": _model})]),
    ]

_CASES += [
    Case("http_metadata_version", [Http("GET", "/v2/models/simple/versions/1")]),
    Case("http_metadata_version_not_loaded",
         [Http("GET", "/v2/models/simple_versions/versions/2")]),
    Case("http_metadata_version_loaded_3",
         [Http("GET", "/v2/models/simple_versions/versions/3")]),
    Case("http_metadata_version_zero", [Http("GET", "/v2/models/simple/versions/0")]),
    Case("http_metadata_version_negative", [Http("GET", "/v2/models/simple/versions/-1")]),
    Case("http_metadata_version_text", [Http("GET", "/v2/models/simple/versions/one")]),
    Case("http_metadata_unknown",
         [Http("GET", "/v2/models/nope"), Http("GET", "/v2/models/simple")]),
    Case("http_metadata_broken", [Http("GET", "/v2/models/broken")]),
    Case("http_metadata_post", [Http("POST", "/v2/models/simple")]),
    Case("http_metadata_trailing_slash", [Http("GET", "/v2/models/simple/")]),
    Case("http_config_version", [Http("GET", "/v2/models/simple/versions/1/config")]),
    Case("http_config_version_not_loaded",
         [Http("GET", "/v2/models/simple_versions/versions/2/config")]),
    Case("http_config_unknown", [Http("GET", "/v2/models/nope/config")]),
    Case("http_config_broken", [Http("GET", "/v2/models/broken/config")]),
    Case("http_config_post", [Http("POST", "/v2/models/simple/config")]),
    Case("http_models_list", [Http("GET", "/v2/models")]),
    Case("http_model_ready_broken", [Http("GET", "/v2/models/broken/ready")]),
    Case("http_model_ready_version_not_loaded",
         [Http("GET", "/v2/models/simple_versions/versions/2/ready")]),
    Case("http_model_ready_version_3",
         [Http("GET", "/v2/models/simple_versions/versions/3/ready")]),
    Case("http_model_ready_ensemble", [Http("GET", "/v2/models/ensemble_simple/ready")]),
    Case("http_ready_with_broken_model", [Http("GET", "/v2/health/ready")],
         note="strict readiness: a model that failed to load"),
    Case("grpc_metadata_version", [Grpc("ModelMetadata", {"name": "simple", "version": "1"})]),
    Case("grpc_metadata_version_not_loaded",
         [Grpc("ModelMetadata", {"name": "simple_versions", "version": "2"})]),
    Case("grpc_metadata_version_text",
         [Grpc("ModelMetadata", {"name": "simple", "version": "one"})]),
    Case("grpc_metadata_unknown",
         [Grpc("ModelMetadata", {"name": "nope"}), Grpc("ModelMetadata", {"name": "simple"})]),
    Case("grpc_metadata_empty_name", [Grpc("ModelMetadata", {})]),
    Case("grpc_metadata_broken", [Grpc("ModelMetadata", {"name": "broken"})]),
    Case("grpc_config_version", [Grpc("ModelConfig", {"name": "simple", "version": "1"})]),
    Case("grpc_config_version_not_loaded",
         [Grpc("ModelConfig", {"name": "simple_versions", "version": "2"})]),
    Case("grpc_config_unknown", [Grpc("ModelConfig", {"name": "nope"})]),
    Case("grpc_config_empty_name", [Grpc("ModelConfig", {})]),
    Case("grpc_metadata_traversal_name", [Grpc("ModelMetadata", {"name": "../simple"})]),
    Case("grpc_config_slash_name", [Grpc("ModelConfig", {"name": "a/b"})]),
    Case("grpc_ready_traversal_name", [Grpc("ModelReady", {"name": ".."})]),
    Case("http_metadata_encoded_traversal", [Http("GET", "/v2/models/..%2Fsimple")]),
    Case("grpc_config_broken", [Grpc("ModelConfig", {"name": "broken"})]),
    Case("grpc_model_ready_broken", [Grpc("ModelReady", {"name": "broken"})]),
    Case("grpc_model_ready_empty_name", [Grpc("ModelReady", {})]),
    Case("grpc_ready_with_broken_model", [Grpc("ServerReady")]),
]

_INFER_SIMPLE = {"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}

SUITES = [
    Suite("metadata", "metadata", models=_MODELS, cases=_CASES,
          flags=["--exit-on-error=false"], wait_ready=False),
    Suite("metadata_not_strict", "metadata", models=[add_sub(), _BROKEN],
          flags=["--exit-on-error=false", "--strict-readiness=false"], wait_ready=False,
          cases=[
              Case("http_ready_not_strict", [Http("GET", "/v2/health/ready")]),
              Case("grpc_ready_not_strict", [Grpc("ServerReady")]),
              Case("http_model_ready_broken_not_strict",
                   [Http("GET", "/v2/models/broken/ready")]),
          ]),
    Suite("metadata_after_unload", "metadata", models=[add_sub()],
          flags=["--model-control-mode=explicit", "--load-model=simple"], cases=[
              Case("unload_then_ask", [
                  Http("POST", "/v2/repository/models/simple/unload"),
                  Http("GET", "/v2/models/simple"),
                  Http("GET", "/v2/models/simple/config"),
                  Http("GET", "/v2/models/simple/ready"),
                  Http("POST", "/v2/models/simple/infer", json=_INFER_SIMPLE),
                  Grpc("ModelMetadata", {"name": "simple"}),
                  Grpc("ModelInfer", {"model_name": "simple", "inputs": [
                      {"name": "INPUT0", "datatype": "INT32", "shape": ["1", "16"],
                       "contents": {"int_contents": list(range(16))}},
                      {"name": "INPUT1", "datatype": "INT32", "shape": ["1", "16"],
                       "contents": {"int_contents": [1] * 16}}]}),
                  Http("POST", "/v2/repository/models/simple/load"),
                  Http("GET", "/v2/models/simple/ready"),
              ]),
          ]),
]
