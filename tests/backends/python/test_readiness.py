"""A Python model's ``is_ready()`` as the ReadinessCheck capability (backends/base.py):
asked of every instance at once, bounded, coalesced while one check is under way."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from test_python_backend import INT_CONFIG, Harness

from infercore.backends.base import ReadinessCheck
from infercore.backends.python import readiness


@pytest.fixture
def harness(tmp_path: Path):
    made = Harness(tmp_path)
    yield made
    made.close()


GATED_PY = """
import threading

import triton_python_backend_utils as pb_utils

GATE = threading.Event()
CALLS = []


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def is_ready(self):
        CALLS.append(self.name)
        GATE.wait(10)
        return self.name != "m_1" or ANSWER_OF_SECOND

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _module(instance):
    import sys

    return sys.modules[type(instance._object).__module__]


def test_a_model_without_is_ready_declares_no_check(harness: Harness):
    model, _ = harness.load(
        "m", "class TritonPythonModel:\n    def execute(self, r):\n        return []\n", INT_CONFIG
    )
    assert isinstance(model, ReadinessCheck)
    assert model.checks_readiness is False
    assert model.check_ready() is True


@pytest.mark.parametrize(("second", "ready"), [(True, True), (False, False)])
def test_every_instance_is_asked_and_concurrent_checks_share_one_call(
    harness: Harness, second: bool, ready: bool, monkeypatch
):
    model, instances = harness.load(
        "m", f"ANSWER_OF_SECOND = {second}\n" + GATED_PY, INT_CONFIG, instances=2
    )
    module = _module(instances[0])
    assert model.checks_readiness is True
    joined = []  # each check, once it holds the call under way of each instance
    start = readiness.ReadinessProbe.start

    def counted_start(probe):
        future = start(probe)
        joined.append(probe)
        return future

    monkeypatch.setattr(readiness.ReadinessProbe, "start", counted_start)
    answers: list[bool] = []
    checks = [
        threading.Thread(target=lambda: answers.append(model.check_ready())) for _ in range(3)
    ]
    for check in checks:
        check.start()
    while len(joined) < 6:  # all three checks hold both instances' calls, still gated
        threading.Event().wait(0.01)
    module.GATE.set()
    for check in checks:
        check.join(10)
    assert answers == [ready] * 3
    assert sorted(module.CALLS) == ["m_0", "m_1"]  # three checks, one call per instance


def test_no_answer_within_the_bound_is_not_ready(harness: Harness, monkeypatch, caplog):
    monkeypatch.setattr(readiness, "READY_TIMEOUT_S", 0.2)
    model, instances = harness.load("m", "ANSWER_OF_SECOND = True\n" + GATED_PY, INT_CONFIG)
    assert model.check_ready() is False
    assert "did not answer within 0.2 s" in caplog.text
    _module(instances[0]).GATE.set()  # the call ends: the next check asks again
    assert model.check_ready() is True
