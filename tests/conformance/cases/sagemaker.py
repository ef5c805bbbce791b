"""The SageMaker and Vertex AI frontends: their routes, environment variables and flags.

Each suite runs one of the two frontends alone on the suite's ``{http_port}`` (the KServe
HTTP and gRPC frontends off, ``ports=False``), so the steps reach it as they reach HTTP
elsewhere. The settings tritonserver reads from its environment come from ``Suite.env``:
``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` and ``SAGEMAKER_TRITON_PING_MODE`` for SageMaker;
``AIP_PREDICT_ROUTE``, ``AIP_HEALTH_ROUTE``, ``AIP_MODE`` and ``AIP_HTTP_PORT`` for
Vertex AI.

The multi-model endpoint suites load model archives from ``{tmp}/archives/<archive>``,
folders beside the repository (their ``Model`` names reach out of it with ``../``), as
SageMaker unpacks an archive and posts its folder's ``url``.

Models: ``simple`` (add_sub), ``other`` (add_sub), ``repeat`` (decoupled_repeat),
``oom`` (a model whose execute fails with an out-of-memory text), ``oom_load`` (a model
whose initialize fails so), ``broken`` (a config that does not parse).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from ..case import Case, Http, Model, Suite, binary_body, raw_tensor
from ..models import add_sub, decoupled_repeat, python_model

_A = list(range(1, 17))
_B = [1] * 16
_INFER = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": _A},
                     {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": _B}]}
_INFER_BYTES = json.dumps(_INFER, separators=(",", ":")).encode()
_WRONG_INPUT = {"inputs": [{"name": "NOPE", "shape": [1, 16], "datatype": "INT32", "data": _A},
                           {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
                            "data": _B}]}
_BINARY_OUT = {**_INFER, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                                     {"name": "OUTPUT1"}]}
_A_RAW = raw_tensor(np.array([_A], dtype=np.int32))
_B_RAW = raw_tensor(np.array([_B], dtype=np.int32))
_BINARY_HEADER = {"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
     "parameters": {"binary_data_size": 64}},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
     "parameters": {"binary_data_size": 64}}]}
_BINARY_BODY, _KSERVE_HEADERS = binary_body(_BINARY_HEADER, _A_RAW, _B_RAW)
_HEADER_SIZE = len(_BINARY_BODY) - 128
_SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
_VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="

OOM_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            error=pb_utils.TritonError("CUDA out of memory while running")) for _ in requests]
'''

OOM_LOAD_PY = '''
class TritonPythonModel:
    def initialize(self, args):
        raise MemoryError("no room for this model")

    def execute(self, requests):
        return None
'''


def _oom(name: str, model_py: str) -> Model:
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, model_py)


def _archive(archive: str, model: Model) -> Model:
    """``model`` in the archive folder ``{tmp}/archives/<archive>``."""
    return replace(model, name=f"../archives/{archive}/{model.name}")


def _binary(mime: str, size: int | str = _HEADER_SIZE) -> tuple[tuple[str, str], ...]:
    return (("Content-Type", f"{mime}{size}"),)


def _sagemaker_flags(*extra: str) -> list[str]:
    return ["--model-repository={tmp}/models", "--allow-http=false", "--allow-grpc=false",
            "--allow-metrics=false", "--allow-sagemaker=true", "--sagemaker-port={http_port}",
            *extra]


def _vertex_flags(*extra: str) -> list[str]:
    return ["--model-repository={tmp}/models", "--allow-http=false", "--allow-grpc=false",
            "--allow-metrics=false", "--allow-vertex-ai=true", "--vertex-ai-port={http_port}",
            *extra]


def _load(model_name: str, archive: str, *headers: tuple[str, str]) -> Http:
    return Http("POST", "/models", json={"model_name": model_name,
                                         "url": f"{{tmp}}/archives/{archive}"},
                headers=headers)


_INVOKE = Http("POST", "/invocations", json=_INFER)

# -- SageMaker: one model, /ping and /invocations ---------------------------------------
_SINGLE = [
    Case("ping", [Http("GET", "/ping")]),
    Case("ping_post", [Http("POST", "/ping"), Http("GET", "/ping")]),
    Case("ping_head", [Http("HEAD", "/ping")]),
    Case("ping_query", [Http("GET", "/ping?verbose=1")]),
    Case("ping_trailing_slash", [Http("GET", "/ping/"), Http("GET", "/ping")]),
    Case("invocations", [_INVOKE]),
    Case("invocations_get", [Http("GET", "/invocations"), _INVOKE]),
    Case("invocations_query", [Http("POST", "/invocations?x=1", json=_INFER)]),
    Case("invocations_binary_output", [Http("POST", "/invocations", json=_BINARY_OUT)]),
    Case("invocations_binary_input",
         [Http("POST", "/invocations", body=_BINARY_BODY,
               headers=_binary(_SAGEMAKER_MIME))]),
    Case("invocations_binary_mime_not_first",
         [Http("POST", "/invocations", body=_BINARY_BODY,
               headers=(("Content-Type", f"text/plain; {_SAGEMAKER_MIME}{_HEADER_SIZE}"),)),
          _INVOKE]),
    Case("invocations_binary_size_too_large",
         [Http("POST", "/invocations", body=_BINARY_BODY,
               headers=_binary(_SAGEMAKER_MIME, len(_BINARY_BODY) + 1)), _INVOKE]),
    Case("invocations_binary_size_negative",
         [Http("POST", "/invocations", body=_BINARY_BODY,
               headers=_binary(_SAGEMAKER_MIME, -1)), _INVOKE]),
    Case("invocations_binary_size_not_a_number",
         [Http("POST", "/invocations", body=_A_RAW + _B_RAW,
               headers=_binary(_SAGEMAKER_MIME, "abc")), _INVOKE],
         note="atoi reads 0: the body is the raw inputs, in order"),
    Case("invocations_binary_size_whole_body",
         [Http("POST", "/invocations", body=_INFER_BYTES,
               headers=_binary(_SAGEMAKER_MIME, len(_INFER_BYTES)))]),
    Case("invocations_binary_size_zero",
         [Http("POST", "/invocations", body=_A_RAW + _B_RAW,
               headers=_binary(_SAGEMAKER_MIME, 0)), _INVOKE]),
    Case("invocations_kserve_header_ignored",
         [Http("POST", "/invocations", body=_BINARY_BODY, headers=_KSERVE_HEADERS),
          _INVOKE],
         note="Inference-Header-Content-Length is not read here: the body is JSON"),
    Case("invocations_vertex_mime_ignored",
         [Http("POST", "/invocations", body=_BINARY_BODY, headers=_binary(_VERTEX_MIME)),
          _INVOKE]),
    Case("invocations_gzip_not_decoded",
         [Http("POST", "/invocations", body=b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
               headers=(("Content-Encoding", "gzip"),)), _INVOKE]),
    Case("invocations_accept_gzip_ignored",
         [Http("POST", "/invocations", json=_INFER, headers=(("Accept-Encoding", "gzip"),))]),
    Case("invocations_bad_json", [Http("POST", "/invocations", body="{"), _INVOKE]),
    Case("invocations_empty_body", [Http("POST", "/invocations", body=""), _INVOKE]),
    Case("invocations_wrong_input", [Http("POST", "/invocations", json=_WRONG_INPUT),
                                     _INVOKE]),
    Case("kserve_route_not_served", [Http("GET", "/v2/health/ready"),
                                     Http("POST", "/v2/models/simple/infer", json=_INFER)]),
    Case("unknown_route", [Http("GET", "/"), Http("POST", "/predict", json=_INFER)]),
    Case("models_none_loaded", [Http("GET", "/models")]),
    Case("models_get_unknown", [Http("GET", "/models/simple")]),
    Case("models_invoke_unknown", [Http("POST", "/models/simple/invoke", json=_INFER)],
         note="a model of the repository is not a multi-model endpoint model"),
    Case("models_delete_unknown", [Http("DELETE", "/models/simple")]),
    Case("models_load_not_explicit",
         [Http("POST", "/models", json={"model_name": "m", "url": "{tmp}/models"}),
          Http("GET", "/models")]),
    Case("models_put", [Http("PUT", "/models"), Http("PATCH", "/models/simple")]),
    Case("models_trailing_slash", [Http("GET", "/models/"), Http("GET", "/models/simple/")]),
    Case("ping_after_errors", [Http("GET", "/ping"), _INVOKE]),
]

# -- SageMaker: the multi-model endpoint API ----------------------------------------------
_M1 = Http("POST", "/models/m1/invoke", json=_INFER)
_MME = [
    Case("list_empty", [Http("GET", "/models")]),
    Case("load", [_load("m1", "a1"), Http("GET", "/models"), Http("GET", "/models/m1")]),
    Case("invoke", [_M1]),
    Case("invoke_get_reads_the_model", [Http("GET", "/models/m1/invoke")]),
    Case("invoke_put", [Http("PUT", "/models/m1/invoke"), _M1]),
    Case("invoke_wrong_input",
         [Http("POST", "/models/m1/invoke", json=_WRONG_INPUT), _M1]),
    Case("invoke_bad_json", [Http("POST", "/models/m1/invoke", body="[1,"), _M1]),
    Case("invoke_binary",
         [Http("POST", "/models/m1/invoke", body=_BINARY_BODY,
               headers=_binary(_SAGEMAKER_MIME))]),
    Case("invoke_binary_output", [Http("POST", "/models/m1/invoke", json=_BINARY_OUT)]),
    Case("invoke_binary_size_too_large",
         [Http("POST", "/models/m1/invoke", body=_BINARY_BODY,
               headers=_binary(_SAGEMAKER_MIME, 100000)), _M1]),
    Case("invoke_not_loaded", [Http("POST", "/models/m9/invoke", json=_INFER), _M1]),
    Case("invocations_default_not_loaded", [_INVOKE]),
    Case("load_same_url_again", [_load("m1b", "a1"), Http("GET", "/models")]),
    Case("load_same_name_other_url", [_load("m1", "a2"), Http("GET", "/models")]),
    Case("load_target_model_header",
         [_load("h2", "a2", ("X-Amzn-SageMaker-Target-Model", "t2")),
          Http("GET", "/models/h2"),
          Http("POST", "/models/h2/invoke", json=_INFER,
               headers=(("X-Amzn-SageMaker-Target-Model", "t2"),)),
          Http("POST", "/models/h2/invoke", json=_INFER)],
         note="the listing keeps the name posted; the model loads, and is invoked, under "
              "the header's name"),
    Case("unload_target_model_header",
         [Http("DELETE", "/models/h2", headers=(("X-Amzn-SageMaker-Target-Model", "t2"),)),
          Http("GET", "/models/h2")]),
    Case("load_through_model_path",
         [Http("POST", "/models/anything", json={"model_name": "m3", "url": "{tmp}/archives/a3"}),
          Http("GET", "/models/m3"), Http("POST", "/models/m3/invoke", json=_INFER)],
         note="a POST to /models/<name> is a load, whatever the name"),
    Case("unload", [Http("DELETE", "/models/m3"), Http("GET", "/models/m3"),
                    Http("DELETE", "/models/m3")]),
    Case("unload_no_name", [Http("DELETE", "/models")]),
    Case("load_missing_folder",
         [Http("POST", "/models", json={"model_name": "n", "url": "{tmp}/archives/none"}),
          Http("GET", "/models/n")]),
    Case("load_config_at_archive_root", [_load("flat", "flat/simple"), Http("GET", "/models")],
         note="outside /opt/ml/models/<hash>/model a config at the url itself names no "
              "repository"),
    Case("load_dev_url",
         [Http("POST", "/models", json={"model_name": "d", "url": "/dev/shm"}),
          Http("POST", "/models", json={"model_name": "d", "url": "/tmp/../proc/self"}),
          Http("GET", "/models")],
         newer="src/sagemaker_server.cc (ParseSageMakerRequest, SageMakerMMELoadModel): a "
               "url whose normalised absolute path starts with /dev/, /proc/ or /sys/ is "
               "answered 400 with no body before anything is registered; 2.51 registers "
               "it and fails the load",
         expect=[{"status": 400, "body": ""}, {"status": 400, "body": ""},
                 {"status": 200, "body": {"models": [
                     {"modelName": "m1", "modelUrl": "{tmp}/archives/a1"}]}}]),
    Case("load_broken_model", [_load("b", "broken"), Http("GET", "/models/b"),
                               _load("b", "broken")],
         note="a failed load unregisters the archive: it may be posted again"),
    Case("load_oom", [_load("o", "oom_load"), Http("GET", "/models/o")]),
    Case("invoke_oom", [_load("e", "oom"), Http("POST", "/models/e/invoke",
                                                json={"inputs": [{"name": "IN", "shape": [1],
                                                                  "datatype": "INT32",
                                                                  "data": [1]}]}),
                        Http("DELETE", "/models/e")]),
    Case("invoke_decoupled",
         [_load("r", "repeat"),
          Http("POST", "/models/r/invoke", json={"inputs": [{"name": "IN", "shape": [2],
                                                             "datatype": "INT32",
                                                             "data": [1, 2]}]}),
          Http("DELETE", "/models/r"), _M1]),
    Case("list_after", [Http("GET", "/models")]),
    Case("unload_last", [Http("DELETE", "/models/m1"), Http("GET", "/models"),
                         Http("POST", "/models/m1/invoke", json=_INFER)]),
    Case("load_again_after_unload", [_load("m1", "a1"), _M1, Http("DELETE", "/models/m1")]),
]

_MME_ARCHIVES = [_archive("a1", add_sub("simple"))]
_MME_MODELS = [
    add_sub("simple"),
    *_MME_ARCHIVES,
    _archive("a2", add_sub("simple")),
    _archive("a3", add_sub("other")),
    _archive("flat", add_sub("simple")),
    _archive("broken", Model("model", "name: \"model\"\nbackend: \"python\"\nthis is not a "
                                      "config\n", {"1/model.py": ""})),
    _archive("oom_load", _oom("model", OOM_LOAD_PY)),
    _archive("oom", _oom("model", OOM_PY)),
    _archive("repeat", decoupled_repeat("model")),
]

# Load bodies that 2.51 answers 400 and then dies on (std::out_of_range: the parsed
# fields are read although parsing failed): one suite each, as the server is gone after.
_CRASHES_2_51 = (
    "src/sagemaker_server.cc (Handle, LOAD MODEL): when ParseSageMakerRequest has "
    "answered 400 (a body that is no JSON, a model_name or url that is not a string), "
    "SageMakerMMELoadModel is not called ('if (!parse_load_map.empty())'); 2.51 calls it "
    "and the server dies")


def _load_body_suite(label: str, body: str, error: str) -> Suite:
    return Suite(
        f"sagemaker_mme_load_{label}", "sagemaker", _MME_ARCHIVES,
        _sagemaker_flags("--model-control-mode=explicit"),
        [Case("load", [Http("POST", "/models", body=body), _load("m1", "a1"),
                       Http("GET", "/models")],
              newer=_CRASHES_2_51,
              expect=[{"status": 400, "body": {"error": error}}, {"status": 200},
                      {"status": 200, "body": {"models": [
                          {"modelName": "m1", "modelUrl": "{tmp}/archives/a1"}]}}])],
        ports=False)


# -- Vertex AI ----------------------------------------------------------------------------
_PREDICT = Http("POST", "/predict", json=_INFER)


def _redirect(target: str, method: str = "POST", **kwargs) -> Http:
    return Http(method, "/predict", headers=(("X-Vertex-Ai-Triton-Redirect", target),),
                **kwargs)


_VERTEX = [
    Case("health", [Http("GET", "/health")]),
    Case("health_post", [Http("POST", "/health"), Http("GET", "/health")]),
    Case("predict", [_PREDICT]),
    Case("predict_get", [Http("GET", "/predict"), _PREDICT]),
    Case("predict_query", [Http("POST", "/predict?x=1", json=_INFER)]),
    Case("predict_binary_input",
         [Http("POST", "/predict", body=_BINARY_BODY, headers=_binary(_VERTEX_MIME))]),
    Case("predict_binary_output", [Http("POST", "/predict", json=_BINARY_OUT)]),
    Case("predict_binary_size_too_large",
         [Http("POST", "/predict", body=_BINARY_BODY,
               headers=_binary(_VERTEX_MIME, 100000)), _PREDICT]),
    Case("predict_binary_mime_not_first",
         [Http("POST", "/predict", body=_BINARY_BODY,
               headers=(("Content-Type", f"x; {_VERTEX_MIME}{_HEADER_SIZE}"),)), _PREDICT]),
    Case("predict_sagemaker_mime_ignored",
         [Http("POST", "/predict", body=_BINARY_BODY, headers=_binary(_SAGEMAKER_MIME)),
          _PREDICT]),
    Case("predict_kserve_header_ignored",
         [Http("POST", "/predict", body=_BINARY_BODY, headers=_KSERVE_HEADERS), _PREDICT]),
    Case("predict_wrong_input", [Http("POST", "/predict", json=_WRONG_INPUT), _PREDICT]),
    Case("predict_bad_json", [Http("POST", "/predict", body="nope"), _PREDICT]),
    Case("redirect_infer", [_redirect("v2/models/other/infer", json=_INFER)]),
    Case("redirect_infer_version", [_redirect("v2/models/other/versions/1/infer",
                                              json=_INFER)]),
    Case("redirect_infer_unknown", [_redirect("v2/models/nope/infer", json=_INFER),
                                    _PREDICT]),
    Case("redirect_metadata", [_redirect("v2/models/simple")]),
    Case("redirect_ready", [_redirect("v2/models/simple/ready"),
                            _redirect("v2/models/nope/ready")]),
    Case("redirect_config", [_redirect("v2/models/simple/config")]),
    Case("redirect_server", [_redirect("v2"), _redirect("v2/health/live"),
                             _redirect("v2/health/ready")]),
    Case("redirect_health_unknown", [_redirect("v2/health/started"), _PREDICT]),
    Case("redirect_get", [_redirect("v2/health/live", method="GET"), _PREDICT]),
    Case("redirect_shared_memory", [_redirect("v2/systemsharedmemory/status"),
                                    _redirect("v2/cudasharedmemory/status")]),
    Case("redirect_repository_index", [_redirect("v2/repository/index")]),
    Case("redirect_repository_unload", [_redirect("v2/repository/models/other/unload"),
                                        _PREDICT]),
    Case("redirect_not_routed", [_redirect("v2/models/simple/generate", json={}),
                                 _redirect("v2/logging"), _redirect("v2/trace/setting"),
                                 _redirect("/v2"), _redirect("v2/nothing"), _PREDICT]),
    Case("redirect_empty", [_redirect(""), _PREDICT]),
    Case("kserve_route_not_served", [Http("GET", "/v2/health/live"),
                                     Http("POST", "/v2/models/simple/infer", json=_INFER)]),
    Case("unknown_route", [Http("POST", "/"), Http("POST", "/predict/x", json=_INFER),
                           Http("POST", "/invocations", json=_INFER), _PREDICT]),
]

_VERTEX_ENV = {"AIP_PREDICT_ROUTE": "/predict", "AIP_HEALTH_ROUTE": "/health"}
_TWO_MODELS = [add_sub("simple"), add_sub("other")]

SUITES = [
    Suite("sagemaker_single", "sagemaker", [add_sub()], _sagemaker_flags(), _SINGLE,
          ports=False, env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple"}),
    Suite("sagemaker_default_unset", "sagemaker", [add_sub()], _sagemaker_flags(),
          [Case("invocations", [_INVOKE, Http("GET", "/ping")])], ports=False),
    Suite("sagemaker_ping_live", "sagemaker", [add_sub()], _sagemaker_flags(),
          [Case("ping", [Http("GET", "/ping")])], ports=False,
          env={"SAGEMAKER_TRITON_PING_MODE": "live"}),
    Suite("sagemaker_ping_unknown_mode", "sagemaker", [add_sub()], _sagemaker_flags(),
          [Case("ping", [Http("GET", "/ping"), _INVOKE])], ports=False,
          env={"SAGEMAKER_TRITON_PING_MODE": "started",
               "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple"}),
    Suite("sagemaker_mme", "sagemaker", _MME_MODELS,
          _sagemaker_flags("--model-control-mode=explicit"), _MME, ports=False,
          env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple"}),
    _load_body_suite("not_json", '{"url":',
                     "failed to parse the request JSON buffer: Invalid value. at 7"),
    _load_body_suite("name_not_a_string", '{"model_name":5,"url":"{tmp}/archives/a1"}',
                     "attempt to access JSON non-string as string"),
    _load_body_suite("url_not_a_string", '{"model_name":"m4","url":["x"]}',
                     "attempt to access JSON non-string as string"),
    Suite("sagemaker_safe_range_covers", "sagemaker", [add_sub()],
          ["--model-repository={tmp}/models", "--allow-grpc=false", "--allow-metrics=false",
           "--allow-http=false", "--allow-sagemaker=true", "--sagemaker-port={http_port}",
           "--sagemaker-safe-port-range=1-65535", "--sagemaker-thread-count=2"],
          [Case("ping", [Http("GET", "/ping")])], ports=False),
    Suite("vertex_default_model", "vertex", _TWO_MODELS,
          _vertex_flags("--vertex-ai-default-model=simple", "--vertex-ai-thread-count=2"),
          _VERTEX, ports=False, env=_VERTEX_ENV,
          infercore_flags=["--allow-client-shm=true"]),
    Suite("vertex_single_model", "vertex", [add_sub("other")], _vertex_flags(),
          [Case("predict", [_PREDICT, Http("GET", "/health")])], ports=False,
          env=_VERTEX_ENV),
    Suite("vertex_route_pattern", "vertex", [add_sub()], _vertex_flags(),
          [Case("predict", [Http("POST", "/v1/endpoints/12/deployedModels/7:predict",
                                 json=_INFER),
                            Http("POST", "/v1/endpoints/x/deployedModels/7:predict",
                                 json=_INFER),
                            Http("GET", "/v1/health/3")])],
          ports=False, env={"AIP_PREDICT_ROUTE": "/v1/endpoints/[0-9]+/deployedModels/"
                                                 "[0-9]+:predict",
                            "AIP_HEALTH_ROUTE": "/v1/health/[0-9]+"},
          ),
    Suite("vertex_aip_mode", "vertex", [add_sub()],
          ["--model-repository={tmp}/models", "--allow-metrics=false"],
          [Case("predict", [_PREDICT, Http("GET", "/health")])], ports=False,
          env={**_VERTEX_ENV, "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "{http_port}"},
          ),
    # start-up: the Vertex AI service's creation, and flag values tritonserver takes (the
    # flags' other checks are cases/flags.py's)
    Suite("vertex_startup_no_predict_route", "vertex", [add_sub()], _vertex_flags(),
          startup=True, ports=False, env={"AIP_HEALTH_ROUTE": "/health"}),
    Suite("vertex_startup_no_health_route", "vertex", [add_sub()], _vertex_flags(),
          startup=True, ports=False, env={"AIP_PREDICT_ROUTE": "/predict"}),
    Suite("vertex_startup_two_models", "vertex", _TWO_MODELS, _vertex_flags(),
          startup=True, ports=False, env=_VERTEX_ENV),
    Suite("vertex_startup_default_not_loaded", "vertex", _TWO_MODELS,
          _vertex_flags("--vertex-ai-default-model=nope"), startup=True, ports=False,
          env=_VERTEX_ENV),
    Suite("vertex_startup_port_trailing_text", "vertex", [add_sub()],
          ["--model-repository={tmp}/models", "--allow-http=false", "--allow-grpc=false",
           "--allow-metrics=false", "--allow-vertex-ai=true", "--vertex-ai-port={http_port}x"],
          startup=True, ports=False, env=_VERTEX_ENV,
          startup_note="std::stoi reads the number and ignores what follows: it serves"),
    Suite("vertex_startup_aip_port_not_a_number", "vertex", [add_sub()],
          ["--model-repository={tmp}/models", "--allow-metrics=false"], startup=True,
          ports=False, env={**_VERTEX_ENV, "AIP_HTTP_PORT": "eighty"}),
    Suite("sagemaker_startup_safe_range_ignored_when_off", "sagemaker", [add_sub()],
          ["--model-repository={tmp}/models", "--allow-grpc=false", "--allow-metrics=false",
           "--http-port={http_port}", "--sagemaker-safe-port-range=1-2", "--bogus"],
          startup=True, ports=False,
          startup_note="the range is read but not checked (SageMaker is off): the unknown "
                       "flag is what stops the server"),
    Suite("sagemaker_startup_thread_count_fraction", "sagemaker", [add_sub()],
          _sagemaker_flags("--sagemaker-thread-count=1.5"), startup=True, ports=False,
          startup_note="std::stoi reads 1 and ignores the rest: it serves"),
    Suite("sagemaker_startup_thread_count_zero", "sagemaker", [add_sub()],
          _sagemaker_flags("--sagemaker-thread-count=0"), startup=True, ports=False),
]
