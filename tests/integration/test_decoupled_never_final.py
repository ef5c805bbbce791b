"""A decoupled model that never sends its final response holds only its own request
(issue #24 item 9), in-thread and process-isolated, through a real ``infercore serve``:
the client's cancel or deadline ends the request with a clear error, the instance goes
on serving other requests and other models, and unload and shutdown end within their
bounds instead of waiting for the final flag.

Triton 2.51, asked the same by hand (the bench's tritonserver, this module's models and
its first two tests): the stream's other requests and other models are served
meanwhile, and the client's cancel or deadline ends its stream (CANCELLED /
DEADLINE_EXCEEDED). But an unload returns at once and the model then stays UNLOADING for
good (12 s watched), its held stream never answered; and at SIGTERM, after
--exit-timeout-secs, tritonserver logs "failed to stop server: Internal - Exit timeout
expired. Exiting immediately." and still had not exited 40 s later (it was killed).
infercore bounds both by the exit timeout, as Triton's message promises: what is still
open then is ended with an error and the model unloads (model.py), and a cancelled held
request is ended 2 s after its cancel when its model does not end it (instance.py).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from serve_process import ServeProcess
from tritonclient.utils import InferenceServerException

from infercore import CancelledError, Options, Server
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

# IN = 0: one response and never the final flag (the sender is kept, so the request is
# never released by the model); IN = -1 or -2: one response, then a thread of the model's
# answers (a response, then the final flag) once it sees the request cancelled: at once
# (-2) or 3 s later (-1), past the engine's grace; it logs how that went. IN = n > 0: n
# responses, then the final flag.
FORGETFUL_PY = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def answer_when_cancelled(request, sender, delay):
    for _ in range(400):
        if request.is_cancelled():
            break
        time.sleep(0.05)
    time.sleep(delay)
    try:
        sender.send(pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", np.array([-2], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        pb_utils.Logger.log_info(f"late send after cancel ({request.is_cancelled()}): no error")
    except Exception as exc:
        pb_utils.Logger.log_info(f"late send after cancel raised {type(exc).__name__}: {exc}")


class TritonPythonModel:
    def initialize(self, args):
        self.kept = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if n < 0:
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([-1], np.int32))]))
                delay = 3.0 if n == -1 else 0.0
                threading.Thread(target=answer_when_cancelled,
                                 args=(request, sender, delay)).start()
                continue
            if n == 0:
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([-1], np.int32))]))
                self.kept.append(sender)
                continue
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""


def _config(name: str, decoupled: bool, extra: str) -> str:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""


MODES = {"in_thread": "", "process": PROCESS}


def build_repository(repo: RepositoryBuilder) -> None:
    """The models of this module (also what was served to Triton 2.51 by hand)."""
    repo.add_model("echo", config=_config("echo", False, ""), model_py=ECHO_PY)
    for mode, extra in MODES.items():
        repo.add_model(
            f"forgetful_{mode}",
            config=_config(f"forgetful_{mode}", True, extra),
            model_py=FORGETFUL_PY,
        )


def _serve(root, *flags: str) -> ServeProcess:
    repo = RepositoryBuilder(root / "models")
    build_repository(repo)
    return ServeProcess(root / "server.log", f"--model-repository={repo.path}", *flags)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    started = _serve(tmp_path_factory.mktemp("never_final"), "--exit-timeout-secs=5")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _in(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


class _Stream:
    """A tritonclient stream whose answers land in a queue."""

    def __init__(self, url: str, timeout: float | None = None) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.answers: queue.Queue = queue.Queue()
        self.client.start_stream(
            callback=lambda result, error: self.answers.put((result, error)), stream_timeout=timeout
        )

    def send(self, model: str, value: int, request_id: str) -> None:
        self.client.async_stream_infer(
            model, _in(value), request_id=request_id, enable_empty_final_response=True
        )

    def next(self, timeout: float = 20.0) -> tuple[object, object]:
        return self.answers.get(timeout=timeout)

    def outputs(self, count: int) -> list[int]:
        values = []
        for _ in range(count):
            result, error = self.next()
            assert error is None, error
            out = result.as_numpy("OUT")
            if out is not None:
                values.append(int(out[0]))
        return values

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def _echo(url: str, value: int) -> int:
    client = grpcclient.InferenceServerClient(url)
    try:
        return int(client.infer("echo", _in(value)).as_numpy("OUT")[0])
    finally:
        client.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_held_request_blocks_no_other_request_and_a_cancel_ends_it(server, mode):
    model = f"forgetful_{mode}"
    held = _Stream(server.grpc_url)
    try:
        held.send(model, 0, "held")
        assert held.outputs(1) == [-1]  # its one response; the final flag never comes
        # the instance and the other models go on meanwhile
        other = _Stream(server.grpc_url)
        try:
            other.send(model, 2, "other")
            assert other.outputs(3) == [0, 1]  # two responses and the empty final one
        finally:
            other.close()
        assert _echo(server.grpc_url, 7) == 7
    finally:
        held.close(cancel=True)  # the client gives up: the held request ends
    # still serving afterwards
    again = _Stream(server.grpc_url)
    try:
        again.send(model, 1, "again")
        assert again.outputs(2) == [0]
    finally:
        again.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_client_deadline_ends_a_held_request_with_a_clear_error(server, mode):
    held = _Stream(server.grpc_url, timeout=1.0)
    try:
        held.send(f"forgetful_{mode}", 0, "held")
        result, error = held.next()
        assert error is None and int(result.as_numpy("OUT")[0]) == -1
        _, error = held.next(timeout=10)
        assert isinstance(error, InferenceServerException)
        assert "Deadline Exceeded" in str(error) or "DEADLINE_EXCEEDED" in str(error.status())
    finally:
        held.close()
    assert _echo(server.grpc_url, 3) == 3


@pytest.mark.parametrize("mode", MODES)
def test_unload_and_shutdown_end_within_their_bounds_with_a_request_held(
    tmp_path: pytest.TempPathFactory, mode
):
    started = _serve(
        tmp_path, "--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=3"
    )
    model = f"forgetful_{mode}"
    held: _Stream | None = None
    try:
        started.wait_ready()
        held = _Stream(started.grpc_url)
        held.send(model, 0, "held")
        assert held.outputs(1) == [-1]
        admin = grpcclient.InferenceServerClient(started.grpc_url)
        try:
            begun = time.monotonic()
            admin.unload_model(model)
            # unloaded within the exit timeout: the held request is ended, not waited for
            started.wait_until(
                lambda: not _listed_ready(admin, model), f"{model} still loaded", timeout=15
            )
            assert time.monotonic() - begun < 12
            _, error = held.next(timeout=15)
            assert "was unloaded before the request completed" in str(error)
            assert _echo(started.grpc_url, 5) == 5  # the other model is untouched
            admin.load_model(model)  # and the model loads again, and serves
        finally:
            admin.close()
        held.close()
        held = _Stream(started.grpc_url)
        held.send(model, 0, "held again")
        assert held.outputs(1) == [-1]
        begun = time.monotonic()
        assert started.stop(timeout=30) == 0  # SIGTERM: ends within the exit timeout
        assert time.monotonic() - begun < 15
    finally:
        if held is not None:
            try:
                held.close()
            except Exception:  # noqa: BLE001 - the server is gone
                pass
        started.stop()


def _listed_ready(admin: grpcclient.InferenceServerClient, model: str) -> bool:
    index = admin.get_model_repository_index(as_json=True).get("models", [])
    return any(entry.get("name") == model and entry.get("state") == "READY" for entry in index)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", [0, -1, -2])
def test_a_cancelled_held_request_ends_by_its_model_or_within_the_grace(
    tmp_path, caplog, mode, value
):
    repo = RepositoryBuilder(tmp_path / "models")
    build_repository(repo)
    server = Server(Options(model_repository=repo.path, exit_timeout=10)).start()
    try:
        stream = server.model(f"forgetful_{mode}").infer(inputs={"IN": np.array([value], np.int32)})
        answers = iter(stream)
        assert next(answers).outputs["OUT"].to_numpy().tolist() == [-1]
        begun = time.monotonic()
        stream.cancel()
        if value == -2:  # the model answers its cancelled request: the caller gets it
            assert [r.outputs["OUT"].to_numpy().tolist() for r in answers] == [[-2]]
        else:  # it does not, in time: the engine ends the request
            with pytest.raises(CancelledError, match="had not sent its final response"):
                list(answers)
            assert 1.5 < time.monotonic() - begun < 5  # the 2 s grace
        if value != 0:  # the model's answer after the grace is dropped, no error raised
            deadline = time.monotonic() + 10
            while "late send after cancel" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "late send after cancel (True): no error" in caplog.text
    finally:
        begun = time.monotonic()
        server.stop()
    assert time.monotonic() - begun < 5  # nothing left in flight to wait for
    assert "still in flight" not in caplog.text
