"""What Triton's QA trace and log checks (qa/L0_trace, qa/L0_logging) see of the files.

The shell test sets ``trace_count`` on a server that already traced requests and expects
the counted traces in an indexed file (``<file>.0``) as soon as the count runs out, before
the server stops, with the settings then reading back ``trace_count`` "0". Then it asks
for out-of-range counts, rates and log frequencies. A count given at start-up runs out the
same way. Trace files are compared by what
they hold, counted (``TraceFile``): traces per model, and the timestamps the core records
per name (REQUEST_START to REQUEST_END); the frontends' own (HTTP_RECV_*, HTTP_SEND_*,
INFER_RESPONSE_COMPLETE) are compared in trace_frontends.py.

Triton's QA log format test (qa/L0_logging/log_format_test.py) sends an input whose name
holds log records of its own and expects them, with escaping turned off
(``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``), as lines of the verbose log: the line Triton
writes for a request refused before it runs (``Infer failed: <message>``). The lines are
read by what they contain, so the location of the line that carries them (Triton's C++
source, infercore's Python) is not compared.

Cases run in order against one server; each relies on the state the one before left.
"""

from __future__ import annotations

from typing import Any

from ..case import Case, Http, LogFile, Suite, TraceFile
from ..models import ADD_SUB_JSON, add_sub

GLOBAL = "/v2/trace/setting"
MODEL = "/v2/models/simple/trace/setting"



# what the core records of a request (the QA test counts COMPUTE_INPUT_END)
_CORE = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END")


def _infer() -> Http:
    return Http("POST", "/v2/models/simple/infer", json=ADD_SUB_JSON)


def _post(body: Any, path: str = GLOBAL) -> Http:
    return Http("POST", path, json=body)


_COUNT = [
    Case("traced_before_count", [_infer(), _infer(), Http("GET", MODEL)],
         note="two traces for the first settings, written when they are replaced"),
    Case("set_count", [_post({"trace_count": "2"})]),
    Case("count_runs_out", [_infer(), _infer(), _infer(), Http("GET", MODEL),
                            TraceFile("{tmp}/count.log.0", _CORE)],
         note="the two counted traces go to <file>.0 once the count is 0; the third "
              "request is not traced"),
    Case("count_out_of_range", [_post({"trace_count": "10000000000"}, MODEL),
                                _post({"trace_rate": "10000000000"}, MODEL),
                                _post({"log_frequency": "10000000000"}, MODEL),
                                Http("GET", MODEL)]),
]

_COUNT_AT_START = [
    Case("count_runs_out", [_infer(), _infer(), _infer(), Http("GET", MODEL),
                            TraceFile("{tmp}/start.log.0", _CORE), TraceFile("{tmp}/start.log")],
         note="a count given at start-up: the same indexed file, and no main file"),
]

_INJECTED = "I0205 18:34:18.707423 1 file.cc:123] THIS ENTRY WAS INJECTED"
_LOG = "{tmp}/server.log"

_INJECTION = [
    Case("refused_request_unescaped", [
        Http("POST", "/v2/models/simple/infer", json={"inputs": [
            {"name": f"\n{_INJECTED}\n{_INJECTED}", "datatype": "FP32", "shape": [1, 3],
             "data": [0.5, 1.5, 2.5]}]}),
        LogFile(_LOG, "THIS ENTRY WAS INJECTED", until="Please provide all required input(s)"),
        _infer()],
        note="the input name's records appear as lines of their own"),
]

SUITES = [
    Suite("qa_trace_log_count", "trace", [add_sub()],
          ["--trace-config=triton,file={tmp}/count.log", "--trace-config=level=TIMESTAMPS",
           "--trace-config=rate=1"], _COUNT),
    Suite("qa_trace_log_count_at_start", "trace", [add_sub()],
          ["--trace-config=triton,file={tmp}/start.log", "--trace-config=level=TIMESTAMPS",
           "--trace-config=rate=1", "--trace-config=count=2"], _COUNT_AT_START),
    Suite("qa_trace_log_log_injection", "logging", [add_sub()],
          [f"--log-file={_LOG}", "--log-verbose=1"], _INJECTION,
          env={"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"}),
]
