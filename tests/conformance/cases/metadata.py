"""Model metadata and model configuration, over HTTP and gRPC."""

from __future__ import annotations

from ..case import Case, Grpc, Http, Model, Suite
from ..models import add_sub, decoupled_repeat, identity, python_model

_BROKEN_PY = '''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this model never loads")

    def execute(self, requests):
        return []
'''

_BROKEN = python_model("broken", '''
name: "broken"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
''', _BROKEN_PY)

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

_MODELS = [
    add_sub(),
    add_sub("simple_versions", versions=(1, 2, 3),
            extra="version_policy: { specific: { versions: [ 1, 3 ] } }"),
    identity("identity_bytes", datatype="TYPE_STRING", dims="[ -1 ]", max_batch_size=4),
    identity("identity_fp16", datatype="TYPE_FP16", dims="[ 2, -1 ]"),
    identity("identity_bool", datatype="TYPE_BOOL", dims="[ 1 ]", max_batch_size=2),
    decoupled_repeat(),
    _ENSEMBLE,
    _BROKEN,
]

_CASES: list[Case] = []
for _model in ("simple", "identity_bytes", "identity_fp16", "identity_bool", "repeat_int32",
               "ensemble_simple", "simple_versions"):
    _CASES += [
        Case(f"http_metadata_{_model}", [Http("GET", f"/v2/models/{_model}")]),
        Case(f"http_config_{_model}", [Http("GET", f"/v2/models/{_model}/config")]),
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
    Case("http_metadata_unknown", [Http("GET", "/v2/models/nope"), Http("GET", "/v2/models/simple")]),
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
    Case("grpc_config_broken", [Grpc("ModelConfig", {"name": "broken"})]),
    Case("grpc_model_ready_broken", [Grpc("ModelReady", {"name": "broken"})]),
    Case("grpc_model_ready_empty_name", [Grpc("ModelReady", {})]),
    Case("grpc_ready_with_broken_model", [Grpc("ServerReady")]),
]

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
]
