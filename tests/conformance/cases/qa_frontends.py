"""What Triton's own QA tests of the protocol frontends (qa/L0_http, qa/L0_grpc,
qa/L0_shared_memory, ...) rely on, found by running those tests against both servers
with Python-backend stand-ins for their models.

- L0_http's ``test_content_encoding_chunked_manually`` sends a body it chunk-encoded
  itself with ``requests``, which then also sends a Content-Length (the framed length):
  Triton reads the body by its Transfer-Encoding.
- Current Triton refuses an output named twice, in two texts: the HTTP frontend's own
  (L0_http ``test_duplicate_output_names``) and core's, which gRPC passes on (L0_grpc
  ``test_duplicate_output_names_rejected``).
- Current Triton's shared-memory manager refuses keys with the Python backend's reserved
  prefix (L0_shared_memory ``test_register_reserved_names``) and names an offset + byte
  size past size_t an overflow (``test_infer_integer_overflow``).
- L0_shared_memory's ``TestSharedMemoryUnregister`` unregisters regions while a request
  uses them: Triton 2.51 refuses (current Triton defers it to the request's end), and
  unregistering all forgets only the regions not in use.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from ..case import Case, Grpc, Http, Shm, Suite, raw_tensor
from ..models import add_sub, identity, python_model

_HOST = "Host: 127.0.0.1:{http_port}\r\n"
_RAW_MODEL = "identity_fp32"  # L0_http's onnx_zero_1_float32: one FP32 [-1], batching
_A = np.arange(16, dtype=np.int32).reshape(1, 16)
_B = np.ones((1, 16), dtype=np.int32)
_SIMPLE_JSON = {"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": _A.reshape(-1).tolist()},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": _B.reshape(-1).tolist()}]}
_GOOD_HTTP = Http("POST", "/v2/models/simple/infer", json=_SIMPLE_JSON)
_GOOD_GRPC = Grpc("ModelInfer", {"model_name": "simple", "inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": ["1", "16"]},
    {"name": "INPUT1", "datatype": "INT32", "shape": ["1", "16"]}]},
    raw=[raw_tensor(_A), raw_tensor(_B)])


def _chunked_request(path: str, body: bytes, headers: str = "") -> bytes:
    """``body`` chunk-encoded by the caller, sent with Transfer-Encoding: chunked and a
    Content-Length of the encoded bytes: what ``requests`` sends for L0_http's test."""
    encoded = b"%X\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (f"POST {path} HTTP/1.1\r\n{_HOST}Transfer-Encoding: chunked\r\n{headers}"
            f"Content-Length: {len(encoded)}\r\n\r\n")
    return head.encode("latin-1") + encoded


_RAW_FP32 = np.arange(8, dtype=np.float32).tobytes()

_HTTP_CASES = [
    Case("chunked_raw_binary_with_content_length", [
        Http("POST", f"/v2/models/{_RAW_MODEL}/infer", raw=_chunked_request(
            f"/v2/models/{_RAW_MODEL}/infer", _RAW_FP32,
            "Inference-Header-Content-Length: 0\r\n")), _GOOD_HTTP],
         note="L0_http test_content_encoding_chunked_manually: the chunked body, not its "
              "framing, is the raw input"),
    Case("chunked_json_with_content_length", [
        Http("POST", "/v2/models/simple/infer", raw=_chunked_request(
            "/v2/models/simple/infer", json.dumps(_SIMPLE_JSON).encode())), _GOOD_HTTP]),
    Case("chunked_with_content_length_then_request_on_new_connection", [
        Http("POST", "/v2/models/simple/infer", raw=_chunked_request(
            "/v2/models/simple/infer", json.dumps(_SIMPLE_JSON).encode())),
        Http("GET", "/v2/health/ready")]),
]

# -- an output named twice -------------------------------------------------------------------
_TWICE_HTTP = ("current Triton's HTTP frontend refuses a request naming an output twice, "
               "in its own words (server qa/L0_http/http_test.py test_duplicate_output_names, "
               "server pull request #8741); 2.51 answers the output once")
_TWICE_GRPC = ("current Triton's core refuses a request naming an output twice (core pull "
               "request #493); over gRPC its text is what "
               "qa/L0_grpc/python_unit_test.py test_duplicate_output_names_rejected reads; "
               "2.51 answers the output once")
_TWICE_HTTP_ERROR = {"error": "Duplicate output name 'OUTPUT0' is not allowed in a request"}

_HTTP_CASES += [
    Case("output_twice_json", [
        Http("POST", f"/v2/models/{_RAW_MODEL}/infer", json={
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8],
                        "data": [list(range(8))]}],
            "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}),
        Http("GET", "/v2/health/live")],
         newer=_TWICE_HTTP, expect=[{"status": 400, "body": _TWICE_HTTP_ERROR}, {"status": 200}]),
    Case("output_twice_binary_parameters_differ", [
        Http("POST", "/v2/models/simple/infer", json={
            **_SIMPLE_JSON, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                                        {"name": "OUTPUT0"}]}), _GOOD_HTTP],
         newer=_TWICE_HTTP, expect=[{"status": 400, "body": _TWICE_HTTP_ERROR}, {"status": 200}]),
    Case("output_twice_after_another", [
        Http("POST", "/v2/models/simple/infer", json={
            **_SIMPLE_JSON, "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1"},
                                        {"name": "OUTPUT0"}]}), _GOOD_HTTP],
         newer=_TWICE_HTTP, expect=[{"status": 400, "body": _TWICE_HTTP_ERROR}, {"status": 200}]),
    Case("output_twice_grpc", [
        Grpc("ModelInfer", {**_GOOD_GRPC.request,
                            "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]},
             raw=_GOOD_GRPC.raw), Grpc("ServerLive")],
         newer=_TWICE_GRPC,
         expect=[{"code": "INVALID_ARGUMENT",
                  "details": "output 'OUTPUT0' already exists in request"},
                 {"code": "OK"}]),
    Case("output_once_each_grpc", [
        Grpc("ModelInfer", {**_GOOD_GRPC.request,
                            "outputs": [{"name": "OUTPUT1"}, {"name": "OUTPUT0"}]},
             raw=_GOOD_GRPC.raw)]),
]

# -- shared memory ---------------------------------------------------------------------------
_RESERVED = "triton_python_backend_shm_region_"
_RESERVED_NEWER = (
    "current Triton refuses a key that starts with the Python backend's reserved prefix "
    f"'{_RESERVED}' (server src/shared_memory_manager.cc RegisterSystemSharedMemory, checked "
    "before anything else; qa/L0_shared_memory/shared_memory_test.py "
    "test_register_reserved_names); 2.51 opens the key like any other")
_OVERFLOW_NEWER = (
    "current Triton names an offset + byte size past size_t an overflow (server "
    "src/shared_memory_manager.cc GetMemoryInfo, after the offset check; "
    "qa/L0_shared_memory/shared_memory_test.py test_infer_integer_overflow); 2.51 answers "
    "'Invalid offset + byte size'")
_KEY_IN = "/qaf_in_{run}"
_KEY_OUT = "/qaf_out_{run}"
_SIZE_MAX = 2**64 - 1


def _reserved_message(name: str, key: str) -> str:
    return (f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{_RESERVED}'")


def _register(name: str, key: str, byte_size: int = 64, offset: int = 0) -> Http:
    return Http("POST", f"/v2/systemsharedmemory/region/{name}/register",
                json={"key": key, "offset": offset, "byte_size": byte_size})


def _shm_infer(output_offset: int, output_byte_size: int) -> Http:
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 64}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_offset": output_offset,
            "shared_memory_byte_size": output_byte_size}}]}
    return Http("POST", "/v2/models/simple/infer", json=body)


_IN_BYTES = raw_tensor(_B)
_STATUS = Http("GET", "/v2/systemsharedmemory/status")
_UNREGISTER_ALL = Http("POST", "/v2/systemsharedmemory/unregister")

_SHM_CASES = [
    Case("register_reserved_prefix_missing_object", [
        _register("reserved", f"{_RESERVED}_{{run}}"), _STATUS],
         newer=_RESERVED_NEWER,
         expect=[{"status": 400, "body": {"error": _reserved_message(
             "reserved", f"{_RESERVED}_{{run}}")}}, {"status": 200, "body": []}]),
    Case("register_reserved_prefix_existing_object", [
        Shm("create", f"/{_RESERVED}{{run}}", 64),
        _register("reserved", f"{_RESERVED}{{run}}"), _UNREGISTER_ALL,
        Shm("unlink", f"/{_RESERVED}{{run}}")],
         newer=_RESERVED_NEWER,
         expect=[{"shm": "created"},
                 {"status": 400, "body": {"error": _reserved_message(
                     "reserved", f"{_RESERVED}{{run}}")}}, {"status": 200}, None]),
    Case("register_reserved_prefix_after_slash", [
        Shm("create", f"/{_RESERVED}{{run}}", 64),
        _register("slashed", f"/{_RESERVED}{{run}}"), _STATUS, _UNREGISTER_ALL,
        Shm("unlink", f"/{_RESERVED}{{run}}")],
         note="the prefix is refused only at the very start of the key: with a leading "
              "slash the key is taken, as by 2.51"),
    Case("register_reserved_prefix_grpc", [
        Grpc("SystemSharedMemoryRegister", {"name": "reserved", "key": f"{_RESERVED}x{{run}}",
                                            "offset": "0", "byte_size": "64"}),
        Grpc("SystemSharedMemoryStatus")],
         newer=_RESERVED_NEWER,
         expect=[{"code": "INVALID_ARGUMENT",
                  "details": _reserved_message("reserved", f"{_RESERVED}x{{run}}")},
                 {"code": "OK"}]),
    Case("output_offset_plus_size_overflows", [
        Shm("create", _KEY_IN, 64, _IN_BYTES), Shm("create", _KEY_OUT, 64),
        _register("in", _KEY_IN), _register("out", _KEY_OUT),
        _shm_infer(32, 2**64 - 32), _shm_infer(0, 64), _UNREGISTER_ALL,
        Shm("unlink", _KEY_IN), Shm("unlink", _KEY_OUT)],
         newer=_OVERFLOW_NEWER,
         expect=[None, None, {"status": 200}, {"status": 200},
                 {"status": 400, "body": {"error": (
                     f"Integer overflow detected: byte_size ({2**64 - 32}) + offset (32) "
                     f"exceeds maximum value ({_SIZE_MAX}) for region 'out'")}},
                 {"status": 200}, {"status": 200}, None, None]),
    Case("output_offset_plus_size_past_region", [
        Shm("create", _KEY_IN, 64, _IN_BYTES), Shm("create", _KEY_OUT, 64),
        _register("in", _KEY_IN), _register("out", _KEY_OUT),
        _shm_infer(60, 64), _shm_infer(2**64 - 32, 64), _UNREGISTER_ALL,
        Shm("unlink", _KEY_IN), Shm("unlink", _KEY_OUT)],
         note="L0_shared_memory test_infer_byte_size_out_of_bound and "
              "test_infer_offset_out_of_bound (an offset that is -32 as a signed integer)"),
]

# -- unregistering a region a request in flight uses -----------------------------------------
# L0_shared_memory's TestSharedMemoryUnregister unregisters while an inference runs; here
# the model itself makes the calls from inside execute, so the request is in flight
# without any timing: CALLS names them (METHOD URL, or METHOD PATH under the
# shared-memory routes of the HTTP port given as PORT, where a URL could not hold a
# placeholder: gRPC's base64 bytes), ANSWERS has "status body" for each.
_CALLER = "shm_caller"
_CALLER_PY = '''
import urllib.error
import urllib.request

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(line, port):
    method, url = line.split(" ", 1)
    if url.startswith("/"):
        url = "http://127.0.0.1:%d/v2/systemsharedmemory%s" % (port, url)
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return "%d %s" % (answer.status, answer.read().decode())
    except urllib.error.HTTPError as error:
        return "%d %s" % (error.code, error.read().decode())


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            calls = pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()
            port = pb_utils.get_input_tensor_by_name(request, "PORT")
            port = 0 if port is None else int(port.as_numpy()[0])
            answers = [_call(c.decode(), port) for c in calls.reshape(-1)]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", data.copy()),
                pb_utils.Tensor("ANSWERS", np.array(answers, dtype=np.object_))]))
        return responses
'''
_CALLER_CONFIG = f'''
name: "{_CALLER}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "CALLS" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "PORT" data_type: TYPE_INT32 dims: [ 1 ] optional: true }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "ANSWERS" data_type: TYPE_STRING dims: [ -1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
_SHM_URL = "http://127.0.0.1:{http_port}/v2/systemsharedmemory"


def _caller_infer(*calls: str) -> Http:
    """INPUT0 read from region 'in', OUTPUT0 written to region 'out', while the model
    makes ``calls`` (METHOD PATH under /v2/systemsharedmemory)."""
    lines = [f"{c.split(' ', 1)[0]} {_SHM_URL}{c.split(' ', 1)[1]}" for c in calls]
    return Http("POST", f"/v2/models/{_CALLER}/infer", json={
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [16],
             "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 64}},
            {"name": "CALLS", "datatype": "BYTES", "shape": [len(lines)], "data": lines}],
        "outputs": [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_byte_size": 64}},
            {"name": "ANSWERS"}]})


def _caller_grpc(*calls: str) -> Grpc:
    """``_caller_infer`` over gRPC."""
    return Grpc("ModelInfer", {"model_name": _CALLER, "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": ["16"], "parameters": {
            "shared_memory_region": {"string_param": "in"},
            "shared_memory_byte_size": {"int64_param": "64"}}},
        {"name": "CALLS", "datatype": "BYTES", "shape": [str(len(calls))],
         "contents": {"bytes_contents": [
             base64.b64encode(call.encode()).decode() for call in calls]}},
        {"name": "PORT", "datatype": "INT32", "shape": ["1"],
         "contents": {"int_contents": ["{http_port}"]}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": {"string_param": "out"},
            "shared_memory_byte_size": {"int64_param": "64"}}}, {"name": "ANSWERS"}]})


_KEY_SPARE = "/qaf_spare_{run}"


def _in_use(name: str, *steps, note: str = "") -> Case:
    """Regions 'in', 'out' and 'spare' registered, ``steps`` run, everything cleaned up."""
    return Case(name, [
        Shm("create", _KEY_IN, 64, _IN_BYTES), Shm("create", _KEY_OUT, 64),
        Shm("create", _KEY_SPARE, 64), _register("in", _KEY_IN), _register("out", _KEY_OUT),
        _register("spare", _KEY_SPARE), *steps, _UNREGISTER_ALL, _STATUS,
        Shm("unlink", _KEY_IN), Shm("unlink", _KEY_OUT), Shm("unlink", _KEY_SPARE)],
        note=note)


# Current Triton defers an unregistration while a request uses the region (2.51 refused
# it): the region stays listed and usable until the request is answered, then goes.
_DEFERRED = ("current Triton's src/shared_memory_manager.cc (UnregisterHelper) marks a region "
             "a request still holds 'awaiting_unregister_' and answers success; the region "
             "goes once the request is done, and qa/L0_shared_memory's "
             "TestSharedMemoryUnregister expects that; Triton 2.51 refused the call: "
             "'it is currently in use'")


def _status_line(*names: str) -> str:
    """The model's record of a status call listing ``names`` (keys as _in_use makes them)."""
    return "200 " + json.dumps(
        [{"name": n, "key": f"/qaf_{n}_{{run}}", "offset": 0, "byte_size": 64} for n in names],
        separators=(",", ":"))


def _listed(*names: str) -> dict[str, object]:
    return {"status": 200, "body": [
        {"name": n, "key": f"/qaf_{n}_{{run}}", "offset": 0, "byte_size": 64} for n in names]}


def _deferred(name: str, *steps, expect: dict[int, dict[str, object]], note: str = ""
              ) -> Case:
    """An ``_in_use`` case answered as current Triton answers it: ``expect`` by step index
    (6: the in-flight request's answers; 7 on: what follows); the setup is not compared."""
    case = _in_use(name, *steps, note=note)
    answers: list[dict[str, object] | None] = [None] * len(case.steps)
    for index, answer in expect.items():
        answers[index] = answer
    return Case(case.name, case.steps, note=case.note, newer=_DEFERRED, expect=answers)


def _bytes_tensor(*items: str) -> bytes:
    """A BYTES tensor's raw contents: each element's 4-byte little-endian length, then it."""
    return b"".join(len(i.encode()).to_bytes(4, "little") + i.encode() for i in items)


def _answers(*data: str) -> dict[str, object]:
    return {"status": 200, "body": {"outputs": [{"name": "OUTPUT0"}, {"data": list(data)}]}}


_IN_USE_CASES = [
    _deferred("unregister_all_while_in_use",
              _caller_infer("POST /unregister", "GET /status"), _STATUS,
              expect={6: _answers("200 ", _status_line("in", "out")), 7: _listed()},
              note="the region not in use goes at once, the others once the request is done"),
    _deferred("unregister_one_while_in_use",
              _caller_infer("POST /region/in/unregister", "GET /region/in/status"), _STATUS,
              expect={6: _answers("200 ", _status_line("in")), 7: _listed("out", "spare")}),
    _deferred("unregister_output_region_while_in_use",
              _caller_infer("POST /region/out/unregister", "GET /region/out/status"), _STATUS,
              expect={6: _answers("200 ", _status_line("out")), 7: _listed("in", "spare")}),
    _in_use("unregister_unused_region_while_another_in_use",
            _caller_infer("POST /region/spare/unregister", "GET /status"), _STATUS),
    _deferred("infer_after_an_unregister_while_in_use",
              _caller_infer("POST /unregister"), _caller_infer("GET /region/out/status"),
              _STATUS,
              expect={6: _answers("200 "),
                      7: {"status": 404, "body": {
                          "error": "Unable to find shared memory region: 'in'"}},
                      8: _listed()}),
    # (over gRPC the answers are base64 bytes, where no key could be masked: no status)
    _deferred("unregister_while_in_use_grpc",
              _caller_grpc("POST /unregister", "POST /region/out/unregister"),
              Grpc("SystemSharedMemoryStatus"), _STATUS,
              expect={6: {"code": "OK", "response": {"raw_output_contents": [
                          "", base64.b64encode(_bytes_tensor("200 ", "200 ")).decode()]}},
                      7: {"code": "OK"}, 8: _listed()}),
    _in_use("unregister_after_use_grpc",
            _caller_grpc("POST /region/spare/unregister"), Grpc("SystemSharedMemoryStatus"),
            Grpc("SystemSharedMemoryUnregister"), Grpc("SystemSharedMemoryStatus")),
]


SUITES = [
    Suite("qa_frontends_http", "http_infer",
          [add_sub(), identity(_RAW_MODEL, max_batch_size=8)], (), _HTTP_CASES),
    Suite("qa_frontends_shm", "shared_memory", [add_sub()], (), _SHM_CASES,
          infercore_flags=("--allow-client-shm=true",)),
    Suite("qa_frontends_shm_in_use", "shared_memory",
          [python_model(_CALLER, _CALLER_CONFIG, _CALLER_PY)], (), _IN_USE_CASES,
          infercore_flags=("--allow-client-shm=true",)),
]
