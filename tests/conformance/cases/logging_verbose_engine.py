"""What Triton logs at verbose level 1 as models load, run requests and unload: the lines
Triton's QA (qa/L0_logging/test.sh) counts in a verbose log, each compared by message.

Triton's core logs "loading: <model>:<version>" and "successfully loaded '<model>'" at
info level, and at verbose level 1 the instance it creates, its backend thread, each
request's states (INITIALIZED, PENDING, EXECUTING, RELEASED) and their unloading; its
backends (here the Python backend) log TRITONBACKEND_ModelInitialize, each instance's
initialization (the first line at info level), every execution ("executing N requests",
"released N requests") and the finalization. Lines that hold addresses or timings (the
"prepared:" request dump, HTTP buffers) are not compared.

Cases run in order against one server (explicit model control: ``simple`` loaded at
start-up); each LogFile step reads the whole log as it stands.
"""

from __future__ import annotations

from ..case import Case, Http, LogFile, Suite
from ..models import ADD_SUB_JSON, add_sub

_LOG = "{tmp}/engine.log"


def _lines(contains: str, until: str | None = None) -> LogFile:
    return LogFile(_LOG, contains, until=until, messages=True)


_INFER = Http("POST", "/v2/models/simple/infer", json=ADD_SUB_JSON)

_CASES = [
    Case("loaded_at_start_up", [
        _lines("loading: "), _lines("successfully loaded"),
        _lines("TRITONBACKEND_ModelInitialize"), _lines("TRITONBACKEND_ModelInstanceInitialize"),
        _lines("Creating instance"), _lines("Starting backend thread")]),
    Case("one_request", [
        _INFER, _lines("Setting state from", until="EXECUTING to RELEASED"),
        _lines("executing 1 requests"), _lines("released 1 requests")]),
    Case("a_request_with_an_id", [
        Http("POST", "/v2/models/simple/infer", json={**ADD_SUB_JSON, "id": "seven"}),
        _lines("[request id: seven] Setting state",
               until="[request id: seven] Setting state from EXECUTING")]),
    Case("unloaded", [
        Http("POST", "/v2/repository/models/simple/unload", json={}),
        _lines("Finalize", until="TRITONBACKEND_ModelFinalize"),
        _lines("Stopping backend thread"), _lines("successfully unloaded")]),
    Case("loaded_again", [
        Http("POST", "/v2/repository/models/simple/load", json={}),
        _lines("loading: "), _lines("successfully loaded"),
        _lines("TRITONBACKEND_ModelInstanceInitialize"), _INFER]),
]

SUITES = [
    Suite("logging_verbose_engine", "logging", [add_sub()],
          [f"--log-file={_LOG}", "--log-verbose=1", "--model-control-mode=explicit",
           "--load-model=simple"], _CASES),
]
