"""Model control through a real ``infercore serve`` process and the real ``tritonclient``.

POLL: a model is edited (code, a new version, its config) while clients keep requests in
flight over HTTP and gRPC; no request may fail and new requests reach the new version.
EXPLICIT: load and unload with config and file overrides, unload_dependents, load errors
that carry their cause (or, refused at Triton's poll stage, log it), failed reloads that
keep serving, and path traversal attempts: refused, and nothing written outside a
temporary model folder.

Waits are on a separate process, so they poll an observable condition with a deadline.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import free_ports
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [
  {{ name: "TAG", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "VERSION", data_type: TYPE_INT32, dims: [ 1 ] }}
]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
"""

# Each execution takes a little while, so that requests are in flight at any moment.
MODEL_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

TAG = {tag}


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        {initialize}

    def execute(self, requests):
        time.sleep(0.005)
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("TAG", np.array([TAG], np.int32)),
            pb_utils.Tensor("VERSION", np.array([self.version], np.int32))])
            for _ in requests]
"""

ENSEMBLE = """
name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "TAG", data_type: TYPE_INT32, dims: [ 1 ] }} ]
ensemble_scheduling {{ step [ {{
  model_name: "{step}" model_version: -1
  input_map {{ key: "X" value: "X" }} output_map {{ key: "TAG" value: "TAG" }}
}} ] }}
"""


def config(name: str, count: int = 1) -> str:
    return CONFIG.format(name=name, count=count)


def model_py(tag: int, initialize: str = "pass") -> str:
    return MODEL_PY.format(tag=tag, initialize=initialize)


def config_json(name: str) -> str:
    tensors = [{"name": n, "data_type": "TYPE_INT32", "dims": [1]} for n in ("TAG", "VERSION")]
    return json.dumps({"name": name, "backend": "python", "max_batch_size": 0,
                       "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
                       "output": tensors})


class Serve:
    """``infercore serve`` with HTTP and gRPC on free ports; TMPDIR is ``scratch``."""

    def __init__(self, repository: Path, scratch: Path, *flags: str) -> None:
        self.http_port, self.grpc_port = free_ports(2)
        self.log_path = scratch.parent / f"serve-{self.http_port}.log"
        command = [sys.executable, "-m", "infercore", "serve", "--model-repository",
                   str(repository), "--http-address", "127.0.0.1", "--http-port",
                   str(self.http_port), "--grpc-address", "127.0.0.1", "--grpc-port",
                   str(self.grpc_port), "--allow-metrics", "false", "--exit-timeout-secs", "10",
                   *flags]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)})
        self.http = httpclient.InferenceServerClient(f"127.0.0.1:{self.http_port}",
                                                     concurrency=4)
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        wait_for(self._ready, 60, self.log)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"infercore serve exited:\n{self.log()}")
        try:
            return self.http.is_server_ready() and self.grpc.is_server_ready()
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def post(self, path: str, body: dict | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("POST", path, body=json.dumps(body or {}))
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else {}

    def stop(self) -> None:
        self.http.close()
        self.grpc.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def wait_for(condition: Callable[[], bool], timeout: float, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not reached in {timeout}s:\n{log()}")
        time.sleep(0.02)  # another process: nothing to wait on but its answers


def http_answer(client: httpclient.InferenceServerClient, name: str) -> tuple[int, int]:
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer(name, [x])
    return int(result.as_numpy("TAG")[0]), int(result.as_numpy("VERSION")[0])


def grpc_answer(client: grpcclient.InferenceServerClient, name: str) -> tuple[int, int]:
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer(name, [x])
    return int(result.as_numpy("TAG")[0]), int(result.as_numpy("VERSION")[0])


class Traffic:
    """Clients sending requests back to back (two over HTTP, two over gRPC) until stopped;
    each keeps what it saw and any failure."""

    def __init__(self, server: Serve, name: str) -> None:
        self.stop_event = threading.Event()
        self.seen: set[tuple[int, int]] = set()
        self.failures: list[str] = []
        self.count = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(server, name, kind))
                         for kind in ("http", "http", "grpc", "grpc")]
        for thread in self._threads:
            thread.start()

    def _run(self, server: Serve, name: str, kind: str) -> None:
        if kind == "http":
            client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            answer = http_answer
        else:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            answer = grpc_answer  # type: ignore[assignment]
        try:
            while not self.stop_event.is_set():
                try:
                    seen = answer(client, name)
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    with self._lock:
                        self.failures.append(f"{kind}: {exc}")
                    continue
                with self._lock:
                    self.seen.add(seen)
                    self.count += 1
        finally:
            client.close()

    def wait_seen(self, answer: tuple[int, int], log: Callable[[], str]) -> None:
        wait_for(lambda: answer in self.seen, 60, log)

    def finish(self) -> None:
        self.stop_event.set()
        for thread in self._threads:
            thread.join(60)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


def test_poll_reloads_edited_models_while_requests_are_in_flight(tmp_path, scratch):
    repo = RepositoryBuilder(tmp_path / "models")
    model_dir = repo.add_model("live", config=config("live"), model_py=model_py(1))
    server = Serve(repo.path, scratch, "--model-control-mode", "poll",
                   "--repository-poll-secs", "1")  # whole seconds, as tritonserver
    try:
        traffic = Traffic(server, "live")
        try:
            traffic.wait_seen((1, 1), server.log)
            # New code: written beside, then moved in, as a deployment would.
            staged = tmp_path / "model.py"
            staged.write_text(model_py(2) + "# second release\n")
            os.replace(staged, model_dir / "1" / "model.py")
            traffic.wait_seen((2, 1), server.log)
            # A new version: the latest-version policy moves requests to it.
            staged_version = tmp_path / "2"
            staged_version.mkdir()
            (staged_version / "model.py").write_text(model_py(2))
            os.replace(staged_version, model_dir / "2")
            traffic.wait_seen((2, 2), server.log)
            # A new config: two instances.
            (model_dir / "config.pbtxt").write_text(config("live", count=2))
            wait_for(lambda: server.http.get_model_config("live")["instance_group"][0]
                     ["count"] == 2, 60, server.log)
            # A broken release: the last good one keeps serving, the log says why (the
            # index, as Triton's, still says READY).
            (model_dir / "2" / "model.py").write_text("def broken(:\n")
            wait_for(lambda: "SyntaxError" in server.log(), 60, server.log)
            before = traffic.count
            wait_for(lambda: traffic.count > before + 20, 60, server.log)
        finally:
            traffic.finish()
        assert traffic.failures == []
        assert traffic.seen >= {(1, 1), (2, 1), (2, 2)}
        assert http_answer(server.http, "live") == (2, 2)
        # explicit load and unload are refused in POLL mode, with Triton's text and status
        with pytest.raises(InferenceServerException) as raised:
            server.http.load_model("live")
        assert raised.value.status() == "503"
        assert "explicit model load / unload is not allowed if polling is enabled" \
            in raised.value.message()
        with pytest.raises(InferenceServerException) as raised:
            server.grpc.unload_model("live")
        assert raised.value.status() == "StatusCode.UNAVAILABLE"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Path, Path]]:
    root = tmp_path_factory.mktemp("explicit")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("echo", config=config("echo"), model_py=model_py(1))
    repo.add_model("step", config=config("step"), model_py=model_py(3))
    repo.add_model("pipe", config=ENSEMBLE.format(name="pipe", step="step"))
    repo.add_model("syntax", config=config("syntax"), model_py="def broken(:\n")
    repo.add_model("refuses", config=config("refuses"),
                   model_py=model_py(1, 'raise RuntimeError("no GPU here, said initialize")'))
    repo.add_model("misconfigured", config=config("misconfigured").replace(
        "max_batch_size: 0", "max_batch_size: -3"), model_py=model_py(1))
    scratch = root / "scratch"
    scratch.mkdir()
    server = Serve(repo.path, scratch, "--model-control-mode", "explicit")
    try:
        yield server, repo.path, scratch
    finally:
        server.stop()


def _index(server: Serve) -> dict[tuple[str, str], dict]:
    return {(e["name"], e.get("version", "")): e for e in server.http.get_model_repository_index()}


def test_explicit_load_and_unload_over_http_and_grpc(explicit):
    server, _, scratch = explicit
    assert ("echo", "") in _index(server)  # listed by name before any load
    server.http.load_model("echo")
    assert http_answer(server.http, "echo") == (1, 1)
    server.grpc.unload_model("echo")
    assert not server.http.is_model_ready("echo")
    assert _index(server)[("echo", "1")]["state"] == "UNAVAILABLE"
    server.grpc.load_model("echo")
    assert grpc_answer(server.grpc, "echo") == (1, 1)
    # a config override: two instances; as in Triton 2.51 a plain load keeps it (the
    # folder did not change since), another override replaces it
    override = server.http.get_model_config("echo")
    override["instance_group"][0]["count"] = 2
    server.grpc.load_model("echo", config=json.dumps(override))
    assert server.grpc.get_model_config("echo").config.instance_group[0].count == 2
    server.http.load_model("echo")
    assert server.grpc.get_model_config("echo").config.instance_group[0].count == 2
    override["instance_group"][0]["count"] = 1
    server.http.load_model("echo", config=json.dumps(override))
    assert server.grpc.get_model_config("echo").config.instance_group[0].count == 1


def test_file_overrides_load_from_a_temporary_folder_over_both_protocols(explicit):
    server, repository, scratch = explicit
    server.http.load_model("from_http", config=config_json("from_http"),
                           files={"file:1/model.py": model_py(11).encode()})
    server.grpc.load_model("from_grpc", config=config_json("from_grpc"),
                           files={"file:4/model.py": model_py(12).encode()})
    assert http_answer(server.http, "from_grpc") == (12, 4)
    assert grpc_answer(server.grpc, "from_http") == (11, 1)
    assert not (repository / "from_http").exists() and len(list(scratch.iterdir())) == 2
    server.http.unload_model("from_http")
    server.grpc.unload_model("from_grpc")
    assert list(scratch.iterdir()) == []


def test_unload_dependents_over_both_protocols(explicit):
    server, _, _ = explicit
    server.http.load_model("pipe")  # its step loads with it
    assert server.http.is_model_ready("step")
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    assert server.grpc.infer("pipe", [x]).as_numpy("TAG").tolist() == [3]
    server.grpc.unload_model("pipe")
    assert server.http.is_model_ready("step")
    server.grpc.load_model("pipe")
    server.grpc.unload_model("pipe", unload_dependents=True)
    assert not server.http.is_model_ready("step")
    server.http.load_model("pipe")
    server.http.unload_model("pipe", unload_dependents=True)
    assert not server.grpc.is_model_ready("step") and not server.grpc.is_model_ready("pipe")


@pytest.mark.parametrize(("name", "cause"), [
    ("syntax", "SyntaxError"),
    ("refuses", "no GPU here, said initialize"),
])
def test_load_errors_carry_their_cause_over_both_protocols(explicit, name, cause):
    server, _, _ = explicit
    with pytest.raises(InferenceServerException) as raised:
        server.http.load_model(name)
    assert raised.value.status() == "400"
    assert f"load failed for model '{name}'" in raised.value.message()
    assert cause in raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        server.grpc.load_model(name)
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert cause in raised.value.message()
    reasons = [e.get("reason", "") for (n, _), e in _index(server).items() if n == name]
    # each version's reason: "<code>: <message>", as Triton's
    assert reasons and all(reason.split(": ", 1)[0] in ("Internal", "Invalid argument")
                           and cause in reason for reason in reasons)
    assert cause in server.log()
    assert server.http.is_server_live()


def test_a_config_refused_at_the_poll_answers_as_triton_and_logs_why(explicit):
    server, _, _ = explicit
    with pytest.raises(InferenceServerException) as raised:
        server.http.load_model("misconfigured")
    assert raised.value.status() == "500"
    assert raised.value.message() == (
        "failed to load 'misconfigured', failed to poll from model repository")
    with pytest.raises(InferenceServerException) as raised:
        server.grpc.load_model("misconfigured")
    assert raised.value.status() == "StatusCode.INTERNAL"
    assert _index(server)[("misconfigured", "")] == {"name": "misconfigured"}  # untouched
    assert "Poll failed for model directory 'misconfigured'" in server.log()
    assert "max_batch_size" in server.log()


def test_a_failed_reload_keeps_the_serving_version(explicit):
    server, repository, _ = explicit
    server.http.load_model("echo")
    source = repository / "echo" / "1" / "model.py"
    good = source.read_text()
    try:
        source.write_text("import no_such_module_anywhere\n")
        with pytest.raises(InferenceServerException, match="no_such_module_anywhere"):
            server.grpc.load_model("echo")
        assert http_answer(server.http, "echo") == (1, 1)
        # as Triton: still READY, no reason in the index (the log says why)
        assert _index(server)[("echo", "1")] == {"name": "echo", "version": "1",
                                                 "state": "READY"}
        assert "no_such_module_anywhere" in server.log()
    finally:
        source.write_text(good + "\n")
        server.http.load_model("echo")
    assert _index(server)[("echo", "1")] == {"name": "echo", "version": "1", "state": "READY"}


@pytest.mark.parametrize(("path", "statuses"), [
    ("/v2/repository/models/../load", (400, 404)),
    ("/v2/repository/models/..%2F..%2Fetc/load", (400, 404)),
    # the path is not percent-decoded (as Triton): '%2E%2E' names no model, and unloading
    # a model that is not loaded answers 200, as Triton's does
    ("/v2/repository/models/%2E%2E/unload", (200,))])
def test_path_traversal_in_the_url_is_refused(explicit, path, statuses):
    server, _, _ = explicit
    status, body = server.post(path)
    assert status in statuses, body
    assert server.http.is_server_live()


def test_names_that_leave_the_repository_are_refused_on_load_only(explicit):
    server, _, _ = explicit
    for name in ("../escape", "a/b", ".."):
        with pytest.raises(InferenceServerException) as raised:
            server.grpc.load_model(name)
        assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert raised.value.message() == (
            f"invalid model name '{name}', model name must not contain path traversal "
            "characters")
        server.grpc.unload_model(name)  # as Triton: nothing loaded by that name, nothing done
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException) as raised:
        server.grpc.infer("../echo", [x])
    # as Triton (tests/conformance metadata): a lookup checks no name, it finds none
    assert raised.value.message() == "Request for unknown model: '../echo' is not found"


@pytest.mark.parametrize("path", ["../escape.py", "1/../../escape.py", "../../escape.py",
                                  "1/../../sneaky_twin/1/model.py", "1/model.py/../../../x"])
def test_file_override_paths_that_leave_the_model_folder_write_nothing(explicit, path):
    server, repository, scratch = explicit
    payload = b"print('escaped')"
    status, body = server.post("/v2/repository/models/sneaky/load", {"parameters": {
        "config": config_json("sneaky"), f"file:{path}": base64.b64encode(payload).decode()}})
    assert (status, body) == (500, {"error": "failed to load 'sneaky', failed to poll from "
                                             "model repository"})
    with pytest.raises(InferenceServerException) as raised:
        server.grpc.load_model("sneaky", config=config_json("sneaky"),
                               files={f"file:{path}": payload})
    assert raised.value.status() == "StatusCode.INTERNAL"
    assert f"Invalid file parameter 'file:{path}' must stay within model directory" in (
        server.log())
    assert list(scratch.iterdir()) == []  # the temporary folder is gone, nothing beside it
    assert not list(scratch.parent.glob("**/escape.py"))
    assert not (repository / "sneaky_twin").exists()
    assert server.http.is_server_live()


def test_file_override_paths_are_joined_under_the_model_folder(explicit):
    server, _, scratch = explicit
    # as Triton: '/x' is joined under the folder, and '..' that stays inside is allowed
    server.http.load_model("joined", config=config_json("joined"), files={
        "file:/1/model.py": model_py(21).encode(),
        "file:2/../3/model.py": model_py(22).encode()})
    assert http_answer(server.http, "joined") == (22, 3)
    (folder,) = scratch.iterdir()
    assert sorted(p.name for p in (folder / "joined").iterdir()) == ["1", "3"]
    assert not Path("/1/model.py").exists()
    server.grpc.unload_model("joined")
    assert list(scratch.iterdir()) == []
