"""Model folders as Triton's QA (qa/L0_lifecycle) lays them out: version folders whose
names are no plain number ("03", "abc", "1x": Triton 2.51 ignores them without a word),
version 0, version policies that select some versions or name a missing one, a Python
model without a config (it loads, with no inputs), and what Triton says of each, in its
index, its answers and its log."""

from __future__ import annotations

from ..case import Case, Grpc, Http, LogFile, Model, Suite
from ..models import ADD_SUB_JSON, ADD_SUB_PY, add_sub

_LOG = "{tmp}/lifecycle.log"


def _versions(name: str, folders: tuple[str, ...], policy: str) -> Model:
    model = add_sub(name, extra=f"version_policy: {policy}")
    return Model(name, model.config, {f"{folder}/model.py": ADD_SUB_PY for folder in folders})


_MODELS = [
    add_sub(),
    # not "-1": Triton 2.51 reads it as version 2^64 - 1, whose file its stub then looks
    # for under that number, and the load never ends (seen, not recorded)
    _versions("odd_versions", ("1", "03", "abc", "1x"), "{ all { } }"),
    _versions("zero_version", ("0",), "{ all { } }"),
    _versions("latest_two", ("1", "2", "10"), "{ latest { num_versions: 2 } }"),
    _versions("specific_missing", ("1",), "{ specific { versions: [ 1, 4 ] } }"),
    Model("no_config", None, {"1/model.py": ADD_SUB_PY}),
]


def _lines(contains: str) -> LogFile:
    return LogFile(_LOG, contains, messages=True, sort=True)


def _infer(model: str, version: str = "") -> Http:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return Http("POST", path, json=ADD_SUB_JSON)


_CASES = [
    Case("index", [Http("POST", "/v2/repository/index", json={}), Grpc("RepositoryIndex")]),
    Case("metadata", [Http("GET", "/v2/models/odd_versions"),
                      Http("GET", "/v2/models/latest_two"),
                      Http("GET", "/v2/models/specific_missing")]),
    Case("infer_versions", [
        _infer("odd_versions"), _infer("odd_versions", "3"), _infer("odd_versions", "1"),
        _infer("zero_version", "0"), _infer("latest_two", "1"), _infer("latest_two", "10"),
        _infer("no_config"), _infer("simple")]),
    Case("logged", [_lines(text) for text in (
        "odd_versions:", "odd_versions_0", "loaded 'odd_versions'", "no_config:", "no_config_0",
        "loaded 'no_config'", "is specified for model", "| odd_versions ", "| no_config ")]),
]

SUITES = [
    Suite("qa_lifecycle_model_folders", "lifecycle", _MODELS,
          ["--exit-on-error=false", "--strict-readiness=false", f"--log-file={_LOG}"],
          _CASES),
]

# A model folder with a config and no version folder: Triton 2.51 logs the load's failure
# and the model table says "Not loaded", but the index does not list the model at all.
_NO_VERSIONS = Model("no_versions", add_sub("no_versions").config, {"README": "no versions"})
_NO_VERSIONS_LOG = "{tmp}/no_versions.log"


def _no_versions_lines(contains: str) -> LogFile:
    return LogFile(_NO_VERSIONS_LOG, contains, messages=True)


_NO_VERSIONS_CASES = [
    Case("index", [Http("POST", "/v2/repository/index", json={}), Grpc("RepositoryIndex")]),
    Case("requests", [Http("GET", "/v2/models/no_versions/ready"),
                      Http("GET", "/v2/models/no_versions"), _infer("no_versions"),
                      _infer("simple")]),
    Case("logged", [_no_versions_lines("no_versions")]),
]

SUITES += [
    Suite("qa_lifecycle_no_versions", "lifecycle", [add_sub(), _NO_VERSIONS],
          ["--exit-on-error=false", "--strict-readiness=false",
           f"--log-file={_NO_VERSIONS_LOG}"], _NO_VERSIONS_CASES),
    Suite("qa_lifecycle_no_versions_exits", "lifecycle", [add_sub(), _NO_VERSIONS],
          startup=True),
    Suite("qa_lifecycle_no_versions_explicit", "lifecycle", [add_sub(), _NO_VERSIONS],
          ["--model-control-mode=explicit", "--load-model=simple",
           f"--log-file={_NO_VERSIONS_LOG}"], [
              Case("load", [Http("POST", "/v2/repository/models/no_versions/load", json={}),
                            Grpc("RepositoryModelLoad", {"model_name": "no_versions"})]),
              *_NO_VERSIONS_CASES]),
]
SUITES.append(
    # strict readiness: is a server whose one model has no versions ready?
    Suite("qa_lifecycle_no_versions_strict", "lifecycle", [add_sub(), _NO_VERSIONS],
          ["--exit-on-error=false"], [Case("health", [
              Http("GET", "/v2/health/ready"), Http("GET", "/v2/health/live")])],
          wait_ready=False))
