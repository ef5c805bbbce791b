"""Triton's generate extension over a real ``infercore serve``: ``generate`` and
``generate_stream`` (server-sent events) with decoupled and ordinary Python models, bad
requests, a client that goes away mid-stream, and a model that never ends its stream."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest
import requests
import tritonclient.http as httpclient
from serve_process import HttpServeProcess as ServeProcess

from infercore.testing import RepositoryBuilder

pytest_plugins = ["conftest_http"]

EXACTLY_ONE = ("generate expects model to produce exactly 1 response, use generate stream "
               "for model that generates various number of responses")

# Decoupled: one response per word of text_input, each with its index as a response
# parameter, then the final flag. The word FAIL sends an error instead, with the final
# flag; the word LAST sends its response with the final flag.
TOKENS_CONFIG = """
name: "tokens"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

TOKENS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            sender = request.get_response_sender()
            for index, word in enumerate(text.reshape(-1)[0].decode().split()):
                if word == "FAIL":
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        "the model failed at word " + str(index),
                        pb_utils.TritonError.INVALID_ARG)), flags=FINAL)
                    break
                out = pb_utils.Tensor("text_output", np.array([word.encode()], np.object_))
                sender.send(pb_utils.InferenceResponse([out], parameters={"index": index}),
                            flags=FINAL if word == "LAST" else 0)
                if word == "LAST":
                    break
            else:
                sender.send(flags=FINAL)
        return None
"""

# Not decoupled, batching: tells what it was given (inputs' shapes, parameters, id).
ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 4
input [
  { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "values", data_type: TYPE_FP32, dims: [ -1 ], optional: true },
  { name: "flag", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }
]
output [
  { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "doubled", data_type: TYPE_FP32, dims: [ -1 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

ECHO_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            shapes = {t.name(): list(t.as_numpy().shape) for t in request.inputs()}
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            values = pb_utils.get_input_tensor_by_name(request, "values")
            flag = pb_utils.get_input_tensor_by_name(request, "flag")
            seen = json.dumps({
                "text": text.reshape(-1)[0].decode(), "shapes": shapes,
                "parameters": json.loads(request.parameters()), "id": request.request_id(),
                "flag": None if flag is None else bool(flag.as_numpy().reshape(-1)[0]),
            })
            doubled = (np.zeros((1, 0), np.float32) if values is None
                       else values.as_numpy() * 2)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", np.array([[seen.encode()]], np.object_)),
                 pb_utils.Tensor("doubled", doubled)],
                parameters={"echoed": True}))
        return responses
"""

# Decoupled, one instance, ticking in execute until cancelled (or 2000 ticks, 20 s); it
# remembers how its last stream ended, and "mode": "report" answers that. "mode":
# "forget" sends one response and never the final flag.
TICKER_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""

TICKER_PY = """
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def text(value):
    return pb_utils.Tensor("text_output", np.array([value.encode()], np.object_))


class TritonPythonModel:
    def initialize(self, args):
        self.last_end = "none"

    def execute(self, requests):
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "tick")
            sender = request.get_response_sender()
            if mode == "report":
                sender.send(pb_utils.InferenceResponse([text(self.last_end)]), flags=FINAL)
            elif mode == "forget":
                sender.send(pb_utils.InferenceResponse([text("once")]))
            else:
                self.last_end = "finished"
                for tick in range(2000):
                    if request.is_cancelled():
                        self.last_end = "cancelled"
                        break
                    sender.send(pb_utils.InferenceResponse([text("tick %d" % tick)]))
                    time.sleep(0.01)
                sender.send(flags=FINAL)
        return None
"""


def _build(path) -> RepositoryBuilder:
    repo = RepositoryBuilder(path)
    repo.add_model("tokens", config=TOKENS_CONFIG, model_py=TOKENS_PY)
    repo.add_model("echo", config=ECHO_CONFIG, model_py=ECHO_PY)
    repo.add_model("ticker", config=TICKER_CONFIG.format(name="ticker"), model_py=TICKER_PY)
    repo.add_model("forgetful", config=TICKER_CONFIG.format(name="forgetful"),
                   model_py=TICKER_PY)
    return repo


def _serve(tmp_path_factory: pytest.TempPathFactory) -> ServeProcess:
    root = tmp_path_factory.mktemp("generate")
    server = ServeProcess(_build(root / "models").path, root / "server.log",
                          "--model-control-mode", "explicit", "--load-model", "*",
                          "--exit-timeout-secs", "1")
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = _serve(tmp_path_factory)
    try:
        yield process
    finally:
        process.stop()


def _post(server: ServeProcess, model: str, kind: str, body: object
          ) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(f"http://{server.url}/v2/models/{model}/{kind}", data=data,
                         timeout=30)


def _events(body: str) -> list[dict]:
    """The JSON objects of a server-sent event stream (every event is one data line)."""
    assert body.endswith("\n\n") or body == ""
    events = []
    for event in body.split("\n\n")[:-1]:
        assert event.startswith("data: ") and "\n" not in event, event
        events.append(json.loads(event[len("data: "):]))
    return events


def _error(response: requests.Response) -> str:
    document = response.json()
    assert set(document) == {"error"}, document
    return document["error"]


def _words(events: list[dict]) -> list[str]:
    return [event.get("text_output", "<error>") for event in events]


def test_generate_stream_sends_one_event_per_response(server):
    response = _post(server, "tokens", "generate_stream", {"text_input": "the quick fox"})

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    assert _events(response.text) == [
        {"model_name": "tokens", "model_version": "1", "index": i, "text_output": word}
        for i, word in enumerate(["the", "quick", "fox"])]


def test_generate_stream_ends_with_a_final_response_or_a_bare_final_flag(server):
    last = _post(server, "tokens", "generate_stream", {"text_input": "one LAST never"})
    empty = _post(server, "tokens", "generate_stream", {"text_input": ""})

    assert _words(_events(last.text)) == ["one", "LAST"]
    assert empty.status_code == 200 and _events(empty.text) == []


def test_an_error_event_ends_only_its_own_stream(server):
    failed = _post(server, "tokens", "generate_stream", {"text_input": "a b FAIL c"})
    after = _post(server, "tokens", "generate_stream", {"text_input": "still here"})

    assert failed.status_code == 200  # the status was sent with the first response
    events = _events(failed.text)
    assert _words(events) == ["a", "b", "<error>"]
    assert events[-1] == {"error": "the model failed at word 2"}
    assert _words(_events(after.text)) == ["still", "here"]


def test_an_error_as_first_response_sets_the_stream_status(server):
    response = _post(server, "tokens", "generate_stream", {"text_input": "FAIL"})

    assert response.status_code == 400  # INVALID_ARG
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert _events(response.text) == [{"error": "the model failed at word 0"}]


def test_streams_follow_each_other_on_one_keep_alive_connection(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        for text in ("first stream", "second", ""):
            connection.request("POST", "/v2/models/tokens/generate_stream",
                               json.dumps({"text_input": text}))
            response = connection.getresponse()
            assert response.status == 200
            assert _words(_events(response.read().decode())) == text.split()
    finally:
        connection.close()


def test_generate_answers_one_flat_json_object(server):
    response = _post(server, "echo", "generate", {
        "id": "req-1", "text_input": "hello", "values": [1.5, 2, 3], "temperature": 0.5,
        "parameters": {"flag": True, "max_tokens": 16, "stream": False, "stop": "\n"}})

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    seen = json.loads(body.pop("text_output"))
    assert body == {"id": "req-1", "model_name": "echo", "model_version": "1",
                    "echoed": True, "doubled": [3.0, 4.0, 6.0]}
    # inputs shaped from the metadata: the batch dimension is 1, the last one takes the rest
    assert seen["shapes"] == {"text_input": [1, 1], "values": [1, 3], "flag": [1, 1]}
    assert seen["text"] == "hello" and seen["flag"] is True and seen["id"] == "req-1"
    # every key that is not an input is a parameter, nested "parameters" keys too
    assert seen["parameters"] == {"id": "req-1", "temperature": 0.5, "max_tokens": 16,
                                  "stream": False, "stop": "\n"}


def test_generate_on_a_decoupled_model_answers_as_triton_does(server):
    # Triton starts its chunked reply with the status of the first response and waits for
    # the final flag: a model that sends none or several gets the "exactly 1" error with
    # that status (200 after a good first response), one error response its own error.
    one = _post(server, "tokens", "generate", {"text_input": "single"})
    several = _post(server, "tokens", "generate", {"text_input": "two words"})
    none = _post(server, "tokens", "generate", {"text_input": ""})
    failed = _post(server, "tokens", "generate", {"text_input": "FAIL"})

    assert one.status_code == 200
    assert one.json() == {"model_name": "tokens", "model_version": "1", "index": 0,
                          "text_output": "single"}
    for response in (one, several, none, failed):
        assert response.headers["content-type"] == "application/json"
        assert response.headers["transfer-encoding"] == "chunked"
    assert several.status_code == 200 and _error(several) == EXACTLY_ONE
    assert none.status_code == 200 and _error(none) == EXACTLY_ONE
    assert failed.status_code == 400 and _error(failed) == "the model failed at word 0"
    # the server keeps serving
    assert _post(server, "tokens", "generate", {"text_input": "again"}).status_code == 200


@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_bad_requests_get_tritons_errors_before_inference(server, kind):
    def error(model: str, body: object, status: int) -> str:
        response = _post(server, model, kind, body)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        return _error(response)

    assert "nope" in error("nope", {"text_input": "x"}, 404)
    # what Triton's JSON reader refuses is INTERNAL (500), with rapidjson's texts
    assert error("echo", b"{not json", 500) == (
        "failed to parse the request JSON buffer: Missing a name for object member. at 1")
    assert error("echo", [1, 2], 500) == "attempt to get members for non-object"
    assert error("echo", {"text_input": 7}, 500) == (
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string")
    assert error("echo", {"text_input": "x", "values": ["a"]}, 500) == (
        "Unable to parse 'data': attempt to access JSON non-number as double")
    assert error("echo", {"text_input": "x", "flag": 1}, 500) == (
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean")
    assert error("echo", {"text_input": "x", "parameters": 3}, 500).startswith(
        "Expected JSON object for keyword: 'parameters'")
    assert error("echo", {"text_input": "x", "id": 5}, 500) == (
        "Unable to parse 'id': attempt to access JSON non-string as string")
    assert error("tokens", {"text_input": ["a", "b"]}, 400) == (
        "The schema can not convert input 'text_input' to tensor with proper shape")
    assert error("echo", {"text_input": "x", "top_k": [1, 2]}, 400) == (
        "parameter 'top_k' has invalid type. It should be either 'int', 'bool', or "
        "'string'.")
    assert error("echo", {"text_input": "x", "parameters": {"seed": None}}, 400) == (
        "Converting keyword: 'parameters': parameter 'seed' has invalid type. It should be "
        "either 'int', 'bool', or 'string'.")
    assert error("echo", b'{"id": "d", "text_input": "a", "text_input": "b"}', 400) == (
        "[request id: d] input 'text_input' already exists in request")
    assert error("echo", {"temperature": 1}, 400).startswith(  # a required input is missing
        "[request id: <id_unknown>] expected number of inputs between 1 and 3 but got 0")
    response = requests.get(f"http://{server.url}/v2/models/echo/{kind}", timeout=30)
    assert response.status_code == 405
    # the server keeps serving
    assert _post(server, "echo", "generate", {"text_input": "ok"}).status_code == 200


def _open_stream(server: ServeProcess, model: str, body: dict) -> socket.socket:
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (model.encode(), len(payload), payload))
    return sock


def _read_until(sock: socket.socket, marker: bytes, count: int) -> bytes:
    data = b""
    while data.count(marker) < count:
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def test_a_client_that_goes_away_mid_stream_cancels_the_request(server):
    sock = _open_stream(server, "ticker", {"text_input": ""})
    try:
        assert _read_until(sock, b"data: ", 2).count(b"tick ") >= 2
    finally:
        sock.close()

    # One instance: this request runs once the ticking execution is over, and reads how
    # it ended: "cancelled" when the model saw the disconnect, "finished" after 2000 ticks.
    report = _post(server, "ticker", "generate", {"text_input": "", "mode": "report"})
    assert report.status_code == 200, report.text
    assert report.json()["text_output"] == "cancelled"


def test_unloading_fails_a_stream_whose_final_flag_never_comes(server):
    sock = _open_stream(server, "forgetful", {"text_input": "", "mode": "forget"})
    try:
        assert b"once" in _read_until(sock, b"once", 1)
        with httpclient.InferenceServerClient(server.url) as client:
            client.unload_model("forgetful")  # waits --exit-timeout-secs, then fails it
            rest = _read_until(sock, b"0\r\n\r\n", 1)
            client.load_model("forgetful")
    finally:
        sock.close()
    assert b'data: {"error":"model \'forgetful\' version 1 was unloaded before the request ' \
           b'completed"}\n\n' in rest
    assert rest.endswith(b"0\r\n\r\n")  # the chunked body ended properly


def test_shutdown_with_a_stream_left_open_does_not_hang(tmp_path_factory):
    process = _serve(tmp_path_factory)
    try:
        sock = _open_stream(process, "forgetful", {"text_input": "", "mode": "forget"})
        assert b"once" in _read_until(sock, b"once", 1)
        returncode = process.stop(timeout=20)
        try:
            _read_until(sock, b"\0", 1)  # returns at the end of the connection, never waits
        except ConnectionResetError:
            pass  # the connection was dropped after --exit-timeout-secs: also an end
        sock.close()
    finally:
        process.stop()
    assert returncode == 0, process.log_path.read_text(errors="replace")[-4000:]
