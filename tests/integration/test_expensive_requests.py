"""Expensive and refused requests against a real server (issue #22, items 4 and 5).

Stall: while one client sends a request that is costly to decode or validate (millions of
BYTES elements, many thousands of inputs or JSON values, thousands of pipelined
requests), another client's health checks keep being answered. Processed where every
client is served (as before), such a request held each check up until it was done: the
check waiting on it took most of the time from the request's sending to its answer. So
the tests ask that no check waited for half of that time, or, where the request is now
cheap, that none waited over ``STALL_BOUND_S``, a generous bound (the target is 50 ms;
this suite runs on two loaded cores). Either holds however slow the machine is; the
measured figures are in docs/performance.md. Before, such requests held every client up
for 0.5 to 1.5 s, and 100k unknown inputs for minutes.

Memory: after a corpus of large refused requests (large messages and bodies, and requests
of many small objects: 100k inputs, millions of JSON values) the server's resident
memory (read from /proc) comes back near where it started, and a refused 256 MiB gRPC
message costs at most the copies grpcio itself makes while it is received.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from serve_process import ServeProcess
from tritonclient.grpc import service_pb2

from infercore.testing import RepositoryBuilder

STALL_BOUND_S = 0.25
MIB = 1024 * 1024

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""
TEXT_CONFIG = """
name: "text"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
TEXT_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy())])
            for request in requests]
"""

EMPTY_STRINGS = struct.pack("<I", 0) * 4_000_000  # 4 million empty BYTES elements
_ADD_SUB_JSON = json.dumps({"inputs": [
    {"name": name, "shape": [16], "datatype": "INT32", "data": list(range(16))}
    for name in ("INPUT0", "INPUT1")]}).encode()


@contextmanager
def _serve(root: Path) -> Iterator[ServeProcess]:
    """Both frontends with tritonserver's default limits (a 64 MiB HTTP body)."""
    repo = RepositoryBuilder(root / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("text", config=TEXT_CONFIG, model_py=TEXT_PY)
    process = ServeProcess(root / "server.log", f"--model-repository={root / 'models'}",
                           "--exit-timeout-secs=5")
    try:
        process.wait_http("/v2/models/text/ready", 200)
        process.wait_http("/v2/models/add_sub/ready", 200)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with _serve(tmp_path_factory.mktemp("expensive")) as process:
        yield process


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServeProcess]:
    """A server that has served nothing yet: its memory is its own starting point."""
    with _serve(tmp_path) as process:
        yield process


# -- clients ------------------------------------------------------------------------------
def _post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> int:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in (headers or {}).items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head.encode() + body)
        return _status(sock)


def _status(sock: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer:
        data = sock.recv(65536)
        assert data, "the server closed without an answer"
        answer += data
    return int(answer.split()[1])


def _binary(header: dict[str, object], data: bytes) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    return head + data, {"Inference-Header-Content-Length": str(len(head))}


def _grpc_infer(server: ServeProcess, request: service_pb2.ModelInferRequest
                ) -> grpc.StatusCode:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    data = request.SerializeToString()
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=None, response_deserializer=None)
        try:
            infer(data, timeout=120)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _add_sub_grpc(input0: bytes = bytes(64)) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for name, data in (("INPUT0", input0), ("INPUT1", bytes(64))):
        request.inputs.add(name=name, datatype="INT32", shape=[16])
        request.raw_input_contents.append(data)
    return request


def _text_grpc(data: bytes) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="text")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(data)
    return request


def _assert_serving(server: ServeProcess) -> None:
    assert _post(server.http_port, "/v2/models/add_sub/infer", _ADD_SUB_JSON) == 200
    assert _grpc_infer(server, _add_sub_grpc()) == grpc.StatusCode.OK


# -- another client's health checks ---------------------------------------------------------
class HealthWatch:
    """Checks the server's health every 2 ms on a connection of its own, in a thread;
    ``request()`` marks the time an expensive request is sent and answered."""

    def __init__(self, server: ServeProcess, protocol: str) -> None:
        self._stop = threading.Event()
        self._checked = threading.Event()
        self.spans: list[tuple[float, float]] = []  # each check's start and end
        self.window = (0.0, 0.0)
        if protocol == "grpc":
            channel = grpc.insecure_channel(server.grpc_url)
            ready = channel.unary_unary("/inference.GRPCInferenceService/ServerReady")
            message = service_pb2.ServerReadyRequest().SerializeToString()
            self._close: Callable[[], None] = channel.close
            self._check: Callable[[], None] = lambda: ready(message, timeout=30)
        else:
            sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
            self._close = sock.close

            def check() -> None:
                sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = b""
                while not answer.endswith(b"\r\n\r\n"):  # the answer has no body
                    data = sock.recv(4096)
                    assert data, "the health check's connection closed"
                    answer += data
                assert answer.startswith(b"HTTP/1.1 200")
            self._check = check
        self._check()  # connected before the watch begins
        self._thread = threading.Thread(target=self._run, name="health-watch")

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            self._check()
            self.spans.append((start, time.monotonic()))
            self._checked.set()
            time.sleep(0.002)

    @contextmanager
    def request(self) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.window = (start, time.monotonic())

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        self._checked.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._close()


def _assert_no_stall(watch: HealthWatch) -> None:
    """No other client waited for the expensive request (see the module doc)."""
    start, end = watch.window
    assert end > start, "the request was not timed"
    overlapping = [done - began for began, done in watch.spans if done > start and began < end]
    assert overlapping, "no health check while the request was processed"
    slowest = max(overlapping)
    assert slowest < (end - start) / 2 or slowest < STALL_BOUND_S, (
        f"another client's health check took {slowest * 1e3:.0f} ms of the "
        f"{(end - start) * 1e3:.0f} ms the request took")


# -- item 4: an expensive request does not stall the others -----------------------------------
def test_a_large_bytes_mismatch_over_http_does_not_stall_other_clients(server):
    body, headers = _binary({"inputs": [{
        "name": "TEXT", "shape": [1], "datatype": "BYTES",
        "parameters": {"binary_data_size": len(EMPTY_STRINGS)}}]}, EMPTY_STRINGS)
    with HealthWatch(server, "http") as watch, watch.request():
        assert _post(server.http_port, "/v2/models/text/infer", body, headers) == 400
    _assert_no_stall(watch)
    _assert_serving(server)


def test_a_large_bytes_mismatch_over_grpc_does_not_stall_other_clients(server):
    with HealthWatch(server, "grpc") as watch, watch.request():
        code = _grpc_infer(server, _text_grpc(EMPTY_STRINGS))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    _assert_no_stall(watch)
    _assert_serving(server)


def _unknown_inputs_json() -> bytes:
    return json.dumps({"inputs": [
        {"name": f"X{i}", "shape": [1], "datatype": "INT32", "data": [0]}
        for i in range(100_000)]}).encode()


def _unknown_inputs_grpc() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for i in range(100_000):
        request.inputs.add(name=f"X{i}", datatype="INT32", shape=[1]).contents \
            .int_contents.append(0)
    return request


def _json_values(count: int) -> bytes:
    """An add_sub request whose INPUT0 holds ``count`` JSON values (16 fit)."""
    values = "[" + ",".join(["0"] * count) + "]"
    return ('{"inputs":[{"name":"INPUT0","shape":[16],"datatype":"INT32","data":' + values
            + '},{"name":"INPUT1","shape":[16],"datatype":"INT32","data":' + values[:33]
            + "]}]}").encode()


def test_many_unknown_inputs_over_http_do_not_stall_other_clients(server):
    body = _unknown_inputs_json()
    with HealthWatch(server, "http") as watch, watch.request():
        assert _post(server.http_port, "/v2/models/add_sub/infer", body) == 400
    _assert_no_stall(watch)
    _assert_serving(server)


def test_many_unknown_inputs_over_grpc_do_not_stall_other_clients(server):
    request = _unknown_inputs_grpc()
    with HealthWatch(server, "grpc") as watch, watch.request():
        code = _grpc_infer(server, request)
    # the error names every input: more than the client takes as a status (as with Triton)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    _assert_no_stall(watch)
    _assert_serving(server)


def test_millions_of_json_values_do_not_stall_other_clients(server):
    body = _json_values(2_000_000)
    with HealthWatch(server, "http") as watch, watch.request():
        assert _post(server.http_port, "/v2/models/add_sub/infer", body) == 500
    _assert_no_stall(watch)
    _assert_serving(server)


def test_thousands_of_pipelined_requests_do_not_stall_other_clients(server):
    one = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
           % len(_ADD_SUB_JSON)) + _ADD_SUB_JSON
    count = 5000
    answered = ok = 0
    with HealthWatch(server, "http") as watch, socket.create_connection(
            ("127.0.0.1", server.http_port), timeout=60) as sock, watch.request():
        sock.sendall(one * count)
        tail = b""  # a status line may be split between reads
        while answered < count:
            data = sock.recv(1 << 20)
            assert data, f"closed after {answered} answers"
            answered += (tail + data).count(b"HTTP/1.1 ")
            ok += (tail + data).count(b"HTTP/1.1 200")
            tail = data[-11:]
    assert ok == count
    _assert_no_stall(watch)


# -- item 5: refused large requests leave no memory behind ------------------------------------
def _status_kib(server: ServeProcess, key: str) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _chunked_80mib(server: ServeProcess) -> int:
    piece = b"0" * MIB
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(80):
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # refused at the limit and closed: the answer is waiting
            pass
        return _status(sock)


def test_a_refused_256_mib_grpc_message_is_not_copied_again(server):
    request = _add_sub_grpc(bytes(256 * MIB))
    before = _status_kib(server, "VmRSS")
    Path(f"/proc/{server.process.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    assert _grpc_infer(server, request) == grpc.StatusCode.INVALID_ARGUMENT
    peak = _status_kib(server, "VmHWM") - before
    # grpcio makes three copies as it receives a message (gRPC core's slices, a
    # bytearray, the bytes); protobuf's parse and each read of the tensor made two more
    assert peak < 3.5 * 256 * MIB, f"peak {peak / MIB:.0f} MiB above the start"
    _assert_serving(server)


def test_refused_large_requests_give_their_memory_back(fresh_server):
    server = fresh_server
    _assert_serving(server)  # warm: first-use imports and pools are not the corpus's
    start = _status_kib(server, "VmRSS")
    body, headers = _binary({"inputs": [{
        "name": "TEXT", "shape": [1], "datatype": "BYTES",
        "parameters": {"binary_data_size": len(EMPTY_STRINGS)}}]}, EMPTY_STRINGS)
    unknown_json, unknown_grpc = _unknown_inputs_json(), _unknown_inputs_grpc()
    values = _json_values(2_000_000)
    for _ in range(2):
        # the many small objects of 100k inputs (JSON and protobuf) and 2M JSON values
        assert _post(server.http_port, "/v2/models/add_sub/infer", unknown_json) == 400
        assert _grpc_infer(server, unknown_grpc) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _post(server.http_port, "/v2/models/add_sub/infer", values) == 500
        assert _grpc_infer(server, _add_sub_grpc(bytes(256 * MIB))) \
            == grpc.StatusCode.INVALID_ARGUMENT
        assert _grpc_infer(server, _add_sub_grpc(bytes(64 * MIB))) \
            == grpc.StatusCode.INVALID_ARGUMENT
        assert _grpc_infer(server, _text_grpc(EMPTY_STRINGS)) \
            == grpc.StatusCode.INVALID_ARGUMENT
        assert _post(server.http_port, "/v2/models/text/infer", body, headers) == 400
        assert _chunked_80mib(server) == 400
    _assert_serving(server)
    bound = start * 1.2  # the bound (measured: +2%; +38% before the fixes)
    deadline = time.monotonic() + 10.0  # what is freed last goes back on another thread
    while (rss := _status_kib(server, "VmRSS")) >= bound and time.monotonic() < deadline:
        time.sleep(0.1)  # another process: poll its /proc entry
    assert rss < bound, f"RSS {start / MIB:.0f} MiB before the corpus, {rss / MIB:.0f} after"
