"""``Options.clock`` drives the server's own time: polls, unload and stop deadlines wait
for a ManualClock's advance, not for real seconds (infercore.clock's rule)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, gated_identity_model, install_gate

from infercore import InvalidArgumentError, ModelControlMode, Options, Server, UnavailableError
from infercore.repository import RepositoryPoller
from infercore.testing import ManualClock

GATE_CONFIG, GATE_PY = gated_identity_model("api_clock_gate")


def test_options_refuse_a_clock_that_is_not_one():
    with pytest.raises(InvalidArgumentError, match="clock must be an infercore.clock.Clock"):
        Options(clock=time.monotonic_ns)  # type: ignore[arg-type]


def test_the_poller_polls_when_its_clock_passes_the_interval():
    clock = ManualClock()
    polled = threading.Semaphore(0)
    poller = RepositoryPoller(polled.release, 5.0, clock)
    poller.start()
    try:
        clock.wait_for_sleepers(1)
        clock.advance(seconds=4.9)
        assert not polled.acquire(timeout=0.2)  # real time passes; the clock's did not
        clock.advance(ms=100)
        assert polled.acquire(timeout=30)
        clock.wait_for_sleepers(1)  # the next interval starts after the poll
        clock.advance(seconds=5)
        assert polled.acquire(timeout=30)
    finally:
        poller.stop()


def test_a_poll_mode_server_applies_changes_when_its_clock_advances(repo):
    clock = ManualClock()
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    server = Server(Options(model_repository=repo.path, clock=clock,
                            model_control_mode=ModelControlMode.POLL,
                            repository_poll_secs=2)).start()
    try:
        clock.wait_for_sleepers(1)  # the poller, waiting for its first interval
        (repo.path / "add_sub" / "2").mkdir()
        (repo.path / "add_sub" / "2" / "model.py").write_text(
            (repo.path / "add_sub" / "1" / "model.py").read_text())
        assert not server.model("add_sub", 2).ready()
        clock.advance(seconds=2)
        deadline = time.monotonic() + 60
        while not server.model("add_sub", 2).ready():
            assert time.monotonic() < deadline, "the poll after the advance never loaded v2"
            time.sleep(0.02)
    finally:
        server.stop()


def test_stop_fails_requests_still_running_when_its_clock_passes_the_timeout(repo,
                                                                             monkeypatch):
    gate = install_gate(monkeypatch, "api_clock_gate")
    clock = ManualClock()
    repo.add_model("gate", config=GATE_CONFIG, model_py=GATE_PY)
    server = Server(Options(model_repository=repo.path, clock=clock)).start()
    stream = server.model("gate").infer({"X": np.array([1.0], np.float32)},
                                        raise_on_error=False)
    assert gate.entered.wait(30)
    stopper = threading.Thread(target=server.stop, kwargs={"timeout": 600})
    stopper.start()
    try:
        clock.wait_for_sleepers(1)  # the unload, draining the request in the gate
        assert not stream.done
        clock.advance(seconds=600)  # no real 600 s: the clock's deadline passed
        response = stream.result(30)
        assert isinstance(response.error, UnavailableError)
        assert "unloaded before the request completed" in str(response.error)
        assert not gate.release.is_set()  # failed while the model still ran
    finally:
        gate.release.set()
        stopper.join(60)
    assert not stopper.is_alive()
