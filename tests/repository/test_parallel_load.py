"""Models load side by side, as Triton's --model-load-thread-count loads them: a model's
initialize here waits at a barrier the other models reach only while it waits, so the
repository loads only if the loads run at the same time."""

from __future__ import annotations

import time

import pytest

from infercore import Server
from infercore.testing import RepositoryBuilder

# Each initialize leaves a marker in the barrier folder, then waits (at most `wait_s`)
# until every model of the repository has left one.
BARRIER_CONFIG = """
name: "%(name)s"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
parameters { key: "barrier", value: { string_value: "%(barrier)s" } }
parameters { key: "parties", value: { string_value: "%(parties)d" } }
parameters { key: "wait_s", value: { string_value: "%(wait_s)s" } }
"""

BARRIER_PY = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        folder, parties = params["barrier"], int(params["parties"])
        open(os.path.join(folder, args["model_name"]), "w").close()
        deadline = time.monotonic() + float(params["wait_s"])
        while len(os.listdir(folder)) < parties:
            if time.monotonic() > deadline:
                raise RuntimeError("the other models did not load meanwhile")
            time.sleep(0.01)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""


def _repository(tmp_path, count: int, wait_s: float) -> RepositoryBuilder:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    repo = RepositoryBuilder(tmp_path / "models")
    for index in range(count):
        name = f"slow_{index}"
        repo.add_model(name, config=BARRIER_CONFIG % {
            "name": name, "barrier": barrier, "parties": count, "wait_s": wait_s},
            model_py=BARRIER_PY)
    return repo


@pytest.mark.parametrize("threads", [4, 8])
def test_a_repository_of_models_loads_side_by_side(tmp_path, threads):
    repo = _repository(tmp_path, 4, wait_s=30)
    with Server(model_repository=repo.path, model_load_thread_count=threads) as server:
        states = {entry.name: entry.state.value for entry in server.repository_index()}
        assert states == dict.fromkeys(["slow_0", "slow_1", "slow_2", "slow_3"], "READY")


def test_more_models_than_threads_wait_for_a_thread(tmp_path):
    # 3 models, 2 threads: the barrier of 3 is never reached while only 2 load
    repo = _repository(tmp_path, 3, wait_s=1)
    started = time.monotonic()
    server = Server(model_repository=repo.path, model_load_thread_count=2,
                    exit_on_error=False).start()
    try:
        states = sorted(entry.state.value for entry in server.repository_index())
        # the first two cannot reach the barrier of three: one at least times out (a
        # third load starts only then, and may find all three markers)
        assert "UNAVAILABLE" in states, states
        assert time.monotonic() - started < 10
    finally:
        server.stop()


def test_one_thread_loads_one_model_at_a_time(tmp_path):
    repo = _repository(tmp_path, 2, wait_s=0.5)
    server = Server(model_repository=repo.path, model_load_thread_count=1,
                    exit_on_error=False).start()
    try:
        states = {entry.name: entry.state.value for entry in server.repository_index()}
        # the first waits alone and fails; the second finds both markers
        assert states == {"slow_0": "UNAVAILABLE", "slow_1": "READY"}, states
    finally:
        server.stop()


def test_process_isolated_models_load_side_by_side(tmp_path):
    repo = _repository(tmp_path, 3, wait_s=60)
    with Server(model_repository=repo.path,
                backend_configuration={"python": {"execution-mode": "process"}}) as server:
        assert [entry.state.value for entry in server.repository_index()] == ["READY"] * 3

