"""Model instances on a real two-node Ray cluster on this machine.

One ``ray.cluster_utils.Cluster`` per module: a head node offering the custom resource
``node_a`` and a worker node offering ``node_b`` (both ``slot``), each with one CPU and a
100 MB object store. Instances ask for no CPU, so they fit on this small machine.

The test model tells where it runs (instance name, Ray node id, pid, the resources Ray
gave it). Two optional inputs make it deterministic without sleeping: NOTE names a FIFO it
writes that description to when it starts a request, HOLD names a FIFO it reads before
answering, so a test knows a request is in flight on which instance, and keeps it there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'infercore[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from infercore import Server  # noqa: E402
from infercore.config import model_config_to_json, parse_model_config  # noqa: E402
from infercore.errors import UnavailableError  # noqa: E402
from infercore.testing import RepositoryBuilder  # noqa: E402

STORE_BYTES = 100 * 1024 * 1024
DEADLINE_S = 60.0  # waits on other processes; reached only when something is broken

WHERE_PY = """
import json
import os

import numpy as np
import ray
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        if self.name.startswith("broken"):
            raise RuntimeError("this instance cannot start")

    def execute(self, requests):
        context = ray.get_runtime_context()
        where = json.dumps({"instance": self.name, "node": context.get_node_id(),
                            "pid": os.getpid(),
                            "resources": context.get_assigned_resources()})
        responses = []
        for request in requests:
            note = pb_utils.get_input_tensor_by_name(request, "NOTE")
            if note is not None:
                with open(note.as_numpy()[0].decode(), "w") as fifo:
                    fifo.write(where)
            hold = pb_utils.get_input_tensor_by_name(request, "HOLD")
            if hold is not None:
                with open(hold.as_numpy()[0].decode()) as fifo:
                    fifo.read()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x * 2),
                pb_utils.Tensor("WHERE", np.array([where.encode()], np.object_))]))
        return responses
"""


def where_config(name: str, groups: dict[str, tuple[int, str]]) -> str:
    """A config whose groups (name -> (count, placement JSON)) all run on Ray."""
    group_list = ", ".join(f'{{ name: "{g}", count: {count}, kind: KIND_CPU }}'
                           for g, (count, _) in groups.items())
    parameters = "\n".join(
        f"parameters {{ key: \"infercore.ray.{g}\" value {{ string_value: '{placement}' }} }}"
        for g, (_, placement) in groups.items())
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ -1 ] }},
        {{ name: "NOTE", data_type: TYPE_STRING, dims: [ 1 ], optional: true }},
        {{ name: "HOLD", data_type: TYPE_STRING, dims: [ 1 ], optional: true }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ -1 ] }},
         {{ name: "WHERE", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {group_list} ]
{parameters}
"""


# a_0 on the head node, b_0 on the worker; a lost actor is restarted after 2 s
WHERE_CONFIG = where_config("where", {
    "a": (1, '{"num_cpus": 0, "resources": {"node_a": 1}, "restart_backoff_ms": 2000}'),
    "b": (1, '{"num_cpus": 0, "resources": {"node_b": 1}, "restart_backoff_ms": 2000}'),
})


def _start_cluster() -> tuple[Cluster, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node_a": 8, "slot": 2},
        "object_store_memory": STORE_BYTES})
    try:
        worker = cluster.add_node(num_cpus=1, resources={"node_b": 8, "slot": 2},
                                  object_store_memory=STORE_BYTES)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, worker


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    try:
        cluster, worker = _start_cluster()
    except Exception:  # noqa: BLE001 - once more, below
        # Ray's own start-up sometimes times out on a loaded 2-core machine (its raylet
        # must register within 30 s): that is the environment, not what these tests check.
        cluster, worker = _start_cluster()
    try:
        yield {"address": cluster.address, "node_a": cluster.head_node.node_id,
               "node_b": worker.node_id}
    finally:
        ray.shutdown()  # the servers of this module connected this process
        cluster.shutdown()


@pytest.fixture(scope="module")
def where_server(cluster, tmp_path_factory) -> Iterator[Server]:
    repo = RepositoryBuilder(tmp_path_factory.mktemp("where") / "models")
    repo.add_model("where", config=WHERE_CONFIG, model_py=WHERE_PY)
    with Server(model_repository=repo.path, ray_address=cluster["address"]) as server:
        yield server


class Fifos:
    """Named pipes a test and a model instance meet on."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._made: list[str] = []

    def make(self) -> str:
        path = str(self._folder / f"fifo{len(self._made)}")
        os.mkfifo(path)
        self._made.append(path)
        return path

    def release_all(self) -> None:
        """Let go of any instance a failed test left holding (without blocking)."""
        for path in self._made:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # nobody is reading it
                continue
            os.close(fd)

    @staticmethod
    def read(path: str) -> dict[str, Any]:
        """What the instance that started the request wrote (blocks until it does)."""
        with open(path) as fifo:
            return json.loads(fifo.read())

    @staticmethod
    def release(path: str) -> None:
        with open(path, "w") as fifo:
            fifo.write("go")


@pytest.fixture
def fifos(tmp_path) -> Iterator[Fifos]:
    fifos = Fifos(tmp_path)
    yield fifos
    fifos.release_all()


def _inputs(x: np.ndarray, note: str = "", hold: str = "") -> dict[str, np.ndarray]:
    inputs = {"X": x}
    if note:
        inputs["NOTE"] = np.array([note.encode()], np.object_)
    if hold:
        inputs["HOLD"] = np.array([hold.encode()], np.object_)
    return inputs


def _where(response) -> dict[str, Any]:
    return json.loads(response.outputs["WHERE"].to_numpy()[0])


def _reason(server: Server, name: str) -> str:
    (entry,) = [e for e in server.repository_index() if e.name == name]
    assert entry.state.value == "READY"
    return entry.reason


def _wait_until(condition, what: str) -> None:
    # The restart happens in other processes: nothing to wait on but its outcome.
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} after {DEADLINE_S} s")
        time.sleep(0.05)


def test_instances_land_on_the_nodes_they_ask_for_and_requests_reach_each(
        cluster, where_server, fifos):
    model = where_server.model("where")
    x = np.arange(4, dtype=np.float32)
    note, hold = fifos.make(), fifos.make()
    held = model.infer(inputs=_inputs(x, note=note, hold=hold))
    first = fifos.read(note)  # one instance is busy with the held request
    other = _where(model.infer(inputs=_inputs(x)).result())  # so the other one answers
    Fifos.release(hold)
    assert _where(held.result()) == first
    by_instance = {first["instance"]: first, other["instance"]: other}
    assert set(by_instance) == {"a_0", "b_0"}
    assert by_instance["a_0"]["node"] == cluster["node_a"]
    assert by_instance["b_0"]["node"] == cluster["node_b"]
    assert by_instance["a_0"]["resources"] == {"node_a": 1.0}
    assert by_instance["b_0"]["resources"] == {"node_b": 1.0}
    assert first["pid"] != os.getpid() and other["pid"] != os.getpid()
    statistics = where_server.statistics("where")[0]
    assert statistics.instance_executions.get("a_0", 0) >= 1
    assert statistics.instance_executions.get("b_0", 0) >= 1
    assert statistics.compute_infer.count == statistics.execution_count


def test_large_tensors_travel_through_the_object_store(where_server):
    x = np.random.default_rng(7).random(1_000_000, dtype=np.float32)  # 4 MB
    response = where_server.model("where").infer(inputs=_inputs(x)).result()
    np.testing.assert_array_equal(response.outputs["Y"].to_numpy(), x * 2)


def test_a_killed_actor_fails_only_its_inflight_request_and_is_restarted(
        where_server, fifos):
    model = where_server.model("where")
    x = np.ones(2, np.float32)
    note_1, hold_1, note_2, hold_2 = fifos.make(), fifos.make(), fifos.make(), fifos.make()
    doomed = model.infer(inputs=_inputs(x, note=note_1, hold=hold_1))
    victim = fifos.read(note_1)
    survivor = model.infer(inputs=_inputs(x, note=note_2, hold=hold_2))
    assert fifos.read(note_2)["instance"] != victim["instance"]
    os.kill(victim["pid"], signal.SIGKILL)
    with pytest.raises(UnavailableError) as raised:
        doomed.result()
    assert raised.value.message.startswith(
        f"instance '{victim['instance']}' of model 'where' on Ray failed: its actor died "
        "while running the request (")
    assert _reason(where_server, "where") == (
        f"degraded: 1 of 2 instances on Ray available ({victim['instance']} restarting)")
    Fifos.release(hold_2)
    survivor.result()  # the other instance's request was never touched
    # while the instance restarts, its requests run on the other one
    for _ in range(3):
        model.infer(inputs=_inputs(x)).result()
    _wait_until(lambda: _reason(where_server, "where") == "", "restarted")
    # the restarted instance serves again, from a new process
    note, hold = fifos.make(), fifos.make()
    held = model.infer(inputs=_inputs(x, note=note, hold=hold))
    busy = fifos.read(note)
    free = _where(model.infer(inputs=_inputs(x)).result())
    Fifos.release(hold)
    held.result()
    restarted = busy if busy["instance"] == victim["instance"] else free
    assert restarted["instance"] == victim["instance"]
    assert restarted["pid"] != victim["pid"]
    assert where_server.statistics("where")[0].fail.count == 1


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples of each gauge and counter family (parsed by prometheus_client, which
    names a counter's samples ``<family>_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (family.name, family.name + "_total"):
                found.setdefault(family.name, []).append((sample.labels, sample.value))
    return found


def _of_model(samples, name: str, model: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, value) for labels, value in samples.get(name, [])
            if labels["model"] == model]


def _per_instance(samples, name: str, model: str) -> dict[tuple[str, str], float]:
    return {(labels["instance"], labels["node"]): value
            for labels, value in _of_model(samples, name, model)}


def test_metrics_show_each_instance_on_its_node_and_add_up_to_tritons_figures(
        cluster, where_server, fifos):
    model = where_server.model("where")
    before = _samples(where_server.metrics())
    x = np.ones(2, np.float32)
    note, hold = fifos.make(), fifos.make()
    held = model.infer(inputs=_inputs(x, note=note, hold=hold))
    fifos.read(note)
    model.infer(inputs=_inputs(x)).result()  # on the other instance
    Fifos.release(hold)
    held.result()
    after = _samples(where_server.metrics())
    a, b = ("a_0", cluster["node_a"]), ("b_0", cluster["node_b"])

    def delta(name: str) -> dict[tuple[str, str], float]:
        old = _per_instance(before, name, "where")
        return {key: value - old.get(key, 0.0)
                for key, value in _per_instance(after, name, "where").items()}

    def triton(samples, name: str) -> float:
        ((labels, value),) = _of_model(samples, name, "where")
        assert labels == {"model": "where", "version": "1"}  # Triton's label set, unchanged
        return value

    assert {key: value for key, value in delta("infercore_ray_exec_count").items()
            if value} == {a: 1.0, b: 1.0}
    assert _per_instance(after, "infercore_ray_instance_up", "where") == {a: 1.0, b: 1.0}
    for labels, _ in _of_model(after, "infercore_ray_instance_up", "where"):
        assert set(labels) == {"model", "version", "instance", "node", "node_ip"}
        assert labels["node_ip"] and labels["version"] == "1"
    # Triton's families hold the same executions, and the model's time in the actors is
    # Triton's compute_infer (up to the rounding to microseconds)
    assert (triton(after, "nv_inference_exec_count")
            - triton(before, "nv_inference_exec_count")) == 2
    infer_us = sum(delta("infercore_ray_compute_infer_duration_us").values())
    triton_infer_us = (triton(after, "nv_inference_compute_infer_duration_us")
                       - triton(before, "nv_inference_compute_infer_duration_us"))
    assert abs(infer_us - triton_infer_us) <= 4
    assert sum(delta("infercore_ray_call_duration_us").values()) >= infer_us


# the WHERE model, whose (re)start waits on the FIFO at HOLD_START when it exists
READY_PY = WHERE_PY.replace(
    '        self.name = args["model_instance_name"]\n',
    '        self.name = args["model_instance_name"]\n'
    '        if os.path.exists(HOLD_START):\n'
    '            with open(HOLD_START) as fifo:\n'
    '                fifo.read()\n')


def test_a_model_whose_every_instance_is_down_is_not_ready_until_one_is_back(
        cluster, tmp_path, fifos):
    hold_start = str(tmp_path / "hold_start")
    placement = '{"num_cpus": 0, "resources": {"node_b": 1}, "restart_backoff_ms": 0}'
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("lonely", model_py=f"HOLD_START = {hold_start!r}\n" + READY_PY,
                   config=where_config("lonely", {"l": (1, placement)}))
    with Server(model_repository=repo.path, ray_address=cluster["address"]) as server:
        model = server.model("lonely")
        x = np.ones(1, np.float32)
        victim = _where(model.infer(inputs=_inputs(x)).result())
        assert model.ready() and server.ready()
        os.mkfifo(hold_start)  # the restart's initialize waits on it
        os.kill(victim["pid"], signal.SIGKILL)
        _wait_until(lambda: not model.ready(), "reported not ready")
        (entry,) = [e for e in server.repository_index() if e.name == "lonely"]
        assert (entry.state.value, entry.reason) == (
            "UNAVAILABLE", "unavailable: 0 of 1 instances on Ray available (l_0 restarting)")
        assert not server.ready()  # strict readiness: every model must be ready
        assert server.repository_index(ready_only=True) == []
        with pytest.raises(UnavailableError, match="'l_0' of model 'lonely' on Ray is "
                                                   "restarting and no other instance"):
            model.infer(inputs=_inputs(x)).result()
        Fifos.release(hold_start)
        _wait_until(model.ready, "ready again")
        assert server.ready()
        assert _reason(server, "lonely") == ""
        assert _where(model.infer(inputs=_inputs(x)).result())["pid"] != victim["pid"]


ONNX_CONFIG = """
name: "onnx_add_sub"
backend: "onnxruntime"
max_batch_size: 8
dynamic_batching { }
instance_group [ { name: "remote", count: 1, kind: KIND_CPU } ]
parameters { key: "infercore.ray.remote"
             value { string_value: '{"num_cpus": 0, "resources": {"node_b": 1}}' } }
"""


def test_an_onnx_model_runs_on_ray_through_the_dynamic_batcher(cluster, tmp_path):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from framework_models import onnx_add_sub

    repo = RepositoryBuilder(tmp_path / "models")
    model_dir = repo.add_model("onnx_add_sub", config=ONNX_CONFIG)
    onnx_add_sub(model_dir / "1" / "model.onnx")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    with Server(model_repository=repo.path, ray_address=cluster["address"]) as server:
        response = server.model("onnx_add_sub").infer(
            inputs={"INPUT0": a, "INPUT1": b}).result()
        statistics = server.statistics("onnx_add_sub")[0]
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + b)
    np.testing.assert_array_equal(response.outputs["OUTPUT1"].to_numpy(), a - b)
    assert statistics.instance_executions == {"remote_0": 1}
    assert statistics.batch_stats[0].batch_size == 2


def test_a_reload_with_a_new_instance_count_loses_no_request(cluster, tmp_path, fifos):
    placement = '{"num_cpus": 0, "resources": {"node_a": 1}}'
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("scale", model_py=WHERE_PY,
                   config=where_config("scale", {"a": (1, placement)}))

    def with_count(count: int) -> dict[str, Any]:
        config = parse_model_config(where_config("scale", {"a": (count, placement)}),
                                    model_name="scale")
        return model_config_to_json(config)

    with Server(model_repository=repo.path, ray_address=cluster["address"],
                model_control_mode="explicit", startup_models=["scale"]) as server:
        model = server.model("scale")
        stop = threading.Event()
        answered: list[str] = []
        failed: list[BaseException] = []

        def load() -> None:  # requests all along, from another thread
            x = np.ones(1, np.float32)
            while not stop.is_set():
                try:
                    answered.append(_where(model.infer(inputs=_inputs(x)).result())["pid"])
                except BaseException as exc:  # noqa: BLE001 - every failure counts
                    failed.append(exc)

        sender = threading.Thread(target=load)
        sender.start()
        try:
            server.load("scale", config=with_count(3))
            # three instances now: with two held, the third answers
            notes, holds = [fifos.make(), fifos.make()], [fifos.make(), fifos.make()]
            x = np.ones(1, np.float32)
            held = [model.infer(inputs=_inputs(x, note=n, hold=h))
                    for n, h in zip(notes, holds, strict=True)]
            names = {fifos.read(note)["instance"] for note in notes}
            names.add(_where(model.infer(inputs=_inputs(x)).result())["instance"])
            for hold in holds:
                Fifos.release(hold)
            for stream in held:
                stream.result()
            server.load("scale", config=with_count(1))
        finally:
            stop.set()
            sender.join(DEADLINE_S)
        assert names == {"a_0", "a_1", "a_2"}
        assert failed == []
        assert len(set(answered)) >= 2  # served by the old and the new actors
        assert server.model("scale").config()["instance_group"][0]["count"] == 1


def test_a_placement_group_spreads_instances_over_the_nodes(cluster, tmp_path, fifos):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("spread", model_py=WHERE_PY, config=where_config("spread", {
        "s": (2, '{"num_cpus": 0, "resources": {"slot": 1}, "strategy": "STRICT_SPREAD"}')}))
    with Server(model_repository=repo.path, ray_address=cluster["address"]) as server:
        model = server.model("spread")
        x = np.ones(1, np.float32)
        note, hold = fifos.make(), fifos.make()
        held = model.infer(inputs=_inputs(x, note=note, hold=hold))
        first = fifos.read(note)
        second = _where(model.infer(inputs=_inputs(x)).result())
        Fifos.release(hold)
        held.result()
    assert {first["instance"], second["instance"]} == {"s_0", "s_1"}
    assert {first["node"], second["node"]} == {cluster["node_a"], cluster["node_b"]}


def test_models_that_cannot_load_on_ray_fail_with_a_clear_reason(cluster, tmp_path):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("nowhere", model_py=WHERE_PY, config=where_config("nowhere", {
        "n": (1, '{"num_cpus": 0, "resources": {"node_c": 1}, "start_timeout_s": 2}')}))
    repo.add_model("broken", model_py=WHERE_PY, config=where_config("broken", {
        "broken": (1, '{"num_cpus": 0}')}))
    with Server(model_repository=repo.path, ray_address=cluster["address"],
                exit_on_error=False) as server:
        reasons = {e.name: (e.state.value, e.reason) for e in server.repository_index()}
    state, reason = reasons["nowhere"]
    assert state == "UNAVAILABLE"
    code, _, message = reason.partition(": ")  # a version's reason starts with its code
    assert code in ("Internal", "Invalid argument", "Unavailable") and message == (
        "instance 'n_0' of model 'nowhere' on Ray was not placed and loaded within 2 s: no "
        "node of the cluster may offer {'node_c': 1.0}")
    assert reasons["broken"][0] == "UNAVAILABLE"
    assert "this instance cannot start" in reasons["broken"][1]


# -- through tritonclient, against `infercore serve` --------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(cluster, tmp_path) -> Iterator[str]:
    """``infercore serve`` (gRPC only) of the "where" model, joined to the cluster through
    RAY_ADDRESS; yields its gRPC address."""
    import tritonclient.grpc as grpcclient

    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("where", config=WHERE_CONFIG, model_py=WHERE_PY)
    port = _free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "infercore", "serve", "--model-repository", str(repo.path),
         "--grpc-port", str(port), "--allow-http=false", "--allow-metrics=false"],
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "RAY_ADDRESS": cluster["address"], "PYTHONUNBUFFERED": "1"})
    url = f"127.0.0.1:{port}"
    try:
        client = grpcclient.InferenceServerClient(url)

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError((tmp_path / "serve.log").read_text()[-4000:])
            try:
                return bool(client.is_server_ready())
            except Exception:
                return False

        _wait_until(ready, "serving")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    # Ray did not take SIGTERM over: the server drained and stopped as usual
    assert process.returncode == 0, (tmp_path / "serve.log").read_text()[-4000:]


def test_tritonclient_requests_reach_every_instance(cluster, serve, fifos):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(serve)

    def inputs(note: str = "", hold: str = "") -> list[grpcclient.InferInput]:
        x = grpcclient.InferInput("X", [3], "FP32")
        x.set_data_from_numpy(np.arange(3, dtype=np.float32))
        tensors = [x]
        for name, path in (("NOTE", note), ("HOLD", hold)):
            if path:
                tensor = grpcclient.InferInput(name, [1], "BYTES")
                tensor.set_data_from_numpy(np.array([path.encode()], np.object_))
                tensors.append(tensor)
        return tensors

    note, hold = fifos.make(), fifos.make()
    done = threading.Event()
    held: list[Any] = []

    def callback(result, error) -> None:
        held.append(error or result)
        done.set()

    client.async_infer("where", inputs(note, hold), callback)
    first = fifos.read(note)
    second = client.infer("where", inputs())
    Fifos.release(hold)
    assert done.wait(DEADLINE_S)
    answered = [json.loads(held[0].as_numpy("WHERE")[0]), json.loads(second.as_numpy("WHERE")[0])]
    assert answered[0] == first
    assert {a["instance"]: a["node"] for a in answered} == {
        "a_0": cluster["node_a"], "b_0": cluster["node_b"]}
    assert second.as_numpy("Y").tolist() == [0.0, 2.0, 4.0]
    statistics = client.get_inference_statistics("where", as_json=True)["model_stats"][0]
    assert int(statistics["inference_stats"]["success"]["count"]) == 2
    client.close()
