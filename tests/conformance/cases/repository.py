"""The model repository extension: index, load and unload over HTTP and gRPC, under each
model control mode, with config and file overrides, version policies, ensembles and the
model names a client may send.
"""

from __future__ import annotations

import json

import numpy as np

from ..case import Case, Grpc, Http, Model, Settled, Suite, b64, raw_tensor
from ..models import ADD_SUB_PY, add_sub, identity, python_model

# -- models ----------------------------------------------------------------------------------
FAIL_INIT_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("this model refuses to initialize")

    def execute(self, requests):
        return []
'''


def broken_config(name: str = "broken") -> Model:
    """A config.pbtxt that is not valid text protobuf."""
    return python_model(name, f'name: "{name}"\nbackend: "python"\nmax_batch_size: [ oops\n',
                        ADD_SUB_PY)


def init_fails(name: str = "init_fails") -> Model:
    """A model whose initialize raises."""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, FAIL_INIT_PY)


def ensemble(name: str = "ens", first: str = "ens_a", second: str = "ens_b") -> Model:
    """An ensemble of two identity models: IN -> first -> second -> OUT."""
    config = f'''
name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{first}" model_version: -1
       input_map {{ key: "INPUT0" value: "IN" }} output_map {{ key: "OUTPUT0" value: "mid" }} }},
    {{ model_name: "{second}" model_version: -1
       input_map {{ key: "INPUT0" value: "mid" }} output_map {{ key: "OUTPUT0" value: "OUT" }} }}
  ]
}}
'''
    return Model(name, config, {"1/.keep": ""})


def _policy(name: str, policy: str) -> Model:
    return add_sub(name, versions=(1, 2, 3), extra=f"version_policy: {policy}")


def simple_config(name: str = "simple", max_batch_size: int = 8) -> dict:
    """simple's config.pbtxt in Triton's JSON form (a load's config override)."""
    tensor = {"data_type": "TYPE_INT32", "dims": [16]}
    return {"name": name, "backend": "python", "max_batch_size": max_batch_size,
            "input": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}],
            "output": [{"name": "OUTPUT0", **tensor}, {"name": "OUTPUT1", **tensor}],
            "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}


def _config(name: str = "simple", max_batch_size: int = 8) -> str:
    return json.dumps(simple_config(name, max_batch_size))


# -- steps -----------------------------------------------------------------------------------
# Triton's unload returns while the versions are still UNLOADING: the index is read once
# they are gone (a ready-only index never lists them).
INDEX = Settled(Http("POST", "/v2/repository/index"))
READY_INDEX = Http("POST", "/v2/repository/index", json={"ready": True})
GRPC_INDEX = Settled(Grpc("RepositoryIndex", {}))


def load(name: str, parameters: dict | None = None, body: str | None = None) -> Http:
    """A load request; ``body`` (raw text) replaces the JSON built from ``parameters``."""
    document = None if parameters is None else {"parameters": parameters}
    return Http("POST", f"/v2/repository/models/{name}/load", json=document, body=body)


def unload(name: str, parameters: dict | None = None) -> Http:
    body = None if parameters is None else {"parameters": parameters}
    return Http("POST", f"/v2/repository/models/{name}/unload", json=body)


def grpc_load(name: str, parameters: dict | None = None) -> Grpc:
    request: dict = {"model_name": name}
    if parameters:
        request["parameters"] = parameters
    return Grpc("RepositoryModelLoad", request)


def grpc_unload(name: str, parameters: dict | None = None) -> Grpc:
    request: dict = {"model_name": name}
    if parameters:
        request["parameters"] = parameters
    return Grpc("RepositoryModelUnload", request)


def ready(name: str) -> Http:
    return Http("GET", f"/v2/models/{name}/ready")


def infer_simple(name: str = "simple") -> Http:
    """One good request to an add_sub model (batch of 1)."""
    data = list(range(16))
    tensor = {"datatype": "INT32", "shape": [1, 16], "data": data}
    return Http("POST", f"/v2/models/{name}/infer",
                json={"inputs": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]})


def grpc_infer(name: str = "simple") -> Grpc:
    """infer_simple over gRPC (errors there carry no HTTP framing to compare)."""
    raw = raw_tensor(np.arange(16, dtype=np.int32))
    tensor = {"datatype": "INT32", "shape": ["1", "16"]}
    return Grpc("ModelInfer", {"model_name": name,
                               "inputs": [{"name": "INPUT0", **tensor},
                                          {"name": "INPUT1", **tensor}]}, raw=[raw, raw])


def grpc_infer_ens() -> Grpc:
    return Grpc("ModelInfer", {"model_name": "ens", "inputs": [
        {"name": "IN", "datatype": "FP32", "shape": ["2"]}]},
        raw=[raw_tensor(np.array([1.5, 2.5], dtype=np.float32))])


# -- explicit mode: index, load, unload ---------------------------------------------------------
_EXPLICIT_MODELS = [
    add_sub(), add_sub("other"), broken_config(), init_fails(),
    add_sub("multi", versions=(1, 2, 3)),
    _policy("multi_all", "{ all { } }"),
    _policy("multi_latest2", "{ latest { num_versions: 2 } }"),
    _policy("multi_specific", "{ specific { versions: [ 1, 3 ] } }"),
    _policy("multi_missing", "{ specific { versions: [ 1, 5 ] } }"),
    ensemble(), identity("ens_a"), identity("ens_b"),
]

_INDEX_CASES = [
    Case("index_no_body", [INDEX], note="nothing loaded yet: every model by name alone"),
    Case("index_empty_object", [Http("POST", "/v2/repository/index", json={})]),
    Case("index_ready_true", [READY_INDEX]),
    Case("index_ready_false", [Http("POST", "/v2/repository/index", json={"ready": False})]),
    Case("index_ready_string", [Http("POST", "/v2/repository/index", json={"ready": "yes"}),
                                INDEX]),
    Case("index_ready_number", [Http("POST", "/v2/repository/index", json={"ready": 1})]),
    Case("index_malformed_json", [Http("POST", "/v2/repository/index", body="{bad"), INDEX]),
    Case("index_array_body", [Http("POST", "/v2/repository/index", body="[]")]),
    Case("index_unknown_key", [Http("POST", "/v2/repository/index", json={"other": 1})]),
    Case("index_get", [Http("GET", "/v2/repository/index")],
         note="a method the route does not take"),
    Case("index_named_repository", [Http("POST", "/v2/repository/myrepo/index")]),
    Case("grpc_index", [GRPC_INDEX]),
    Case("grpc_index_ready", [Grpc("RepositoryIndex", {"ready": True})]),
    Case("grpc_index_named_repository",
         [Grpc("RepositoryIndex", {"repository_name": "myrepo"})]),
]

_LOAD_CASES = [
    Case("load_simple", [load("simple"), READY_INDEX, ready("simple"), infer_simple()]),
    Case("load_simple_again", [load("simple"), READY_INDEX],
         note="an already-loaded, unchanged model: nothing to do"),
    Case("load_get", [Http("GET", "/v2/repository/models/simple/load")]),
    Case("load_named_repository", [Http("POST", "/v2/repository/myrepo/models/simple/load")]),
    Case("load_empty_body_object", [load("simple", body="{}")]),
    Case("load_malformed_body", [Http("POST", "/v2/repository/models/simple/load",
                                      body="{bad"), READY_INDEX]),
    Case("load_parameters_not_object", [load("simple", body='{"parameters": 5}')]),
    Case("load_parameters_array", [load("simple", body='{"parameters": []}')]),
    Case("load_unknown_parameter", [load("simple", {"other": "x"}), READY_INDEX]),
    Case("load_unknown_parameter_number", [load("simple", {"other": 3})]),
    Case("unload_simple", [unload("simple"), INDEX, ready("simple"), grpc_infer()]),
    Case("unload_not_loaded", [unload("simple"), INDEX]),
    Case("unload_unknown", [unload("nope"), INDEX]),
    Case("load_unknown", [load("nope"), INDEX]),
    Case("unload_get", [Http("GET", "/v2/repository/models/simple/unload")]),
    Case("unload_malformed_body", [Http("POST", "/v2/repository/models/simple/unload",
                                        body="{bad")]),
    Case("grpc_load_simple", [grpc_load("simple"), Grpc("RepositoryIndex", {"ready": True})]),
    Case("grpc_load_simple_again", [grpc_load("simple")]),
    Case("grpc_unload_simple", [grpc_unload("simple"), GRPC_INDEX]),
    Case("grpc_unload_not_loaded", [grpc_unload("simple")]),
    Case("grpc_load_unknown", [grpc_load("nope")]),
    Case("grpc_unload_unknown", [grpc_unload("nope")]),
    Case("grpc_load_named_repository",
         [Grpc("RepositoryModelLoad", {"repository_name": "r", "model_name": "simple"})]),
    Case("grpc_unload_named_repository",
         [Grpc("RepositoryModelUnload", {"repository_name": "r", "model_name": "simple"})]),
    Case("grpc_load_unknown_parameter",
         [grpc_load("simple", {"other": {"string_param": "x"}})]),
    Case("load_broken_config", [load("broken"), INDEX, load("simple")],
         note="config.pbtxt that does not parse"),
    Case("grpc_load_broken_config", [grpc_load("broken")]),
    Case("load_init_fails", [load("init_fails"), INDEX],
         note="the model's initialize raises"),
    Case("load_multi_versions", [load("multi"), READY_INDEX,
                                 Http("GET", "/v2/models/multi"),
                                 ready("multi/versions/1"), ready("multi/versions/3")],
         note="no version_policy: the latest version only"),
    Case("load_policy_all", [load("multi_all"), READY_INDEX]),
    Case("load_policy_latest2", [load("multi_latest2"), READY_INDEX]),
    Case("load_policy_specific", [load("multi_specific"), READY_INDEX]),
    Case("load_policy_specific_missing", [load("multi_missing"), INDEX]),
    Case("unload_multi_all", [unload("multi_all"), INDEX]),
]

_OVERRIDE_CASES = [
    Case("load_config_override", [load("simple", {"config": _config(max_batch_size=4)}),
                                  Http("GET", "/v2/models/simple/config"), infer_simple()]),
    Case("reload_changed_config_override",
         [load("simple", {"config": _config(max_batch_size=2)}),
          Http("GET", "/v2/models/simple/config"), READY_INDEX]),
    Case("load_config_override_malformed", [load("simple", {"config": "{bad"}), READY_INDEX,
                                            infer_simple()],
         note="a config override that is not JSON"),
    Case("load_config_override_not_string", [load("simple", {"config": 5})]),
    Case("load_config_override_unknown_field",
         [load("simple", {"config": json.dumps({**simple_config(), "nonsense": 1})})]),
    Case("load_config_override_invalid",
         [load("simple", {"config": json.dumps({**simple_config(), "max_batch_size": -3})}),
          READY_INDEX]),
    Case("load_config_override_other_name",
         [load("simple", {"config": _config(name="renamed")}), READY_INDEX]),
    Case("load_plain_after_override", [load("simple"), Http("GET", "/v2/models/simple/config")],
         note="a plain load after an override goes back to config.pbtxt"),
    Case("grpc_load_config_override",
         [grpc_load("simple", {"config": {"string_param": _config(max_batch_size=3)}}),
          Grpc("ModelConfig", {"name": "simple"})]),
    Case("grpc_load_config_override_malformed",
         [grpc_load("simple", {"config": {"string_param": "{bad"}})]),
    Case("grpc_load_config_override_bytes",
         [grpc_load("simple", {"config": {"bytes_param": b64(b"{}")}})]),
    Case("load_file_override",
         [load("simple", {"config": _config(max_batch_size=5),
                          "file:1/model.py": b64(ADD_SUB_PY.encode())}),
          Http("GET", "/v2/models/simple/config"), infer_simple(), READY_INDEX]),
    Case("load_file_override_new_model",
         [load("fresh", {"config": _config(name="fresh"),
                         "file:1/model.py": b64(ADD_SUB_PY.encode())}),
          READY_INDEX, infer_simple("fresh")],
         note="a model that is in no repository, loaded from its files alone"),
    Case("unload_file_override_model", [unload("fresh"), INDEX]),
    Case("load_file_override_without_config",
         [load("simple", {"file:1/model.py": b64(ADD_SUB_PY.encode())})]),
    Case("load_file_override_not_base64",
         [load("simple", {"config": _config(), "file:1/model.py": "***"}), INDEX,
          infer_simple()],
         note="Triton's base64 decoder skips what is not base64: an empty model.py"),
    Case("load_file_override_not_string",
         [load("simple", {"config": _config(), "file:1/model.py": 7})]),
    Case("load_file_override_parent",
         [load("simple", {"config": _config(), "file:1/../../x": b64(b"x")}), READY_INDEX],
         note="a file path that leaves the model folder"),
    Case("load_file_override_parent_twice",
         [load("simple", {"config": _config(), "file:../../x": b64(b"x")})]),
    Case("load_file_override_absolute",
         [load("simple", {"config": _config(), "file:1/model.py": b64(ADD_SUB_PY.encode()),
                          "file:/{tmp}/escaped": b64(b"x")}),
          READY_INDEX, infer_simple()],
         note="an absolute path is joined under the model folder"),
    Case("load_file_override_empty_path",
         [load("simple", {"config": _config(), "file:": b64(b"x")})]),
    Case("grpc_load_file_override",
         [grpc_load("simple", {"config": {"string_param": _config(max_batch_size=6)},
                               "file:1/model.py": {"bytes_param": b64(ADD_SUB_PY.encode())}}),
          Grpc("ModelConfig", {"name": "simple"})]),
    Case("grpc_load_file_override_string",
         [grpc_load("simple", {"config": {"string_param": _config()},
                               "file:1/model.py": {"string_param": "x"}})]),
    Case("grpc_load_file_override_parent",
         [grpc_load("simple", {"config": {"string_param": _config()},
                               "file:1/../../x": {"bytes_param": b64(b"x")}})]),
    Case("grpc_load_file_override_without_config",
         [grpc_load("simple", {"file:1/model.py": {"bytes_param": b64(b"x")}})]),
]

_ENSEMBLE_CASES = [
    Case("load_ensemble", [load("ens"), READY_INDEX, grpc_infer_ens()],
         note="loading an ensemble loads its steps"),
    Case("unload_ensemble_keeps_steps", [unload("ens"), READY_INDEX]),
    Case("unload_step_of_ensemble", [load("ens"), unload("ens_a"), INDEX, grpc_infer_ens()]),
    Case("reload_after_step_unload", [load("ens_a"), READY_INDEX]),
    Case("load_ensemble_again", [load("ens"), READY_INDEX]),
    Case("unload_dependents", [unload("ens", {"unload_dependents": True}), INDEX]),
    Case("unload_dependents_not_bool", [load("ens"),
                                        unload("ens", {"unload_dependents": "yes"}),
                                        READY_INDEX]),
    Case("unload_dependents_false", [unload("ens", {"unload_dependents": False}),
                                     READY_INDEX]),
    Case("grpc_unload_dependents",
         [grpc_load("ens"),
          grpc_unload("ens", {"unload_dependents": {"bool_param": True}}),
          Grpc("RepositoryIndex", {"ready": True})]),
    Case("grpc_unload_dependents_not_bool",
         [grpc_unload("ens", {"unload_dependents": {"string_param": "true"}})]),
    Case("unload_unknown_parameter", [unload("simple", {"other": True})]),
]

# -- model names -------------------------------------------------------------------------------
_LONG = "n" * 300
_NAME_MODELS = [add_sub(), add_sub("dotted.name"), add_sub("with space"),
                add_sub("modèle"), add_sub("..dots")]

# Triton 2.51 checks no name on load: '..' is the repository's parent folder, '..dots' a
# model. Current Triton refuses names with '..' or '/', and empty or blank ones, on load
# only (unload, infer and statistics just find no model).
_VALIDATE = ("current Triton validates the name of a model to load: "
             "triton-inference-server/core src/model_repository_manager/"
             "model_repository_manager.cc, ValidateModelName (called by LoadUnloadModel for "
             "LOAD): an empty name is 'model name must not be empty', a blank one 'model "
             "name must not contain only whitespace characters', one containing '..' or '/' "
             "\"invalid model name '<name>', model name must not contain path traversal "
             "characters\" (INVALID_ARG); Triton 2.51 has no such check")


def _refused(name: str, grpc: bool = False) -> dict:
    if not name:
        message = "model name must not be empty"
    elif not name.strip():
        message = "model name must not contain only whitespace characters"
    else:
        message = (f"invalid model name '{name}', model name must not contain path "
                   "traversal characters")
    if grpc:
        return {"code": "INVALID_ARGUMENT", "details": message}
    return {"status": 400, "headers": {"content-type": "application/json"},
            "body": {"error": message}}


def _unpolled(name: str) -> dict:
    return {"status": 500, "headers": {"content-type": "application/json"},
            "body": {"error": f"failed to load '{name}', failed to poll from model repository"}}


_NAME_CASES = [
    Case("names_index", [INDEX], note="hidden folders are models too"),
    Case("load_dotted", [load("dotted.name"), infer_simple("dotted.name"),
                         Http("GET", "/v2/models/dotted.name/stats")]),
    Case("load_space_encoded", [load("with%20space"),
                                Http("GET", "/v2/models/with%20space/stats"), READY_INDEX],
         note="Triton does not percent-decode the path: the name is 'with%20space'"),
    Case("load_unicode_encoded", [load("mod%C3%A8le"),
                                  Http("GET", "/v2/models/mod%C3%A8le/stats")]),
    Case("load_dot_dot", [load(".."), load("%2E%2E")], newer=_VALIDATE,
         expect=[_refused(".."), _unpolled("%2E%2E")]),
    Case("load_dot", [load(".")]),
    Case("load_slash", [load("a/b")], note="a '/' in the path: another route"),
    Case("load_encoded_slash", [load("a%2Fb"), load("%2E%2E%2F%2E%2E%2Ftmp")]),
    Case("load_encoded_traversal", [load("..%2Fsimple"), load("..%2F..%2Fetc")],
         newer=_VALIDATE, expect=[_refused("..%2Fsimple"), _refused("..%2F..%2Fetc")]),
    Case("load_encoded_absolute", [load("%2Ftmp"), load("%2F{tmp}%2Fmodels%2Fsimple")]),
    Case("load_empty_name", [Http("POST", "/v2/repository/models//load")]),
    Case("load_long_name", [load(_LONG), INDEX]),
    Case("load_nul_encoded", [load("a%00b")]),
    Case("load_backslash", [load("a%5Cb")]),
    Case("unload_dot_dot", [unload("%2E%2E"), unload("..%2Fsimple"), unload("a%2Fb")]),
    Case("unload_empty_name", [Http("POST", "/v2/repository/models//unload")]),
    Case("unload_long_name", [unload(_LONG)]),
    Case("ready_traversal_names", [ready("..%2Fsimple"), ready("%2E%2E"), ready("%2Ftmp"),
                                   ready("simple")]),
    Case("infer_long_name", [grpc_infer(_LONG)]),
    Case("stats_traversal_names", [Http("GET", "/v2/models/..%2Fsimple/stats"),
                                   Http("GET", "/v2/models/%2E%2E/stats")]),
    Case("grpc_load_traversal_names",
         [grpc_load(".."), grpc_load("../simple"), grpc_load("a/b"), grpc_load("/tmp"),
          grpc_load(""), grpc_load(" ")], newer=_VALIDATE,
         expect=[_refused(n, grpc=True) for n in ("..", "../simple", "a/b", "/tmp", "", " ")]),
    Case("grpc_load_names", [grpc_load("a\\b"), grpc_load(_LONG), grpc_load("simple")]),
    Case("grpc_unload_names", [grpc_unload(".."), grpc_unload("../simple"),
                               grpc_unload(""), grpc_unload(_LONG)]),
    Case("grpc_stats_names", [Grpc("ModelStatistics", {"name": "../simple"}),
                              Grpc("ModelStatistics", {"name": ".."})]),
    Case("grpc_infer_names", [Grpc("ModelInfer", {"model_name": "../simple"}),
                              Grpc("ModelInfer", {"model_name": ""})]),
    Case("names_index_after", [READY_INDEX]),
    Case("load_leading_dots", [load("..dots"), READY_INDEX], newer=_VALIDATE,
         expect=[_refused("..dots"), {"status": 200, "body": [
             {"name": "dotted.name", "version": "1", "state": "READY"},
             {"name": "simple", "version": "1", "state": "READY"}]}]),
]

# A name Triton takes that its Python backend then cannot serve here.
_PYTHON_STUB = ("Triton takes the name (its index lists the folder, current Triton's "
                "ValidateModelName accepts it), but its Python backend cannot load a model "
                "from that folder on this bench: ")
_NAME_DEPARTURES = [
    Case("grpc_load_unicode", [grpc_load("modèle"), grpc_infer("modèle"),
                               grpc_unload("modèle")],
         departure=_PYTHON_STUB + "the stub, started without a UTF-8 locale, fails to import "
         "'modèle/1/model.py' (UnicodeEncodeError: 'ascii' codec, recorded); infercore loads "
         "and serves it",
         expect=[{"code": "OK"}, {"code": "OK", "response": {"model_name": "modèle"}},
                 {"code": "OK"}]),
    Case("grpc_load_space", [grpc_load("with space"), grpc_infer("with space"),
                             grpc_unload("with space")],
         departure=_PYTHON_STUB + "the load of 'with space' does not answer within the "
         "step's 15 s (recorded: DEADLINE_EXCEEDED; the cause was not investigated); "
         "infercore loads and serves it",
         expect=[{"code": "OK"}, {"code": "OK", "response": {"model_name": "with space"}},
                 {"code": "OK"}]),
]

# -- other control modes -----------------------------------------------------------------------
_REFUSED = [
    Case("load_refused", [load("simple"), INDEX]),
    Case("unload_refused", [unload("simple"), READY_INDEX]),
    Case("load_unknown_refused", [load("nope")]),
    Case("load_override_refused", [load("simple", {"config": _config()})]),
    Case("grpc_load_refused", [grpc_load("simple")]),
    Case("grpc_unload_refused", [grpc_unload("simple")]),
    Case("refused_then_infer", [infer_simple()]),
]

_STARTUP_MODELS = [add_sub(), add_sub("other"), add_sub("multi", versions=(1, 2, 3))]

SUITES = [
    Suite("repository_explicit", "repository", _EXPLICIT_MODELS,
          ["--model-control-mode=explicit"],
          _INDEX_CASES + _LOAD_CASES + _OVERRIDE_CASES + _ENSEMBLE_CASES),
    Suite("repository_names", "repository", _NAME_MODELS, ["--model-control-mode=explicit"],
          _NAME_CASES),
    Suite("repository_name_departures", "repository",
          [add_sub("modèle"), add_sub("with space")], ["--model-control-mode=explicit"],
          _NAME_DEPARTURES),
    Suite("repository_none", "repository", _STARTUP_MODELS, [],
          [Case("index", [INDEX]), Case("grpc_index", [GRPC_INDEX])] + _REFUSED),
    Suite("repository_poll", "repository", _STARTUP_MODELS,
          ["--model-control-mode=poll", "--repository-poll-secs=3600"],
          [Case("index", [INDEX])] + _REFUSED),
    Suite("repository_none_broken", "repository", [add_sub(), broken_config(), init_fails()],
          ["--exit-on-error=false"],
          [Case("index", [INDEX, Http("GET", "/v2/health/ready")]),
           Case("grpc_index", [GRPC_INDEX, Grpc("ServerReady")]),
           Case("infer_broken", [grpc_infer("broken"), grpc_infer("init_fails"), grpc_infer()])],
          wait_ready=False),
    Suite("repository_load_model", "repository", _STARTUP_MODELS,
          ["--model-control-mode=explicit", "--load-model=simple", "--load-model=multi"],
          [Case("index", [INDEX]),
           Case("load_other", [load("other"), READY_INDEX]),
           Case("unload_startup_model", [unload("simple"), INDEX])]),
    Suite("repository_load_model_star", "repository", _STARTUP_MODELS,
          ["--model-control-mode=explicit", "--load-model=*"],
          [Case("index", [INDEX])]),
    Suite("repository_startup_load_model_none_mode", "repository", _STARTUP_MODELS,
          ["--load-model=simple"], startup=True,
          startup_note="--load-model outside explicit mode"),
    Suite("repository_startup_star_and_name", "repository", _STARTUP_MODELS,
          ["--model-control-mode=explicit", "--load-model=*", "--load-model=simple"],
          startup=True),
    Suite("repository_startup_load_unknown", "repository", _STARTUP_MODELS,
          ["--model-control-mode=explicit", "--load-model=nope"], startup=True),
    Suite("repository_startup_broken", "repository", [add_sub(), broken_config()], [],
          startup=True),
]



# -- backends Triton has and infercore does not --------------------------------------------
def _foreign(name: str, selector: str, model_file: str) -> Model:
    config = f'''
name: "{name}"
{selector}
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
'''
    return Model(name, config, {f"1/{model_file}": "not a real model"})


_FOREIGN_MODELS = [
    add_sub(),
    _foreign("trt", 'backend: "tensorrt"', "model.plan"),
    _foreign("tf", 'platform: "tensorflow_savedmodel"', "model.savedmodel/.keep"),
    _foreign("ov", 'backend: "openvino"', "model.xml"),
]

# infercore keeps Triton's message whole, then says which backends it has (#27): a client
# matching Triton's words still matches, and the user learns what to do instead.
_NAMES_ITS_BACKENDS = ("Triton's text is kept whole; infercore adds that it has no such "
                       "backend and names the backends it has")


def _no_backend(backend: str) -> str:
    return (f"Invalid argument: unable to find backend library for backend '{backend}', try "
            f"specifying runtime on the model configuration. infercore has no '{backend}' "
            "backend; the backends here are onnxruntime, python, pytorch (more can be added "
            "as plugins, see docs/backends.md)")


def _load_failed(name: str, backend: str) -> str:
    return f"load failed for model '{name}': version 1 is at UNAVAILABLE state: " \
           f"{_no_backend(backend)};\n"


_NOT_READY = {"status": 400, "body": {"error": "Model version not ready"}}

_FOREIGN_CASES = [
    Case("load_tensorrt", [load("trt"), ready("trt"), infer_simple()],
         departure=_NAMES_ITS_BACKENDS,
         expect=[{"status": 400, "body": {"error": _load_failed("trt", "tensorrt")}},
                 _NOT_READY, {"status": 200, "body": {"model_name": "simple"}}]),
    Case("load_tensorflow", [load("tf"), ready("tf")], departure=_NAMES_ITS_BACKENDS,
         expect=[{"status": 400, "body": {"error": _load_failed("tf", "tensorflow")}},
                 _NOT_READY]),
    Case("load_openvino", [load("ov")], departure=_NAMES_ITS_BACKENDS,
         expect=[{"status": 400, "body": {"error": _load_failed("ov", "openvino")}}]),
    Case("grpc_load_tensorrt", [grpc_load("trt"), grpc_infer()], departure=_NAMES_ITS_BACKENDS,
         expect=[{"code": "INVALID_ARGUMENT", "details": _load_failed("trt", "tensorrt")},
                 {"code": "OK", "response": {"model_name": "simple"}}]),
    Case("index_after", [INDEX], departure=_NAMES_ITS_BACKENDS, expect=[{"status": 200, "body": [
        {"name": "ov", "version": "1", "state": "UNAVAILABLE", "reason": _no_backend("openvino")},
        {"name": "simple", "version": "1", "state": "READY"},
        {"name": "tf", "version": "1", "state": "UNAVAILABLE",
         "reason": _no_backend("tensorflow")},
        {"name": "trt", "version": "1", "state": "UNAVAILABLE",
         "reason": _no_backend("tensorrt")}]}]),
]

SUITES.append(Suite("repository_foreign_backends", "repository", _FOREIGN_MODELS,
                    ["--model-control-mode=explicit", "--load-model=simple"], _FOREIGN_CASES))
