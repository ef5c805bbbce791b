"""Malformed, oversized and abandoned requests, sent as raw HTTP: each gets the right
answer (or a clean cancellation), the server keeps serving and its memory stays flat."""

from __future__ import annotations

import gzip
import http.client
import json
import select
import socket
import time

import numpy as np
import pytest
from serve_process import http_status, infer_and_leave

pytest_plugins = ["conftest_http"]

LIMIT = 4 * 1024 * 1024  # the --http-max-input-size of the conftest_http server


def _request(server, method: str, path: str, body: bytes = b"",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _error(body: bytes) -> str:
    document = json.loads(body)
    assert set(document) == {"error"}
    return document["error"]


def _binary_request(size_claimed: int = 16, data: bytes | None = None,
                    header_length: int | None = None) -> tuple[bytes, dict[str, str]]:
    values = np.ones((1, 4), np.float32)
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
         "parameters": {"binary_data_size": size_claimed}},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()
    payload = values.tobytes() if data is None else data
    length = len(header) if header_length is None else header_length
    return header + payload, {"Inference-Header-Content-Length": str(length)}


def _assert_still_serving(server) -> None:
    status, _, body = _request(server, "POST", "/v2/models/add_sub/infer", *_binary_request())
    assert status == 200, body


def test_malformed_json_is_refused_as_triton_refuses_it(http_server):
    status, _, body = _request(http_server, "POST", "/v2/models/add_sub/infer", b"{not json")

    assert status == 500  # Triton's JSON failures are INTERNAL errors; rapidjson's text
    assert _error(body) == ("failed to parse the request JSON buffer: Missing a name for "
                            "object member. at 1")
    _assert_still_serving(http_server)


def test_header_length_beyond_the_body_is_a_bad_request(http_server):
    body, headers = _binary_request()
    headers["Inference-Header-Content-Length"] = str(len(body) + 10)

    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer", body, headers)

    assert status == 400
    assert _error(answer) == (f"inference header size should be in range (0, {len(body)}), "
                              f"got: {len(body) + 10}")


def test_binary_data_shorter_than_announced_is_a_bad_request(http_server):
    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer",
                                 *_binary_request(data=b"\0" * 10))

    assert status == 400
    assert _error(answer) == ("unexpected size for input 'INPUT0', expecting 6 additional "
                              "bytes for model 'add_sub'")


def test_binary_size_that_does_not_match_the_shape_is_a_bad_request(http_server):
    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer",
                                 *_binary_request(size_claimed=12, data=b"\0" * 12))

    assert status == 400
    assert _error(answer) == ("[request id: <id_unknown>] input byte size mismatch for input "
                              "'INPUT0' for model 'add_sub'. Expected 16, got 12")


def test_extra_bytes_after_the_inputs_are_a_bad_request(http_server):
    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer",
                                 *_binary_request(data=b"\0" * 20))

    assert status == 400
    assert _error(answer) == "unexpected additional input data for model 'add_sub'"


def test_json_data_whose_size_mismatches_the_shape_is_refused(http_server):
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})

    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer", body.encode())

    assert status == 500  # an INTERNAL error in Triton
    assert _error(answer) == ("Unable to parse 'data': Shape does not match true shape of "
                              "'data' field")


@pytest.mark.parametrize("path, message", [
    ("/v2/models/missing/infer", "Request for unknown model: 'missing' is not found"),
    ("/v2/models/add_sub/versions/9/infer",
     "Request for unknown model: 'add_sub' version 9 is not found"),
])
def test_unknown_model_or_version_is_not_found_whatever_the_body(http_server, path, message):
    status, _, answer = _request(http_server, "POST", path, b"{garbage")

    assert status == 404
    assert _error(answer) == message


def test_body_over_the_limit_is_refused_and_the_connection_closed(http_server):
    body = b"{" + b" " * (LIMIT + 1) + b"}"

    status, headers, answer = _request(http_server, "POST", "/v2/models/add_sub/infer", body)

    assert status == 400
    assert "exceeds the maximum allowed value of 4194304 bytes" in _error(answer)
    assert headers.get("connection") == "close"
    _assert_still_serving(http_server)


def test_chunked_body_over_the_limit_is_refused(http_server):
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * (1024 * 1024)
        for _ in range(5):
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        answer = _read_response(sock)

    assert answer.startswith(b"HTTP/1.1 400")
    assert b"exceeds the maximum allowed value" in answer


def test_compressed_body_inflating_past_the_limit_is_refused(http_server):
    bomb = gzip.compress(b" " * (LIMIT + 100))  # a few KiB on the wire

    status, _, answer = _request(http_server, "POST", "/v2/models/add_sub/infer", bomb,
                                 {"Content-Encoding": "gzip"})

    assert status == 400
    assert "exceeds the maximum allowed value" in _error(answer)


def test_unknown_content_encoding_is_not_implemented(http_server):
    status, headers, answer = _request(http_server, "POST", "/v2/models/add_sub/infer",
                                       b"{}", {"Content-Encoding": "br"})

    assert status == 501
    assert _error(answer) == "Unsupported compression type"
    assert headers["accept-encoding"] == "gzip, deflate"


def test_unknown_route_and_wrong_method(http_server):
    status, _, answer = _request(http_server, "GET", "/v2/nothing/here")
    assert (status, _error(answer)) == (404, "Not Found")

    status, _, answer = _request(http_server, "GET", "/v2/models/add_sub/infer")
    assert (status, _error(answer)) == (405, "Method Not Allowed")


def test_malformed_http_closes_the_connection_without_an_answer(http_server):
    # Triton's answer (tests/conformance/cases/http_framing.py): no answer, a closed socket
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"NONSENSE\x00\x01 / HTTP/9.9\r\n\r\n")
        assert _read_response(sock) == b""

    _assert_still_serving(http_server)


def test_requests_before_malformed_bytes_are_answered_first(http_server):
    body, headers = _binary_request()
    infer = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
             b"Inference-Header-Content-Length: " + headers[
                 "Inference-Header-Content-Length"].encode()
             + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(infer + infer + b"GARBAGE\r\n\r\n")
        responses = _Responses(sock)
        assert responses.next().startswith(b"HTTP/1.1 200")
        assert responses.next().startswith(b"HTTP/1.1 200")
        assert responses.next() == b""  # then closed


def test_pipelined_requests_are_answered_in_order(http_server):
    body, headers = _binary_request()
    infer = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
             b"Inference-Header-Content-Length: " + headers[
                 "Inference-Header-Content-Length"].encode()
             + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    missing = b"GET /v2/models/missing HTTP/1.1\r\nHost: x\r\n\r\n"
    live = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"

    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(infer + missing + live + infer)
        responses = _Responses(sock)
        statuses = [responses.next().split(b" ", 2)[1] for _ in range(4)]

    assert statuses == [b"200", b"404", b"200", b"200"]


def test_http_1_0_without_keep_alive_closes_after_the_answer(http_server):
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
        answer = _read_response(sock)
        assert sock.recv(1) == b""

    assert answer.startswith(b"HTTP/1.1 200")


def test_expect_100_continue_is_honoured(http_server):
    body, headers = _binary_request()
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Expect: 100-continue\r\nInference-Header-Content-Length: "
                     + headers["Inference-Header-Content-Length"].encode()
                     + b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = _read_response(sock)

    assert answer.startswith(b"HTTP/1.1 200")


def test_client_disconnect_cancels_its_request(http_server):
    request = json.dumps({"inputs": [
        {"name": "SECONDS", "shape": [1], "datatype": "FP32", "data": [20.0]}]}).encode()
    started = time.monotonic()

    infer_and_leave(http_server.port, "slow", request)
    # The model would run 20 s; cancelled, it ends within a few ms: failed if still queued,
    # else answered with the model's own error (a success, as Triton's Python backend
    # counts it).
    stats = _wait_for_ended(http_server, "slow", 1, deadline=10.0)

    inference = stats["inference_stats"]
    assert inference["success"]["count"] + inference["fail"]["count"] == 1
    assert time.monotonic() - started < 10.0
    _assert_still_serving(http_server)


def test_bad_requests_do_not_grow_memory(http_server):
    bad = [
        ("POST", "/v2/models/add_sub/infer", b"{not json", {}),
        ("POST", "/v2/models/add_sub/infer", *_binary_request(data=b"\0" * 10)),
        ("POST", "/v2/models/add_sub/infer", *_binary_request(size_claimed=12, data=b"\0" * 12)),
        ("POST", "/v2/models/missing/infer", b"{}", {}),
        ("POST", "/v2/models/add_sub/infer", b"x" * 200_000, {"Content-Encoding": "gzip"}),
        ("GET", "/v2/no/such/route", b"", {}),
    ]

    def storm(rounds: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=10)
        for _ in range(rounds):
            for method, path, body, headers in bad:
                conn.request(method, path, body, headers)
                response = conn.getresponse()
                response.read()
                assert response.status in (400, 404, 500)
        conn.close()

    storm(50)  # warm up: allocator pools, caches, first-use imports
    before = http_server.rss_bytes()
    storm(300)
    growth = http_server.rss_bytes() - before

    assert growth < 8 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB over 1800 bad requests"
    _assert_still_serving(http_server)


def _wait_for_ended(server, model: str, count: int, deadline: float) -> dict:
    end = time.monotonic() + deadline
    while True:
        _, _, body = _request(server, "GET", f"/v2/models/{model}/stats")
        stats = json.loads(body)["model_stats"][0]
        inference = stats["inference_stats"]
        ended = inference["success"]["count"] + inference["fail"]["count"]
        if ended >= count or time.monotonic() > end:
            return stats
        time.sleep(0.02)  # another process: poll its statistics endpoint


class _Responses:
    """Reads HTTP responses (headers + Content-Length body) one by one from a raw socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def _fill(self) -> bool:
        chunk = self._sock.recv(65536)
        self._buffer += chunk
        return bool(chunk)

    def next(self) -> bytes:
        while b"\r\n\r\n" not in self._buffer:
            if not self._fill():
                data, self._buffer = self._buffer, b""
                return data
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        self._buffer = rest
        while len(self._buffer) < length and self._fill():
            pass
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return head + b"\r\n\r\n" + body


def _read_response(sock: socket.socket) -> bytes:
    return _Responses(sock).next()


# -- framing from the head only; bounds as bytes arrive -----------------------------------
def _chunked_infer(body: bytes, head: str = "", trailer: str = "") -> bytes:
    return (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            + head.encode() + b"\r\n" + b"%x\r\n%s\r\n0\r\n" % (len(body), body)
            + trailer.encode() + b"\r\n")


_JSON_INFER = json.dumps({"inputs": [
    {"name": name, "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    for name in ("INPUT0", "INPUT1")]}).encode()


@pytest.mark.parametrize("trailer", [
    "Content-Encoding: gzip\r\n",
    "Inference-Header-Content-Length: 10\r\n",
    "Accept-Encoding: gzip\r\n",
])
def test_trailer_fields_do_not_change_how_the_body_is_read(http_server, trailer):
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(_chunked_infer(_JSON_INFER, trailer=trailer))
        answer = _read_response(sock)

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    assert b"content-encoding" not in head.lower()
    assert json.loads(body)["outputs"][0]["data"] == [2, 4, 6, 8]


def _stream_until_answered(server, head: bytes, piece: bytes, most: int) -> tuple[bytes, int]:
    """Send ``head``, then ``piece`` after ``piece`` (a line that never ends) until the
    server answers or ``most`` bytes were sent; checks health from another client on
    the way. Returns (the answer, bytes sent after the head)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        while sent < most:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sent += sock.send(piece)
            except BlockingIOError:  # the server stopped reading: is it answering?
                select.select([sock], [], [], 1.0)
            except (BrokenPipeError, ConnectionResetError):
                break
            if sent % (1 << 20) < len(piece):  # about every MiB: others are served
                assert http_status(server.port, "/v2/health/live") == 200
        sock.setblocking(True)
        sock.settimeout(10)
        try:
            return _read_response(sock), sent
        except ConnectionResetError:
            return b"", sent


@pytest.mark.parametrize(("head", "piece", "status"), [
    # a header value, a request target, a head of lines that never end
    (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Endless: ", b"a" * 65536, b"431"),
    (b"GET /v2/health/live?q=", b"a" * 65536, b"414"),
    (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n", b"X-Line: " + b"v" * 4000 + b"\r\n",
     b"431"),
    # and a chunked body's trailer that never ends
    (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"\r\n2\r\n{}\r\n0\r\nX-Trailer: ", b"t" * 65536, b"431"),
])
def test_a_head_that_never_ends_is_refused_at_once_in_bounded_memory(http_server, head,
                                                                      piece, status):
    before = http_server.rss_bytes()
    started = time.monotonic()

    answer, sent = _stream_until_answered(http_server, head, piece, most=64 << 20)

    assert answer.split(b" ", 2)[1:2] == [status], answer[:200]
    assert b"connection: close" in answer.lower()
    # refused once the bound (1 MiB of head, or 8 KiB of target) is passed, plus the
    # bytes in flight; before, the server buffered all 64 MiB until the client gave up
    assert sent < 16 << 20, f"answered only after {sent} bytes"
    assert time.monotonic() - started < 30.0
    growth = http_server.rss_bytes() - before
    assert growth < 48 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB"
    _assert_still_serving(http_server)


def test_a_chunk_announcing_more_than_the_limit_is_refused_at_once(http_server):
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n7fffffff\r\n{\"inputs\"")
        answer = _read_response(sock)  # before, no answer came: the read timed out

    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert (b"Request size of 2147483647 bytes exceeds the maximum allowed value of "
            b"4194304 bytes") in answer
    _assert_still_serving(http_server)


def test_a_chunk_size_line_split_across_reads_is_still_bounded(http_server):
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"in\r\n7fff")
        time.sleep(0.2)  # two reads on the server: the size line is split between them
        sock.sendall(b"ffff\r\nputs")
        answer = _read_response(sock)

    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"Request size of 2147483651 bytes" in answer
