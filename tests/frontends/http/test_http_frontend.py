"""HttpFrontend's lifecycle (in process): flags, listening, and shutdown in order."""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import threading
import time

import pytest
from sample_models import install_gate

from infercore import Server
from infercore.frontends import shm
from infercore.frontends.http import server as http_frontend
from infercore.frontends.http.server import HttpFrontend, HttpOptions

# The gate model blocks in execute() until the test opens the gate, so a test can hold
# a request in flight without sleeping. It reports entering, and seeing a cancellation.
GATE_CONFIG = """
name: "gate"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

GATE_PY = """
import infercore_test_gate as gate
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        gate.entered.set()
        while not gate.release.wait(0.005):
            if all(r.is_cancelled() for r in requests):
                gate.cancelled.set()
                break
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""

REQUEST = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "INT32",
                                  "data": [7]}]}).encode()


@pytest.fixture
def gate(monkeypatch):
    module = install_gate(monkeypatch, "infercore_test_gate")
    module.cancelled = threading.Event()  # type: ignore[attr-defined]
    yield module
    module.release.set()


@pytest.fixture
def server(repo, gate):
    repo.add_model("gate", config=GATE_CONFIG, model_py=GATE_PY)
    with Server(model_repository=repo.path, log_info=False) as server:
        yield server


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    http_frontend.add_arguments(parser)
    shm.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_have_tritonservers_defaults():
    args = _parse()
    assert (args.allow_http, args.http_port, args.http_address) == (True, 8000, "0.0.0.0")
    assert args.http_max_input_size == 64 * 1024 * 1024
    assert args.http_thread_count == 8
    assert args.http_busy_poll_us == 200  # infercore's own


def test_allow_http_false_builds_no_frontend(server):
    assert http_frontend.from_args(server, _parse("--allow-http=false")) is None
    frontend = http_frontend.from_args(server, _parse("--http-port", "0"))
    assert isinstance(frontend, HttpFrontend)


# tritonserver's parser takes any integer for the port and the thread count
@pytest.mark.parametrize("argv", [["--http-max-input-size", "0"],
                                  ["--http-port", "99999999999"],
                                  ["--allow-http", "maybe"], ["--http-thread-count", "few"],
                                  ["--http-busy-poll-us", "-1"],
                                  ["--http-busy-poll-us", "1000001"],
                                  ["--http-busy-poll-us", "half"]])
def test_invalid_flag_values_are_usage_errors(argv):
    with pytest.raises(SystemExit):
        _parse(*argv)


class CountingBusyPoll(http_frontend.BusyPoll):
    made: list[CountingBusyPoll] = []

    def __init__(self, *args) -> None:  # noqa: ANN002
        super().__init__(*args)
        self.touches = 0
        self.holds = 0
        self.made.append(self)

    def touch(self) -> None:
        self.touches += 1
        super().touch()

    def hold(self) -> None:
        self.holds += 1
        super().hold()


@pytest.mark.parametrize("window", [200, 0])
def test_requests_and_answers_keep_the_loop_polling(server, monkeypatch, window: int):
    monkeypatch.setattr(CountingBusyPoll, "made", [])
    monkeypatch.setattr(http_frontend, "BusyPoll", CountingBusyPoll)
    options = HttpOptions(address="127.0.0.1", port=0, busy_poll_us=window)
    with HttpFrontend(server, options) as frontend:
        conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=5)
        for _ in range(3):
            conn.request("GET", "/v2/health/live")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
    if not window:  # 0: no busy polling at all
        assert CountingBusyPoll.made == []
        return
    [busy] = CountingBusyPoll.made
    assert busy.touches >= 6  # each request read, each answer written
    assert busy.holds == 0  # answered by the loop itself


@pytest.mark.parametrize("endpoint, body", [("infer", REQUEST),
                                            ("generate", json.dumps({"X": [7]}).encode())])
def test_a_request_answered_by_an_instance_thread_holds_the_polling(server, gate,
                                                                    monkeypatch,
                                                                    endpoint: str,
                                                                    body: bytes):
    monkeypatch.setattr(CountingBusyPoll, "made", [])
    monkeypatch.setattr(http_frontend, "BusyPoll", CountingBusyPoll)
    with HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0)) as frontend:
        [busy] = CountingBusyPoll.made
        answer: dict[str, int] = {}

        def call() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=30)
            conn.request("POST", f"/v2/models/gate/{endpoint}", body)
            answer["status"] = conn.getresponse().status

        thread = threading.Thread(target=call)
        thread.start()
        assert gate.entered.wait(10)  # the model runs on its instance thread
        deadline = time.monotonic() + 5
        while (busy.holds != 1 or busy.polling) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert busy.holds == 1 and not busy.polling  # the loop sleeps meanwhile
        gate.release.set()
        thread.join(10)
        assert answer["status"] == 200


def test_port_zero_listens_on_a_free_port(server):
    with HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0)) as frontend:
        assert frontend.port > 0
        conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=5)
        conn.request("GET", "/v2/health/live")
        assert conn.getresponse().status == 200


def test_start_raises_oserror_when_the_port_is_taken(server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        frontend = HttpFrontend(server, HttpOptions(address="127.0.0.1",
                                                    port=taken.getsockname()[1]))
        with pytest.raises(OSError):
            frontend.start()
    frontend.stop(1.0)  # harmless after a failed start


def test_stop_lets_the_request_in_flight_finish_and_refuses_new_connections(server, gate):
    frontend = HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0))
    frontend.start()
    port = frontend.port
    answer: dict[str, object] = {}

    def call() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v2/models/gate/infer", REQUEST)
        response = conn.getresponse()
        answer.update(status=response.status, body=json.loads(response.read()))

    client = threading.Thread(target=call)
    client.start()
    assert gate.entered.wait(10)
    stopper = threading.Thread(target=frontend.stop, args=(30.0,))
    stopper.start()
    _wait_until_refused(port)
    assert stopper.is_alive()  # still draining the request in flight

    gate.release.set()
    stopper.join(10)
    client.join(10)

    assert not stopper.is_alive()
    assert answer["status"] == 200
    assert answer["body"]["outputs"][0]["data"] == [7]  # type: ignore[index]


def test_stop_cancels_what_is_still_in_flight_at_the_deadline(server, gate):
    frontend = HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0))
    frontend.start()
    errors: list[BaseException] = []

    def call() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=30)
        try:
            conn.request("POST", "/v2/models/gate/infer", REQUEST)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    client = threading.Thread(target=call)
    client.start()
    assert gate.entered.wait(10)

    frontend.stop(0.1)
    client.join(10)

    assert gate.cancelled.wait(10)  # the model saw its request cancelled
    assert errors  # the client's connection was dropped without an answer
    assert not any(t.name == "infercore-http" for t in threading.enumerate())


def test_stop_is_idempotent_and_a_stopped_frontend_cannot_restart(server):
    frontend = HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0))
    frontend.start()
    frontend.stop(1.0)
    frontend.stop(1.0)
    with pytest.raises(Exception, match="stopped"):
        frontend.start()


def _wait_until_refused(port: int, deadline_s: float = 10.0) -> None:
    """Connect until the listening socket is closed (stop() has begun)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except (ConnectionRefusedError, ConnectionResetError):  # reset: closing backlog
            return
    raise AssertionError("the frontend kept accepting connections")


def test_regions_registered_over_http_are_the_servers_registry(server):
    import os
    import uuid

    from infercore.frontends.shm import registry_for

    key = f"infercore-test-{uuid.uuid4().hex}"
    fd = os.open(f"/dev/shm/{key}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 16)
    os.close(fd)
    try:
        with HttpFrontend(server, HttpOptions(address="127.0.0.1", port=0,
                                              allow_client_shm=True)) as frontend:
            conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=5)
            conn.request("POST", "/v2/systemsharedmemory/region/shared/register",
                         json.dumps({"key": key, "offset": 0, "byte_size": 16}))
            assert conn.getresponse().status == 200
            # what the gRPC frontend of the same server would see
            assert [r["key"] for r in registry_for(server).status()] == [key]
    finally:
        registry_for(server).unregister("shared")
        os.unlink(f"/dev/shm/{key}")
