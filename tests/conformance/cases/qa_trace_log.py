"""What Triton's QA trace checks (qa/L0_trace/test.sh) see of trace files and counts.

The shell test sets ``trace_count`` on a server that already traced requests and expects
the counted traces in an indexed file (``<file>.0``) as soon as the count runs out, before
the server stops, with the settings then reading back ``trace_count`` "0". Then it asks
for out-of-range counts, rates and log frequencies. A count given at start-up runs out the
same way. Trace files are compared by what
they hold, counted (``TraceFile``): traces per model, and the timestamps the core records
per name (REQUEST_START to REQUEST_END). The frontends' own timestamps (HTTP_RECV_*,
HTTP_SEND_*, INFER_RESPONSE_COMPLETE) are left out: infercore's trace files do not have
them yet.

Cases run in order against one server; each relies on the state the one before left.
"""

from __future__ import annotations

from typing import Any

from ..case import Case, Http, Suite, TraceFile
from ..models import add_sub

GLOBAL = "/v2/trace/setting"
MODEL = "/v2/models/simple/trace/setting"

_INPUTS = {"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}


# what the core records of a request (the QA test counts COMPUTE_INPUT_END)
_CORE = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END")


def _infer() -> Http:
    return Http("POST", "/v2/models/simple/infer", json=_INPUTS)


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

SUITES = [
    Suite("qa_trace_log_count", "trace", [add_sub()],
          ["--trace-config=triton,file={tmp}/count.log", "--trace-config=level=TIMESTAMPS",
           "--trace-config=rate=1"], _COUNT),
    Suite("qa_trace_log_count_at_start", "trace", [add_sub()],
          ["--trace-config=triton,file={tmp}/start.log", "--trace-config=level=TIMESTAMPS",
           "--trace-config=rate=1", "--trace-config=count=2"], _COUNT_AT_START),
]
