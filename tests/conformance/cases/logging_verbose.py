"""What Triton's HTTP frontend logs at verbose level 1: one line per request received.

Triton's HTTP server logs ``HTTP request: <method> <path>`` for every request while the
verbose level is 1 or more, the method as libevhtp numbers it (GET 0, HEAD 1, POST 2,
PUT 3, DELETE 4, OPTIONS 8, PATCH 15). Triton's QA (qa/L0_logging/test.sh) counts the
lines of the log holding ``/v2/logging``: two after two settings reads at verbose 1, no
more than three after the POST that sets the level to 0 (the POST itself is logged, the
reads after it are not). Lines are compared by message (``LogFile.messages``): the
source location is Triton's C++ file in one and infercore's Python in the other.

Cases run in order against one server; each relies on the state the one before left.
"""

from __future__ import annotations

from ..case import Case, Http, LogFile, Suite
from ..models import ADD_SUB_JSON, add_sub

_LOG = "{tmp}/verbose.log"
_LOGGING = "/v2/logging"



def _lines(contains: str, until: str | None = None) -> LogFile:
    return LogFile(_LOG, contains, until=until, messages=True)


_CASES = [
    Case("settings_reads_logged", [Http("GET", _LOGGING), Http("GET", _LOGGING),
                                   _lines(_LOGGING)],
         note="qa/L0_logging expects exactly two lines here"),
    Case("verbose_off_is_logged_then_nothing",
         [Http("POST", _LOGGING, json={"log_verbose_level": 0}), Http("GET", _LOGGING),
          Http("GET", _LOGGING), _lines(_LOGGING)]),
    Case("verbose_on_again", [Http("POST", _LOGGING, json={"log_verbose_level": 1}),
                              Http("GET", _LOGGING + "?verbose=1"),
                              _lines(_LOGGING)],
         note="the POST came at verbose 0; the path is logged without its query"),
    Case("methods_numbered", [Http("PUT", _LOGGING), Http("DELETE", _LOGGING),
                              Http("OPTIONS", _LOGGING), Http("PATCH", _LOGGING),
                              Http("HEAD", _LOGGING),
                              _lines(_LOGGING, until="HTTP request: 1 ")]),
    Case("infer_logged", [Http("POST", "/v2/models/simple/infer", json=ADD_SUB_JSON),
                          Http("POST", "/v2/models/missing/infer", json=ADD_SUB_JSON),
                          _lines("/infer", until="/missing/infer")]),
]

SUITES = [
    Suite("logging_verbose_http", "logging", [add_sub()],
          [f"--log-file={_LOG}", "--log-verbose=1"], _CASES),
]
