"""POLL model control in process: each test triggers polls itself (no timing)."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
from control_models import add_echo, echo_config, echo_py, ensemble_config, shared_state

from infercore import NotFoundError, Server

X = {"X": np.array([7], np.int32)}


@pytest.fixture
def state(tmp_path, monkeypatch):
    yield from shared_state(tmp_path, monkeypatch)


def _answer(server: Server, name: str) -> tuple[int, int]:
    outputs = server.model(name).infer(inputs=X).result(timeout=30).outputs
    return int(outputs["TAG"].to_numpy()[0]), int(outputs["VERSION"].to_numpy()[0])


def _poll_server(repo, **options) -> Server:
    # repository_poll_secs=0: no poller thread, the test polls with poll_model_repository
    return Server(model_repository=repo.path, model_control_mode="poll",
                  repository_poll_secs=0, **options)


def _ready(server: Server) -> set[str]:
    return {e.name for e in server.repository_index(ready_only=True)}


def test_poll_loads_added_models_and_unloads_removed_ones(repo, state):
    add_echo(repo, "kept", 1)
    with _poll_server(repo) as server:
        add_echo(repo, "added", 2)
        shutil.rmtree(repo.path / "kept")
        server.poll_model_repository()
        assert _ready(server) == {"added"} and _answer(server, "added") == (2, 1)
        with pytest.raises(NotFoundError):
            server.model("kept").infer(inputs=X)
        assert "kept" not in {e.name for e in server.repository_index()}
        assert ("finalize", "kept", 1, 1) in state.events


def test_an_unchanged_repository_changes_nothing(repo, state):
    add_echo(repo, "m", 1)
    with _poll_server(repo) as server:
        before = server._manager.get("m")
        server.poll_model_repository()
        server.poll_model_repository()
        assert server._manager.get("m") is before
        assert sum(e[0] == "initialize" for e in state.events) == 1


def test_poll_reloads_a_changed_model_file_or_config(repo, state):
    model_dir = add_echo(repo, "m", 1)
    with _poll_server(repo) as server:
        (model_dir / "1" / "model.py").write_text(echo_py(2) + "# new code\n")
        server.poll_model_repository()
        assert _answer(server, "m") == (2, 1)
        (model_dir / "config.pbtxt").write_text(
            echo_config("m").replace("count: 1", "count: 2"))
        server.poll_model_repository()
        assert len(server._manager.get("m").instances) == 2


def test_a_new_version_serves_new_requests_while_the_old_one_finishes(repo, state):
    model_dir = add_echo(repo, "m", 1)
    with _poll_server(repo) as server:
        old = server._manager.get("m")
        draining = threading.Event()
        original = old.unload

        def unload(timeout: float = 30.0) -> None:
            draining.set()
            original(timeout)

        old.unload = unload  # type: ignore[method-assign]
        state.hold.add("m")
        in_flight = server.model("m").infer(inputs=X)
        assert state.entered.acquire(timeout=30)
        state.hold.discard("m")  # only the request already in flight waits at the gate
        (model_dir / "2").mkdir()
        (model_dir / "2" / "model.py").write_text(echo_py(1))
        poll = threading.Thread(target=server.poll_model_repository)
        poll.start()
        assert draining.wait(30)  # version 2 is serving, version 1 drains
        assert _answer(server, "m") == (1, 2)
        state.gate.set()
        poll.join(30)
        assert not poll.is_alive()
        response = in_flight.result(timeout=30)
        assert response.outputs["VERSION"].to_numpy().tolist() == [1]
        assert server._manager.ready_versions("m") == [2]
        rows = {e.version: e.state.value for e in server.repository_index()}
        assert rows == {"1": "UNAVAILABLE", "2": "READY"}


def test_a_failed_reload_keeps_serving_and_is_retried_only_after_a_change(repo, state,
                                                                          caplog):
    model_dir = add_echo(repo, "m", 1)
    with _poll_server(repo) as server:
        (model_dir / "1" / "model.py").write_text("def broken(:\n")
        server.poll_model_repository()
        assert _answer(server, "m") == (1, 1)
        (entry,) = server.repository_index()
        assert (entry.state.value, entry.reason) == ("READY", "")  # as Triton; logged
        assert any("SyntaxError" in r.getMessage() for r in caplog.records)
        failures = sum("SyntaxError" in r.getMessage() for r in caplog.records)
        server.poll_model_repository()  # unchanged: not tried again
        assert sum("SyntaxError" in r.getMessage() for r in caplog.records) == failures
        (model_dir / "1" / "model.py").write_text(echo_py(5))
        server.poll_model_repository()
        assert _answer(server, "m") == (5, 1)
        (entry,) = server.repository_index()
        assert entry.reason == ""


def test_a_model_that_failed_at_startup_loads_once_fixed(repo, state):
    model_dir = add_echo(repo, "m", 1)
    (model_dir / "1" / "model.py").write_text("raise RuntimeError('not yet')\n")
    with _poll_server(repo, exit_on_error=False) as server:
        assert _ready(server) == set()
        (model_dir / "1" / "model.py").write_text(echo_py(1))
        server.poll_model_repository()
        assert _answer(server, "m") == (1, 1)


def test_a_removed_step_takes_its_ensemble_until_it_returns(repo, state, tmp_path):
    add_echo(repo, "step", 3)
    repo.add_model("pipe", config=ensemble_config("pipe", "step"))
    with _poll_server(repo) as server:
        assert _ready(server) == {"pipe", "step"}
        shutil.move(repo.path / "step", tmp_path / "step")
        server.poll_model_repository()
        assert _ready(server) == set()
        server.poll_model_repository()  # nothing changed: nothing tried
        shutil.move(tmp_path / "step", repo.path / "step")
        server.poll_model_repository()
        assert _ready(server) == {"pipe", "step"}
        outputs = server.model("pipe").infer(inputs=X).result(timeout=30).outputs
        assert outputs["TAG"].to_numpy().tolist() == [3]


def test_the_poller_thread_polls_and_is_joined_on_stop(repo, state):
    server = Server(model_repository=repo.path, model_control_mode="poll",
                    repository_poll_secs=0.01)
    done = threading.Condition()
    polls = [0]
    poll = server._manager.poll

    def counted() -> dict[str, str]:
        try:
            return poll()
        finally:
            with done:
                polls[0] += 1
                done.notify_all()

    server._manager.poll = counted  # type: ignore[method-assign]
    with server:
        add_echo(repo, "m", 4)
        with done:
            # The second poll to end from now on started after the model was written.
            target = polls[0] + 2
            assert done.wait_for(lambda: polls[0] >= target, timeout=30)
        assert _answer(server, "m") == (4, 1)
    assert "infercore-repository-poll" not in {t.name for t in threading.enumerate()}
