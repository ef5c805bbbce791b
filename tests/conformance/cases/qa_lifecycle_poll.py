"""A polling server (``--model-control-mode=poll``) finding what changed in its
repository, as Triton's QA (qa/L0_lifecycle) changes it: a version folder added (the
latest one takes over, the old one goes), a config that can no longer be read (the
serving version stays), a model folder added, a model folder removed.

Each change is a RepoFile step; the server finds it at its next poll (every second
here), which a Settled step waits for. Cases run in order against one server. The log
lines of the loads are not compared: Triton 2.51 loads a Python model twice after it
appears (its stub writes ``__pycache__`` into the version folder, which the next poll
takes for a change), a count that depends on when the polls fall.
"""

from __future__ import annotations

from ..case import Case, Http, LogFile, RepoFile, Settled, Suite
from ..models import ADD_SUB_JSON, ADD_SUB_PY, add_sub

_LOG = "{tmp}/poll.log"
_INDEX = Http("POST", "/v2/repository/index", json={})


def _infer(model: str, version: str = "") -> Http:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return Http("POST", path, json=ADD_SUB_JSON)


_CASES = [
    Case("start", [_INDEX]),
    Case("version_added", [
        RepoFile("write", "{tmp}/models/simple/2/model.py", ADD_SUB_PY),
        Settled(_INDEX, pending="UNLOADING", until='"version": "2", "state": "READY"'),
        Settled(_INDEX, pending='"version": "1", "state": "READY"'),
        _infer("simple"), _infer("simple", "1")]),
    Case("config_broken", [
        RepoFile("write", "{tmp}/models/simple/config.pbtxt", "name: \"simple\"\nnonsense {"),
        LogFile(_LOG, "Poll failed for model directory 'simple'", messages=True),
        _INDEX, _infer("simple")]),
    Case("model_added", [
        # the version first: a poll between the two writes then finds no config yet
        RepoFile("write", "{tmp}/models/other/1/model.py", ADD_SUB_PY),
        RepoFile("write", "{tmp}/models/other/config.pbtxt", add_sub("other").config or ""),
        Settled(_INDEX, pending="LOADING",
                until='"name": "other", "version": "1", "state": "READY"'),
        _infer("other")]),
    Case("model_removed", [
        RepoFile("remove", "{tmp}/models/other"),
        Settled(_INDEX, pending='"other"'),
        # Triton answers a request a moment after the index no longer lists the model;
        # then it has no versions (a name it knew: "has no available versions")
        Settled(_infer("other"), pending='"model_name"'),
        _infer("simple")]),
]

SUITES = [
    Suite("qa_lifecycle_poll", "lifecycle", [add_sub()],
          ["--model-control-mode=poll", "--repository-poll-secs=1", f"--log-file={_LOG}"],
          _CASES),
]
