"""The HTTP/1.1 layer of the HTTP frontend: message framing, compression, connections,
request targets, size bounds, and chunked trailers, as Triton's frontend (libevhtp)
answers them.

Most cases send exact bytes (``raw``) so odd framing reaches the server as written. What
Triton 2.51 does beyond a size it will buffer (a header line or request target of about
8 KiB: it drops the connection without an answer; a chunk size it will never receive: it
waits) is followed where it answers and departed from where it hangs or hangs up: there
infercore answers at once and closes (431, 414, 400), as RFC 9110 asks of a server that
refuses a request for its size.
"""

from __future__ import annotations

import gzip
import json
import zlib

import numpy as np

from ..case import Case, Http, Shm, Suite, binary_body, raw_tensor
from ..models import add_sub

INFER = "/v2/models/simple/infer"
_HOST = "Host: 127.0.0.1:{http_port}\r\n"

_A = np.arange(16, dtype=np.int32).reshape(1, 16)
_B = np.ones((1, 16), dtype=np.int32)
_INFER_JSON = {"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": _A.reshape(-1).tolist()},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": _B.reshape(-1).tolist()},
]}
JSON_BODY = json.dumps(_INFER_JSON, separators=(",", ":")).encode()
_BINARY_HEADER = {"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
     "parameters": {"binary_data_size": 64}},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
     "parameters": {"binary_data_size": 64}}],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}
BINARY_BODY, BINARY_HEADERS = binary_body(_BINARY_HEADER, raw_tensor(_A), raw_tensor(_B))
_HEADER_LENGTH = BINARY_HEADERS[0][1]


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data)


def _raw(method: str, path: str, headers: str = "", body: bytes = b"",
         version: str = "HTTP/1.1", host: bool = True) -> bytes:
    """One request's bytes: request line, Host (unless told), ``headers`` (CRLF lines)."""
    head = f"{method} {path} {version}\r\n" + (_HOST if host else "") + headers + "\r\n"
    return head.encode("latin-1") + body


def _infer_raw(headers: str = "", body: bytes = JSON_BODY) -> bytes:
    return _raw("POST", INFER, f"Content-Length: {len(body)}\r\n" + headers, body)


def _chunked(*chunks: bytes, trailer: str = "") -> bytes:
    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return framed + b"0\r\n" + trailer.encode("latin-1") + b"\r\n"


_CHUNKED = "Transfer-Encoding: chunked\r\n"
_CLOSES = {"status": None, "closed": True}
# Triton 2.51's libevhtp, once it has answered a request from its own thread (a GET, a
# refusal), leaves the next request already in its buffer unparsed until more bytes
# arrive: pipelined requests after such an answer hang there.
_PIPELINE_HANGS = ("pipelined requests: Triton (libevhtp) answers a request it answers on "
                   "its own thread (a GET, a refusal) and then leaves the requests already "
                   "buffered behind it unanswered until more bytes arrive; infercore answers "
                   "them in order, as RFC 9112 asks")
_LIVE = Http("GET", "/v2/health/live")
_GOOD_INFER = Http("POST", INFER, body=JSON_BODY)


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _then_serving(name: str, step: Http, note: str = "", **kwargs) -> Case:
    """A case of ``step`` followed by a good inference on a new connection."""
    return Case(name, [step, _GOOD_INFER], note=note, **kwargs)


# -- chunked request bodies ------------------------------------------------------------------
_CHUNKED_CASES = [
    Case("chunked_json_one_chunk", [Http("POST", INFER, chunks=[JSON_BODY])]),
    Case("chunked_json_many_chunks", [Http("POST", INFER, chunks=_pieces(JSON_BODY, 7))]),
    Case("chunked_json_one_byte_chunks", [Http("POST", INFER, chunks=_pieces(JSON_BODY, 1))]),
    Case("chunked_binary_one_chunk",
         [Http("POST", INFER, chunks=[BINARY_BODY], headers=BINARY_HEADERS)]),
    Case("chunked_binary_many_chunks",
         [Http("POST", INFER, chunks=_pieces(BINARY_BODY, 50), headers=BINARY_HEADERS)]),
    Case("chunked_binary_split_in_header",
         [Http("POST", INFER, headers=BINARY_HEADERS,
               chunks=[BINARY_BODY[:10], BINARY_BODY[10:int(_HEADER_LENGTH) + 3],
                       BINARY_BODY[int(_HEADER_LENGTH) + 3:]])]),
    Case("chunked_empty_body", [Http("POST", "/v2/repository/index", chunks=[])]),
    Case("chunked_uppercase_size",
         [Http("POST", INFER, raw=_raw("POST", INFER, _CHUNKED,
                                        b"%X\r\n%s\r\n0\r\n\r\n" % (len(JSON_BODY), JSON_BODY)))],
         note="a chunk size in upper-case hex"),
    Case("chunked_size_leading_zeros",
         [Http("POST", INFER, raw=_raw("POST", INFER, _CHUNKED,
                                        b"000" + _chunked(JSON_BODY)))]),
    _then_serving("chunked_extension", Http("POST", INFER, raw=_raw(
        "POST", INFER, _CHUNKED,
        b"%x;name=value\r\n%s\r\n0\r\n\r\n" % (len(JSON_BODY), JSON_BODY))),
        departure=("a chunk extension: Triton's libevhtp drops the connection; RFC 9112 "
                   "has a recipient ignore extensions it does not know, and infercore does"),
        expect=[{"status": 200}, None]),
    _then_serving("chunked_malformed_size", Http("POST", INFER, raw=_raw(
        "POST", INFER, _CHUNKED, b"zz\r\n" + JSON_BODY + b"\r\n0\r\n\r\n"))),
    _then_serving("chunked_size_shorter_than_data", Http("POST", INFER, raw=_raw(
        "POST", INFER, _CHUNKED, b"10\r\n" + JSON_BODY + b"\r\n0\r\n\r\n"))),
    _then_serving("chunked_missing_final_chunk", Http("POST", INFER, half_close=True, raw=_raw(
        "POST", INFER, _CHUNKED, b"%x\r\n%s\r\n" % (len(JSON_BODY), JSON_BODY))),
        note="the client sends no last chunk and shuts its side"),
    _then_serving("chunked_cut_in_a_chunk", Http("POST", INFER, half_close=True, raw=_raw(
        "POST", INFER, _CHUNKED, b"%x\r\n%s" % (len(JSON_BODY), JSON_BODY[:40])))),
    Case("chunked_trailer_ignored",
         [Http("POST", INFER, chunks=[JSON_BODY], trailers=[("X-Checksum", "abc")])]),
    _then_serving("chunked_with_content_length", Http("POST", INFER, raw=_raw(
        "POST", INFER, _CHUNKED + "Content-Length: 3\r\n", _chunked(JSON_BODY))),
        note="Transfer-Encoding frames the body; Content-Length still measures the JSON "
             "header (Triton's GetContentLength): its first 3 bytes"),
    Case("chunked_then_keep_alive",
         [Http("POST", INFER, responses=2,
               raw=_raw("POST", INFER, _CHUNKED, _chunked(*_pieces(JSON_BODY, 64)))
               + _raw("GET", "/v2/health/live"))]),
    _then_serving("transfer_encoding_identity", Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Transfer-Encoding: identity\r\nContent-Length: {len(JSON_BODY)}\r\n",
        JSON_BODY)),
        departure=("a Transfer-Encoding whose final coding is not chunked ('identity' is no "
                   "transfer coding in RFC 9112): Triton frames the body by the Content-Length; "
                   "RFC 9112 section 6.1 leaves a server no way to know where such a body "
                   "ends: infercore hangs up without an answer, as Triton does on a request "
                   "it cannot parse"),
        expect=[_CLOSES, None]),
    # other POST endpoints
    Case("chunked_repository_index",
         [Http("POST", "/v2/repository/index", chunks=[b'{"ready"', b":true}"])]),
    Case("chunked_repository_load",
         [Http("POST", "/v2/repository/models/simple/load", chunks=[b'{"parameters"', b":{}}"]),
          Http("GET", "/v2/models/simple/ready")]),
    Case("chunked_shm_register", [
        Shm("create", "/framing_{run}", size=128),
        Http("POST", "/v2/systemsharedmemory/region/framing_{run}/register",
             chunks=[b'{"key":"/framing_{run}",', b'"offset":0,"byte_size":128}']),
        Http("GET", "/v2/systemsharedmemory/region/framing_{run}/status"),
        Http("POST", "/v2/systemsharedmemory/region/framing_{run}/unregister", chunks=[b"{}"]),
        Shm("unlink", "/framing_{run}")]),
    Case("chunked_logging", [Http("POST", "/v2/logging",
                                  chunks=[b'{"log_verbose', b'_level":0}'])]),
    Case("chunked_trace_setting", [Http("POST", "/v2/trace/setting",
                                        chunks=[b'{"log_frequency"', b':"0"}'])]),
    Case("chunked_model_trace_setting",
         [Http("POST", "/v2/models/simple/trace/setting", chunks=[b'{}'])]),
]

# -- Content-Encoding on requests, Accept-Encoding on responses -------------------------------
_GZIP_JSON = gzip.compress(JSON_BODY, mtime=0)
_GZIP_BINARY = gzip.compress(BINARY_BODY, mtime=0)


def _bomb(size: int) -> bytes:
    """gzip data that inflates to ``size`` spaces inside a JSON object, made without
    holding the inflated bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(b"{")]
    block = b" " * (1 << 20)
    for _ in range(size >> 20):
        parts.append(compressor.compress(block))
    parts.append(compressor.compress(b"}"))
    parts.append(compressor.flush())
    return b"".join(parts)


_ENCODING_CASES = [
    Case("gzip_json", [Http("POST", INFER, body=_GZIP_JSON,
                            headers=[("Content-Encoding", "gzip")])]),
    Case("deflate_json", [Http("POST", INFER, body=_deflate(JSON_BODY),
                               headers=[("Content-Encoding", "deflate")])]),
    Case("deflate_raw_stream", [Http("POST", INFER, body=zlib.compress(JSON_BODY)[2:-4],
                                     headers=[("Content-Encoding", "deflate")])],
         note="a raw deflate stream, without the zlib wrapper: it does not inflate"),
    Case("gzip_binary", [Http("POST", INFER, body=_GZIP_BINARY,
                              headers=[("Content-Encoding", "gzip"), *BINARY_HEADERS])],
         note="Inference-Header-Content-Length counts the decompressed header"),
    Case("gzip_chunked", [Http("POST", INFER, chunks=_pieces(_GZIP_JSON, 20),
                               headers=[("Content-Encoding", "gzip")])]),
    Case("identity_encoding", [Http("POST", INFER, body=JSON_BODY,
                                    headers=[("Content-Encoding", "identity")])]),
    Case("gzip_upper_case", [Http("POST", INFER, body=_GZIP_JSON,
                                  headers=[("Content-Encoding", "GZIP")])]),
    _then_serving("unknown_encoding", Http("POST", INFER, body=JSON_BODY,
                                           headers=[("Content-Encoding", "br")])),
    _then_serving("corrupt_gzip", Http("POST", INFER, body=b"\x1f\x8b\x08\x00garbage-data",
                                       headers=[("Content-Encoding", "gzip")]),
                  note="what does not inflate is an empty body (a raw request), not an error"),
    _then_serving("truncated_gzip", Http("POST", INFER, body=_GZIP_JSON[:10],
                                         headers=[("Content-Encoding", "gzip")]),
                  note="a stream cut before its data inflates to nothing"),
    _then_serving("gzip_label_on_plain_body", Http("POST", INFER, body=JSON_BODY,
                                                   headers=[("Content-Encoding", "gzip")])),
    Case("gzip_label_on_repository_index", [Http(
        "POST", "/v2/repository/index", body=b'{"ready":true}',
        headers=[("Content-Encoding", "gzip")])],
        note="only inference reads Content-Encoding"),
    Case("accept_gzip_json", [Http("POST", INFER, body=JSON_BODY,
                                   headers=[("Accept-Encoding", "gzip")])]),
    Case("accept_deflate_json", [Http("POST", INFER, body=JSON_BODY,
                                      headers=[("Accept-Encoding", "deflate")])]),
    Case("accept_gzip_binary", [Http("POST", INFER, body=BINARY_BODY,
                                     headers=[*BINARY_HEADERS, ("Accept-Encoding", "gzip")])]),
    Case("accept_weighted", [Http("POST", INFER, body=JSON_BODY, headers=[
        ("Accept-Encoding", "gzip;q=0.5, deflate;q=0.8, identity;q=0.1")])]),
    Case("accept_unknown_only", [Http("POST", INFER, body=JSON_BODY,
                                      headers=[("Accept-Encoding", "br")])]),
    Case("accept_star", [Http("POST", INFER, body=JSON_BODY,
                              headers=[("Accept-Encoding", "*")])]),
    Case("accept_gzip_error", [Http("POST", INFER, body=BINARY_BODY[:-10], headers=[
        *BINARY_HEADERS, ("Accept-Encoding", "gzip")])], note="errors are not compressed"),
    Case("accept_gzip_metadata", [Http("GET", "/v2/models/simple",
                                       headers=[("Accept-Encoding", "gzip")])]),
    Case("gzip_in_accept_gzip_out", [Http("POST", INFER, body=_GZIP_JSON, headers=[
        ("Content-Encoding", "gzip"), ("Accept-Encoding", "gzip")])]),
]

_TWO_LENGTHS = ("two Content-Length fields: Triton reads one of them; two lengths in one "
                "request are the request-smuggling case RFC 9112 tells a server to treat as "
                "an unrecoverable error: infercore's parser refuses the request and the "
                "connection is closed (Triton's answer to a request it cannot parse)")

_LEFTOVER = ("the bytes after a body shorter than sent are no request: Triton (libevhtp), "
             "having answered, leaves them unparsed and the connection hangs; infercore "
             "parses them at once and closes the connection, as Triton does for bytes "
             "that are not HTTP when it reads them")

# -- Content-Length ---------------------------------------------------------------------------
_LENGTH_CASES = [
    Case("no_content_length_post", [Http("POST", "/v2/repository/index", responses=2, raw=_raw(
        "POST", "/v2/repository/index", body=b'{"ready":true}'))],
         note="without a length the body is not the request's; it is read as what follows",
         departure=_LEFTOVER, expect=[{"responses": [{"status": 200}, _CLOSES]}]),
    Case("content_length_short", [Http("POST", INFER, responses=2, raw=_raw(
        "POST", INFER, f"Content-Length: 20\r\nInference-Header-Content-Length: "
        f"{_HEADER_LENGTH}\r\n", BINARY_BODY))],
         departure=_LEFTOVER, expect=[{"responses": [{"status": 400}, _CLOSES]}]),
    _then_serving("content_length_long", Http("POST", INFER, half_close=True, raw=_raw(
        "POST", INFER, f"Content-Length: {len(JSON_BODY) + 50}\r\n", JSON_BODY))),
    _then_serving("content_length_twice_same", Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Content-Length: {len(JSON_BODY)}\r\n" * 2, JSON_BODY)),
        departure=_TWO_LENGTHS, expect=[_CLOSES, None]),
    _then_serving("content_length_twice_different", Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Content-Length: {len(JSON_BODY)}\r\nContent-Length: 5\r\n",
        JSON_BODY)), departure=_TWO_LENGTHS, expect=[_CLOSES, None]),
    _then_serving("content_length_negative", Http("POST", INFER, raw=_raw(
        "POST", INFER, "Content-Length: -1\r\n", JSON_BODY))),
    _then_serving("content_length_not_a_number", Http("POST", INFER, raw=_raw(
        "POST", INFER, "Content-Length: abc\r\n", JSON_BODY))),
    _then_serving("content_length_plus_sign", Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Content-Length: +{len(JSON_BODY)}\r\n", JSON_BODY))),
    _then_serving("content_length_overflows", Http("POST", INFER, raw=_raw(
        "POST", INFER, "Content-Length: 99999999999999999999\r\n", JSON_BODY))),
    Case("content_length_zero_post", [Http("POST", "/v2/repository/index", raw=_raw(
        "POST", "/v2/repository/index", "Content-Length: 0\r\n"))]),
    Case("content_length_spaces", [Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Content-Length:   {len(JSON_BODY)}  \r\n", JSON_BODY))]),
]

# -- methods and versions -----------------------------------------------------------------------
_METHOD_CASES = [
    Case("get_with_body", [Http("GET", "/v2/health/ready", responses=2, raw=_raw(
        "GET", "/v2/health/ready", "Content-Length: 5\r\n", b"hello")
        + _raw("GET", "/v2/health/live"))], departure=_PIPELINE_HANGS,
         expect=[{"responses": [{"status": 200, "body": ""}, {"status": 200, "body": ""}]}]),
    Case("get_with_body_alone", [Http("GET", "/v2/health/ready", raw=_raw(
        "GET", "/v2/health/ready", "Content-Length: 5\r\n", b"hello")), _LIVE]),
    Case("get_chunked_body", [Http("GET", "/v2/models/simple", raw=_raw(
        "GET", "/v2/models/simple", _CHUNKED, _chunked(b"hello")))]),
    Case("head_live", [Http("HEAD", "/v2/health/live")]),
    Case("head_metadata", [Http("HEAD", "/v2/models/simple")]),
    Case("head_infer", [Http("HEAD", INFER)]),
    Case("options_live", [Http("OPTIONS", "/v2/health/live")]),
    Case("options_infer", [Http("OPTIONS", INFER)]),
    Case("options_star", [Http("OPTIONS", "*", raw=_raw("OPTIONS", "*"))]),
    Case("patch_infer", [Http("PATCH", INFER, body=JSON_BODY)]),
    Case("put_infer", [Http("PUT", INFER, body=JSON_BODY)]),
    Case("delete_infer", [Http("DELETE", INFER)]),
    Case("trace_method", [Http("TRACE", "/v2/health/live")]),
    _then_serving("unknown_method", Http("FETCH", "/v2/health/live", raw=_raw(
        "FETCH", "/v2/health/live")), departure=(
            "a method HTTP has not registered: Triton answers 405; infercore's parser "
            "(llhttp) knows the registered methods only, refuses the request, and the "
            "connection is closed, as Triton closes one it cannot parse"),
        expect=[_CLOSES, None]),
    _then_serving("lowercase_method", Http("get", "/v2/health/live", raw=_raw(
        "get", "/v2/health/live"))),
    Case("http_1_0", [Http("GET", "/v2/health/live", responses=2,
                           raw=_raw("GET", "/v2/health/live", version="HTTP/1.0", host=False)
                           + _raw("GET", "/v2/health/live"))],
         note="HTTP/1.0 without keep-alive: the connection closes after the answer"),
    Case("http_1_0_keep_alive", [Http("GET", "/v2/health/live", responses=2, raw=_raw(
        "GET", "/v2/health/live", "Connection: keep-alive\r\n", version="HTTP/1.0",
        host=False) + _raw("GET", "/v2/health/ready"))],
         departure=("HTTP/1.0 keep-alive: Triton (libevhtp) keeps the connection open but "
                    "sends an empty answer without a Content-Length, so the client cannot "
                    "tell where it ends (and the next request hangs, see the pipelining "
                    "departures); infercore frames the answer and serves the next request"),
         expect=[{"responses": [{"status": 200, "body": ""}, {"status": 200, "body": ""}]}]),
    Case("http_1_0_keep_alive_metadata", [Http("GET", "/v2/models/simple", raw=_raw(
        "GET", "/v2/models/simple", "Connection: keep-alive\r\n", version="HTTP/1.0",
        host=False))]),
    Case("http_1_0_infer", [Http("POST", INFER, raw=_raw(
        "POST", INFER, f"Content-Length: {len(JSON_BODY)}\r\n", JSON_BODY,
        version="HTTP/1.0", host=False))]),
    Case("http_1_1_without_host", [Http("GET", "/v2/health/live", raw=_raw(
        "GET", "/v2/health/live", host=False))]),
    _then_serving("http_2_0_version", Http("GET", "/v2/health/live", raw=_raw(
        "GET", "/v2/health/live", version="HTTP/2.0")), departure=(
            "an HTTP/1 request naming version 2.0: Triton answers with an 'HTTP/2.0' status "
            "line over HTTP/1 framing, which no client reads; infercore answers as HTTP/1.1"),
        expect=[{"status": 200, "body": ""}, None]),
    _then_serving("http_version_garbage", Http("GET", "/v2/health/live", raw=_raw(
        "GET", "/v2/health/live", version="HTTX/1.1"))),
    _then_serving("request_line_only_lf", Http("GET", "/v2/health/live", raw=(
        b"GET /v2/health/live HTTP/1.1\nHost: x\n\n"))),
]

# -- connections ------------------------------------------------------------------------------
_CONNECTION_CASES = [
    Case("connection_close", [Http("GET", "/v2/health/live", responses=2, raw=_raw(
        "GET", "/v2/health/live", "Connection: close\r\n") + _raw("GET", "/v2/health/live"))]),
    Case("keep_alive_three", [Http("POST", INFER, responses=3, raw=(
        _infer_raw() + _infer_raw(body=BINARY_BODY, headers=(
            f"Inference-Header-Content-Length: {_HEADER_LENGTH}\r\n"))
        + _raw("GET", "/v2/models/simple")))]),
    Case("keep_alive_after_get", [Http("POST", INFER, responses=3, raw=(
        _infer_raw() + _raw("GET", "/v2/models/simple") + _infer_raw()))],
         departure=_PIPELINE_HANGS, expect=[{"responses": [
             {"status": 200}, {"status": 200}, {"status": 200}]}]),
    Case("pipelined_mixed", [Http("GET", "/v2/health/live", responses=4, raw=(
        _raw("GET", "/v2/health/live") + _infer_raw(body=BINARY_BODY, headers=(
            f"Inference-Header-Content-Length: {_HEADER_LENGTH}\r\n"))
        + _raw("GET", "/v2/models/nope") + _raw("GET", "/v2/health/ready")))],
         departure=_PIPELINE_HANGS, expect=[{"responses": [
             {"status": 200}, {"status": 200}, {"status": 404}, {"status": 200}]}]),
    Case("pipelined_error_then_good", [Http("POST", INFER, responses=2, raw=(
        _infer_raw(body=BINARY_BODY[:-10],
                   headers=f"Inference-Header-Content-Length: {_HEADER_LENGTH}\r\n")
        + _infer_raw()))]),
    Case("pipelined_after_close", [Http("GET", "/v2/health/live", responses=2, raw=(
        _raw("GET", "/v2/health/live", "Connection: close\r\n")
        + _raw("GET", "/v2/health/ready")))]),
    Case("half_close_after_health", [Http("GET", "/v2/health/live", half_close=True)],
         note="answered before the end of the stream is read"),
    Case("expect_continue", [Http("POST", INFER, body=JSON_BODY,
                                  headers=[("Expect", "100-continue")])]),
    Case("expect_unknown", [Http("POST", INFER, body=JSON_BODY,
                                 headers=[("Expect", "something-else")])]),
]

# -- request targets ----------------------------------------------------------------------------
_TARGET_CASES = [
    Case("absolute_form", [Http("GET", "http://127.0.0.1:{http_port}/v2/health/live")]),
    Case("absolute_form_infer", [Http("POST", "http://127.0.0.1:{http_port}" + INFER,
                                      body=JSON_BODY)]),
    Case("percent_encoded_model", [Http("GET", "/v2/models/%73imple")]),
    Case("percent_encoded_infer", [Http("POST", "/v2/models/simple/%69nfer", body=JSON_BODY)]),
    Case("percent_encoded_slash", [Http("GET", "/v2/models/simple%2Fversions%2F1")]),
    Case("percent_encoded_space", [Http("GET", "/v2/models/sim%20ple")]),
    Case("percent_bad_escape", [Http("GET", "/v2/models/simple%zz")]),
    Case("percent_encoded_route", [Http("GET", "/v2/health/%6Cive")]),
    Case("query_on_infer", [Http("POST", INFER + "?x=1&y", body=JSON_BODY)]),
    Case("query_on_metadata", [Http("GET", "/v2/models/simple?verbose=true")]),
    Case("empty_query", [Http("GET", "/v2/health/ready?")]),
    Case("fragment", [Http("GET", "/v2/health/ready#part")]),
    Case("trailing_slash_infer", [Http("POST", INFER + "/", body=JSON_BODY)]),
    Case("trailing_slash_live", [Http("GET", "/v2/health/live/")]),
    Case("double_slash_start", [Http("GET", "//v2/health/live")]),
    Case("double_slash_middle", [Http("GET", "/v2//models/simple")]),
    Case("dot_segment", [Http("GET", "/v2/models/../health/live")]),
    Case("target_without_slash", [Http("GET", "v2/health/live")]),
    Case("target_7_kib", [Http("GET", "/v2/health/live?q=" + "a" * 7000)],
         note="a long target under libevhtp's ~8 KiB token buffer"),
    Case("header_value_4_kib", [Http("GET", "/v2/health/live",
                                     headers=[("X-Long", "a" * 4096)])]),
    Case("headers_100_kib_in_many_lines", [Http("GET", "/v2/health/live", headers=[
        (f"X-Line-{i}", "b" * 1000) for i in range(100)])]),
]

# -- sizes: where Triton hangs up or waits, infercore answers at once --------------------------
_HEADER_TOO_LARGE = ("a header line over 8 KiB: Triton's libevhtp drops the connection "
                     "without an answer (its parser buffers at most ~8 KiB per token); "
                     "infercore answers 431 at once and closes, as RFC 9110 asks")
_TARGET_TOO_LONG = ("a request target over 8 KiB: Triton's libevhtp drops the connection "
                    "without an answer; infercore answers 414 at once and closes (RFC 9110)")
_SIZE_CASES = [
    _then_serving("header_value_80_kib", Http("GET", "/v2/health/live",
                                              headers=[("X-Big", "a" * (80 << 10))]),
                  departure=_HEADER_TOO_LARGE,
                  expect=[{"status": 431, "headers": {"content-type": "application/json"},
                           "body": {"error": "Request Header Fields Too Large"}}, None]),
    _then_serving("header_name_16_kib", Http("GET", "/v2/health/live",
                                             headers=[("X" * (16 << 10), "1")]),
                  departure=_HEADER_TOO_LARGE,
                  expect=[{"status": 431, "body": {"error": "Request Header Fields Too Large"}},
                          None]),
    _then_serving("target_1_mib", Http("GET", "/v2/health/live?" + "q" * (1 << 20)),
                  departure=_TARGET_TOO_LONG,
                  expect=[{"status": 414, "headers": {"content-type": "application/json"},
                           "body": {"error": "URI Too Long"}}, None]),
    _then_serving("model_name_16_kib", Http("GET", "/v2/models/" + "m" * (16 << 10)),
                  departure=_TARGET_TOO_LONG,
                  expect=[{"status": 414, "body": {"error": "URI Too Long"}}, None]),
    _then_serving("chunk_size_over_limit", Http("POST", INFER, half_close=True, raw=_raw(
        "POST", INFER, _CHUNKED, b"7fffffff\r\n" + JSON_BODY)),
        departure=("a chunk that announces more than --http-max-input-size: Triton waits "
                   "for it (and, given the end of the stream, hangs up); infercore refuses "
                   "the body at once from its announced size and closes"),
        expect=[{"status": 400, "body": {"error": (
            "Request size of 2147483647 bytes exceeds the maximum allowed value of 67108864 "
            "bytes. Use --http-max-input-size to increase the limit.")}}, None]),
    _then_serving("chunk_size_overflows", Http("POST", INFER, half_close=True, raw=_raw(
        "POST", INFER, _CHUNKED, b"ffffffffffffffffffff\r\n" + JSON_BODY)),
        departure=("a chunk size past 64 bits: Triton waits for the chunk (and, given the "
                   "end of the stream, hangs up); infercore's parser refuses it at once and "
                   "the connection is closed, as Triton closes one it cannot parse"),
        expect=[_CLOSES, None]),
]

# --http-max-input-size: current Triton's flag (2.51 has none and accepts these bodies).
_MAX_INPUT = ("current Triton bounds request bodies with --http-max-input-size, default 64 MiB "
              "(src/common.h HTTP_DEFAULT_MAX_INPUT_SIZE = 1 << 26; added by "
              "triton-inference-server/server#8174, JSON size checked by #8432): a larger body "
              "is answered 400 '... exceeds the maximum allowed value ... Use "
              "--http-max-input-size to increase the limit.' (qa/L0_http/"
              "http_input_size_limit_test.py); 2.51 has no such flag")
_MIB = b" " * (1 << 20)
_LIMIT_CASES = [
    _then_serving("body_over_default_limit_by_length", Http(
        "POST", INFER, half_close=True,
        raw=_raw("POST", INFER, f"Content-Length: {(64 << 20) + 1}\r\n", JSON_BODY)),
        newer=_MAX_INPUT, expect=[{"status": 400, "body": {"error": (
            "Request size of 67108865 bytes exceeds the maximum allowed value of 67108864 "
            "bytes. Use --http-max-input-size to increase the limit.")}}, None]),
    _then_serving("chunked_body_over_default_limit", Http("POST", INFER, chunks=[_MIB] * 65),
                  newer=_MAX_INPUT, expect=[{"status": 400}, None]),
    _then_serving("gzip_inflating_over_default_limit",
                  Http("POST", INFER, body=_bomb(65 << 20),
                       headers=[("Content-Encoding", "gzip")]),
                  newer=_MAX_INPUT, expect=[{"status": 400}, None]),
]

# -- chunked trailers are not request headers ---------------------------------------------------
_TRAILER_CASES = [
    Case("trailer_inference_header_length",
         [Http("POST", INFER, chunks=[JSON_BODY],
               trailers=[("Inference-Header-Content-Length", "10")])],
         note="framing comes from the request head: as if no length had been given"),
    Case("trailer_content_encoding_plain_body",
         [Http("POST", INFER, chunks=[JSON_BODY], trailers=[("Content-Encoding", "gzip")])]),
    Case("trailer_accept_encoding",
         [Http("POST", INFER, chunks=[JSON_BODY], trailers=[("Accept-Encoding", "gzip")])]),
    _then_serving("trailer_content_length",
                  Http("POST", INFER, chunks=[JSON_BODY], trailers=[("Content-Length", "3")]),
                  note="a Content-Length in a chunked trailer frames nothing: dropped"),
]

_FRAMING_MODELS = [add_sub()]
_FRAMING_FLAGS = ["--model-control-mode=explicit", "--load-model=simple"]

# -- restricted APIs: the key travels in the head, never in a trailer -------------------------
_RESTRICTED_FLAGS = _FRAMING_FLAGS + [
    "--http-restricted-api=inference:infer-key=infer-secret",
    "--http-restricted-api=model-repository,shared-memory,logging,trace,statistics,"
    "model-config:admin-key=admin-secret",
]
_ADMIN = ("admin-key", "admin-secret")
_INFER_KEY = ("infer-key", "infer-secret")
# (name, method, path, body chunks, the restriction's header); statistics come before the
# load (a load of a loaded model reloads it, and its statistics start again)
_RESTRICTED_ENDPOINTS = [
    ("infer", "POST", INFER, [JSON_BODY], _INFER_KEY),
    ("infer_version", "POST", "/v2/models/simple/versions/1/infer", [JSON_BODY], _INFER_KEY),
    ("repository_index", "POST", "/v2/repository/index", [b"{}"], _ADMIN),
    ("shm_status", "GET", "/v2/systemsharedmemory/status", [b"{}"], _ADMIN),
    ("shm_register", "POST", "/v2/systemsharedmemory/region/r_{run}/register",
     [b'{"key":"/restricted_{run}","offset":0,"byte_size":8}'], _ADMIN),
    ("shm_unregister", "POST", "/v2/systemsharedmemory/unregister", [b"{}"], _ADMIN),
    ("cuda_shm_status", "GET", "/v2/cudasharedmemory/status", [b"{}"], _ADMIN),
    ("logging", "POST", "/v2/logging", [b'{"log_verbose_level":0}'], _ADMIN),
    ("trace", "POST", "/v2/trace/setting", [b"{}"], _ADMIN),
    ("model_trace", "POST", "/v2/models/simple/trace/setting", [b"{}"], _ADMIN),
    ("stats", "GET", "/v2/models/stats", [b"{}"], _ADMIN),
    ("model_stats", "GET", "/v2/models/simple/stats", [b"{}"], _ADMIN),
    ("model_config", "GET", "/v2/models/simple/config", [b"{}"], _ADMIN),
    ("repository_load", "POST", "/v2/repository/models/simple/load", [b"{}"], _ADMIN),
]
# a registered region is unregistered after each case, so the next one registers afresh
_UNREGISTER = Http("POST", "/v2/systemsharedmemory/region/r_{run}/unregister", body=b"",
                   headers=[_ADMIN])
_RESTRICTED_CASES: list[Case] = [Case("restricted_region", [Shm("create", "/restricted_{run}",
                                                                size=8)])]
for _name, _method, _path, _chunks, (_key, _value) in _RESTRICTED_ENDPOINTS:
    _after = [_UNREGISTER] if _name == "shm_register" else []
    _RESTRICTED_CASES += [
        Case(f"restricted_{_name}_key_in_trailer",
             [Http(_method, _path, chunks=_chunks, trailers=[(_key, _value)]), *_after],
             note="a restricted API's key sent only in a chunked trailer is not honoured"),
        Case(f"restricted_{_name}_key_in_head",
             [Http(_method, _path, chunks=_chunks, headers=[(_key, _value)]), *_after]),
        Case(f"restricted_{_name}_wrong_key_in_trailer",
             [Http(_method, _path, chunks=_chunks, headers=[(_key, _value)],
                   trailers=[(_key, "wrong")]), *_after]),
    ]
_RESTRICTED_CASES += [
    Case("restricted_region_unlink", [Shm("unlink", "/restricted_{run}")]),
    Case("restricted_live_unrestricted", [_LIVE]),
    Case("restricted_key_in_trailer_pipelined", [Http("POST", INFER, responses=2, raw=(
        _raw("POST", INFER, _CHUNKED, _chunked(JSON_BODY, trailer="infer-key: infer-secret\r\n"))
        + _raw("POST", INFER, f"Content-Length: {len(JSON_BODY)}\r\n", JSON_BODY)))],
        note="the trailer of one request is not a header of the next either",
        departure=_PIPELINE_HANGS, expect=[{"responses": [
            {"status": 403, "body": {"error": "This API is restricted, expecting header "
                                              "'infer-key'"}},
            {"status": 403, "body": {"error": "This API is restricted, expecting header "
                                              "'infer-key'"}}]}]),
]

SUITES = [
    # the cases register shared memory: Triton 2.51 allows it, infercore only when told
    # (--allow-client-shm, current Triton's flag, see cases/shared_memory.py)
    Suite("http_framing", "http_framing", models=_FRAMING_MODELS, flags=_FRAMING_FLAGS,
          infercore_flags=["--allow-client-shm=true"],
          cases=(_CHUNKED_CASES + _ENCODING_CASES + _LENGTH_CASES + _METHOD_CASES
                 + _CONNECTION_CASES + _TARGET_CASES + _TRAILER_CASES + _SIZE_CASES
                 + _LIMIT_CASES)),
    Suite("http_framing_restricted", "http_framing", models=_FRAMING_MODELS,
          flags=_RESTRICTED_FLAGS, infercore_flags=["--allow-client-shm=true"],
          cases=_RESTRICTED_CASES),
]
