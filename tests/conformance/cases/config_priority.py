"""``dynamic_batching.priority_levels`` at the ends of its type (uint64), as Triton 2.51
reads them.

2^64 - 1 levels is a valid config: Triton loads the model at once (its queues are made
per level as requests come, not one per level up front) and serves requests at any
priority, the default level answering those at 0. One more, 2^64, is no uint64: the
config's text cannot be read, and the model's poll fails "failed to read text proto".
2^64 - 1 levels without a default priority level is refused as any other config whose
default level is outside [1, levels]. The last case is a request that is answered.
"""

from __future__ import annotations

from ..case import Case, Grpc, Http, LogFile, Suite
from ..models import ADD_SUB_JSON, add_sub

_MAX = 2**64 - 1
_LOG = "{tmp}/priority.log"


def _levels(name: str, levels: int | str, default: int | None, policy: str = "") -> object:
    default_text = "" if default is None else f" default_priority_level: {default}"
    return add_sub(name, extra=f"dynamic_batching {{ priority_levels: {levels}{default_text}"
                               f"{policy} }}")


_MODELS = [
    add_sub(),
    _levels("levels_max", _MAX, 1),
    _levels("levels_max_default_top", _MAX, _MAX),
    # the last level with a policy of its own: one request at a time may wait there
    _levels("levels_max_top_policy", _MAX, 1,
            f" priority_queue_policy {{ key: {_MAX} value: {{ max_queue_size: 1 }} }}"),
    _levels("levels_max_no_default", _MAX, None),
    _levels("levels_over", 2**64, 1),
    _levels("levels_negative", -1, 1),
]


def _infer(model: str, priority: int | None = None) -> Http:
    body = dict(ADD_SUB_JSON)
    if priority is not None:
        body["parameters"] = {"priority": priority}
    return Http("POST", f"/v2/models/{model}/infer", json=body)


def _grpc_infer(model: str, priority: int) -> Grpc:
    inputs = [{"name": i["name"], "datatype": "INT32", "shape": ["1", "16"],
               "contents": {"intContents": i["data"]}} for i in ADD_SUB_JSON["inputs"]]
    return Grpc("ModelInfer", {"modelName": model, "inputs": inputs,
                               "parameters": {"priority": {"uint64Param": str(priority)}}})


_CASES = [
    Case("index", [Http("POST", "/v2/repository/index", json={}), Grpc("RepositoryIndex")]),
    Case("config_of_max_levels", [Http("GET", "/v2/models/levels_max/config"),
                                  Grpc("ModelConfig", {"name": "levels_max_top_policy"})]),
    Case("infer_at_every_end", [
        _infer("levels_max"), _infer("levels_max", 0), _infer("levels_max", 1),
        _infer("levels_max", 7), _infer("levels_max", _MAX),
        _infer("levels_max_default_top"), _infer("levels_max_default_top", 1),
        _infer("levels_max_top_policy", _MAX), _grpc_infer("levels_max", _MAX),
        _grpc_infer("levels_max_default_top", 12345)]),
    Case("refused_models", [_infer("levels_over"), _infer("levels_max_no_default"),
                            _infer("levels_negative"), _infer("simple")]),
    # why: the index names a model whose poll failed without a reason; the log says it
    Case("refusals_logged", [LogFile(_LOG, "Poll failed for model directory", messages=True,
                                         sort=True)]),
]

SUITES = [
    # not strict: ready once the loads are done, the refused models notwithstanding
    Suite("config_priority_levels_range", "repository", _MODELS,
          ["--exit-on-error=false", "--strict-readiness=false", f"--log-file={_LOG}"], _CASES),
]
