"""benchmarks/worker_execute.py drives the worker's private execute path in process: it
must keep running the real code, answers included, as that code changes."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from infercore.testing import RepositoryBuilder

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def test_worker_execute_benchmark_runs_the_real_execute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("worker_execute")
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=bench.CONFIG, model_py=bench.MODEL_PY)
    worker = bench.WorkerUnderTest(repo.path)
    try:
        figure = bench.per_request_us(worker, batch=4, requests=40, rounds=1)
        answers = worker.last_answer()
    finally:
        worker.close()
    assert figure > 0
    assert len(answers) == 4  # one response per request of the last execution
    for outputs in answers:
        np.testing.assert_array_equal(outputs["OUTPUT0"], np.full((1, 16), 3.0, np.float32))
        np.testing.assert_array_equal(outputs["OUTPUT1"], np.full((1, 16), -1.0, np.float32))
