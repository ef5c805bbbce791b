"""RayInstance and RayBackendModel against a fake cluster: shipping payloads, failing only
the in-flight requests of a lost actor, restarts (bounded), failover, health, finalize.

The fake stands where cluster.py talks to Ray, so these run without Ray, in milliseconds.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from infercore.backends.base import InstanceInfo, ModelContext
from infercore.backends.ray.host import HostReport
from infercore.backends.ray.instance import ActorLost, InstanceState, RayInstance
from infercore.backends.ray.model import RayBackendModel
from infercore.backends.ray.placement import RayPlacement
from infercore.backends.ray.wire import RemoteRequest, RemoteResponse, RemoteResult, Stored
from infercore.config import parse_model_config
from infercore.errors import InternalError, UnavailableError
from infercore.payload import Payload
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.tensor import Tensor

WAIT_S = 10.0  # deadline of waits on other threads (never reached when all is well)


class FakeActor:
    def __init__(self, number: int) -> None:
        self.number = number
        self.finalized = False
        self.killed = False
        self._ended = threading.Condition()
        self._reason = ""

    def die(self, reason: str) -> None:
        with self._ended:
            self._reason = reason
            self._ended.notify_all()

    def watch(self) -> None:
        with self._ended:
            self._ended.wait_for(lambda: self._reason or self.finalized, WAIT_S)
            if self._reason:
                raise ActorLost(self._reason)

    def end(self) -> None:
        with self._ended:
            self.finalized = True
            self._ended.notify_all()


class FakeCluster:
    """Actors numbered in launch order; each execution answers Y = X * 2 and which actor
    ran it (ACTOR), unless ``on_execute`` says otherwise."""

    def __init__(self, *, failing_loads: int = 0) -> None:
        self.actors: list[FakeActor] = []
        self.failing_loads = failing_loads
        self.stored: list[np.ndarray] = []
        self.on_execute = None
        self.reserved: list[str] = []
        self.released = False
        self._launched = threading.Condition()

    def reserve(self, group: str) -> None:
        self.reserved.append(group)

    def release(self) -> None:
        self.released = True

    def wait_launched(self, count: int) -> None:
        with self._launched:
            assert self._launched.wait_for(lambda: len(self.actors) >= count, WAIT_S)

    def launch(self, info: InstanceInfo) -> FakeActor:
        with self._launched:
            actor = FakeActor(len(self.actors))
            self.actors.append(actor)
            self._launched.notify_all()
        return actor

    def wait_loaded(self, launch: FakeActor, timeout_s: float) -> tuple[FakeActor, HostReport]:
        if self.failing_loads:
            self.failing_loads -= 1
            raise InternalError(f"load {launch.number} failed")
        return launch, HostReport(f"node-{launch.number}", 100 + launch.number, ())

    def store(self, array: np.ndarray) -> int:
        self.stored.append(array)
        return len(self.stored) - 1

    def execute(self, actor: FakeActor, requests: list[RemoteRequest]) -> RemoteResult:
        if self.on_execute is not None:
            self.on_execute(actor)
        if actor._reason:
            raise ActorLost(actor._reason)
        responses = []
        for request in requests:
            (name, datatype, value) = request.inputs[0]
            x = self.stored[value.ref] if isinstance(value, Stored) else value
            responses.append((RemoteResponse(
                (("Y", datatype, x * 2), ("ACTOR", "INT32", np.array([actor.number], np.int32))),
                None, None, True),))
        return RemoteResult(tuple(responses), input_ns=10, infer_ns=1_000, output_ns=20)

    def watch(self, actor: FakeActor) -> None:
        actor.watch()

    def finalize(self, actor: FakeActor, timeout_s: float) -> None:
        actor.end()

    def kill(self, actor: FakeActor) -> None:
        actor.killed = True
        actor.die("killed")


def _info(index: int = 0, group: str = "g") -> InstanceInfo:
    return InstanceInfo(name=f"{group}_{index}", group_name=group, index=index,
                        kind="KIND_CPU", device_id=0)


# Each test request's stream (the sender lets go of it once the final response is out),
# by the request's id; the request is kept with it, so the id stays its own.
_STREAMS: dict[int, tuple[InferRequest, ResponseStream]] = {}


def _payload(*values: np.ndarray, clock=None) -> Payload:
    requests = []
    for value in values:
        request = InferRequest("m", {"X": Tensor.from_object(value)})
        stream = ResponseStream(request)
        request.sender = ResponseSender(request, stream, "m", 1)
        _STREAMS[id(request)] = (request, stream)
        requests.append(request)
    return Payload(requests, clock or _Ticks())


class _Ticks:
    """A clock that moves 10 us per reading."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 10_000
        return self.now


def _result(payload: Payload, index: int = 0):
    return _STREAMS[id(payload.requests[index])][1].result()


def _started(cluster: FakeCluster, placement: RayPlacement | None = None, **kwargs
             ) -> RayInstance:
    instance = RayInstance("m", _info(), cluster, placement or RayPlacement("g", 1), **kwargs)
    instance.start()
    instance.wait_started()
    return instance


def test_execute_ships_inputs_and_answers_each_request():
    cluster = FakeCluster()
    instance = _started(cluster)
    small, large = np.arange(3, dtype=np.float32), np.ones(20_000, np.float32)
    payload = _payload(small, large)
    instance.execute(payload)
    assert len(cluster.stored) == 1 and cluster.stored[0] is large  # only the large one
    assert _result(payload, 0).outputs["Y"].to_numpy().tolist() == [0.0, 2.0, 4.0]
    assert _result(payload, 1).outputs["Y"].to_numpy().sum() == 40_000
    instance.finalize()


def test_the_actors_compute_time_is_the_models_infer_time():
    instance = _started(FakeCluster())
    payload = _payload(np.ones(1, np.float32))
    instance.execute(payload)
    # infer is the actor's own 1000 ns; shipping counts as input, the way back as output
    assert payload.compute_output_start_ns - payload.compute_input_end_ns == 1_000
    assert payload.compute_output_start_ns == 20_000 - 20  # returned, less the actor's output
    instance.finalize()


def test_a_lost_actor_fails_its_inflight_requests_then_is_restarted():
    cluster = FakeCluster()
    instance = _started(cluster, RayPlacement("g", 1, restart_backoff_ms=0))
    first = cluster.actors[0]
    cluster.on_execute = lambda actor: actor.die("The actor is dead because it was killed")
    payload = _payload(np.ones(1, np.float32), np.ones(2, np.float32))
    instance.execute(payload)
    for index in (0, 1):
        with pytest.raises(UnavailableError) as raised:
            _result(payload, index)
        assert raised.value.message == (
            "instance 'g_0' of model 'm' on Ray failed: its actor died while running the "
            "request (The actor is dead because it was killed)")
    assert first.killed  # made sure it is gone, so the watcher replaces it
    cluster.on_execute = None
    cluster.wait_launched(2)
    assert instance.wait_for_state([InstanceState.READY], WAIT_S)
    later = _payload(np.ones(1, np.float32))
    instance.execute(later)
    assert _result(later).outputs["ACTOR"].to_numpy().tolist() == [1]
    status = instance.status()
    assert (status.state, status.node_id, status.pid, status.restarts) == (
        InstanceState.READY, "node-1", 101, 1)
    instance.finalize()


def test_restarts_are_bounded_by_max_restarts():
    cluster = FakeCluster()
    instance = _started(cluster, RayPlacement("g", 1, max_restarts=2, restart_backoff_ms=0))
    cluster.failing_loads = 100
    cluster.actors[0].die("node died")
    assert instance.wait_for_state([InstanceState.FAILED], WAIT_S)
    assert len(cluster.actors) == 3  # the first, then two restarts
    assert all(actor.killed for actor in cluster.actors[1:])  # failed launches are ended
    payload = _payload(np.ones(1, np.float32))
    instance.execute(payload)
    with pytest.raises(UnavailableError, match="is failed and no other instance"):
        _result(payload)
    instance.finalize()


def test_a_launch_that_cannot_start_counts_as_a_failed_restart():
    cluster = FakeCluster()
    instance = _started(cluster, RayPlacement("g", 1, max_restarts=2, restart_backoff_ms=0))

    def refuse(info):
        raise UnavailableError("this process is no longer connected to Ray")

    cluster.launch = refuse
    cluster.actors[0].die("owner died")
    assert instance.wait_for_state([InstanceState.FAILED], WAIT_S)
    instance.finalize()


def test_a_successful_execution_resets_the_restart_count():
    cluster = FakeCluster()
    instance = _started(cluster, RayPlacement("g", 1, max_restarts=1, restart_backoff_ms=0))
    for round_ in range(3):  # each death is the first since a success: always restarted
        cluster.actors[-1].die("crash")
        cluster.wait_launched(round_ + 2)
        assert instance.wait_for_state([InstanceState.READY], WAIT_S)
        payload = _payload(np.ones(1, np.float32))
        instance.execute(payload)
        _result(payload)
    instance.finalize()


def test_a_failed_load_fails_the_start_and_ends_the_actor():
    cluster = FakeCluster(failing_loads=1)
    instance = RayInstance("m", _info(), cluster, RayPlacement("g", 1))
    instance.start()
    with pytest.raises(InternalError, match="load 0 failed"):
        instance.wait_started()
    assert cluster.actors[0].killed


def test_finalize_ends_the_actor_and_the_watcher():
    cluster = FakeCluster()
    before = set(threading.enumerate())
    instance = _started(cluster)
    (watcher,) = set(threading.enumerate()) - before
    assert watcher.name == "infercore-ray-m-g_0"
    instance.finalize()
    assert cluster.actors[0].finalized
    assert instance.state is InstanceState.STOPPED
    assert not watcher.is_alive()
    instance.finalize()  # idempotent


def test_finalize_interrupts_a_restart_backoff():
    cluster = FakeCluster()
    instance = _started(cluster, RayPlacement("g", 1, restart_backoff_ms=3_600_000))
    cluster.actors[0].die("crash")
    assert instance.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    instance.finalize()  # returns without waiting the hour
    assert len(cluster.actors) == 1


# -- the model: failover, health, parallel loading -----------------------------------------
def _context(config_text: str) -> ModelContext:
    config = parse_model_config(config_text, model_name="m")
    return ModelContext(name="m", version=1, config=config, model_dir=Path("/r/m"),
                        version_dir=Path("/r/m/1"), repository=Path("/r"))


CONFIG = """
name: "m"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { name: "g", count: 2, kind: KIND_CPU }, { name: "here", kind: KIND_CPU } ]
"""


class LocalBackend:
    name = "python"
    supports_batching = True

    def __init__(self) -> None:
        self.models: list[LocalModel] = []

    def auto_complete_config(self, config, model_dir, version_dir) -> None:
        pass

    def create_model(self, context: ModelContext) -> LocalModel:
        model = LocalModel()
        self.models.append(model)
        return model


class LocalModel:
    def __init__(self) -> None:
        self.instances: list[str] = []
        self.finalized = False

    def create_instance(self, info: InstanceInfo) -> str:
        self.instances.append(info.name)
        return f"local {info.name}"

    def finalize(self) -> None:
        self.finalized = True


def _model(cluster: FakeCluster, config: str = CONFIG, backoff_ms: int = 3_600_000,
           backend: LocalBackend | None = None) -> tuple[RayBackendModel, list]:
    placements = {"g": RayPlacement("g", 2, restart_backoff_ms=backoff_ms)}
    model = RayBackendModel(backend or LocalBackend(), _context(config), placements, cluster)
    instances = [model.create_instance(_info(0)), model.create_instance(_info(1)),
                 model.create_instance(_info(0, "here"))]
    return model, instances


def test_groups_not_placed_on_ray_are_created_by_the_backend_here():
    backend = LocalBackend()
    model, instances = _model(FakeCluster(), backend=backend)
    assert [type(i).__name__ for i in instances[:2]] == ["RayInstance", "RayInstance"]
    assert instances[2] == "local here_0"
    assert backend.models[0].instances == ["here_0"]
    model.finalize()
    assert backend.models[0].finalized


def test_the_local_model_is_not_created_when_every_group_is_on_ray():
    backend = LocalBackend()
    placements = {"g": RayPlacement("g", 1)}
    model = RayBackendModel(backend, _context(CONFIG), placements, FakeCluster())
    model.create_instance(_info(0))
    assert backend.models == []
    model.finalize()


def test_a_down_instance_runs_its_payloads_on_another_and_the_health_says_so():
    cluster = FakeCluster()
    model, (first, second, _) = _model(cluster)
    assert model.health_reason == ""
    cluster.actors[0].die("node died")
    assert first.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    assert model.health_reason == (
        "degraded: 1 of 2 instances on Ray available (g_0 restarting)")
    payload = _payload(np.ones(1, np.float32))
    first.execute(payload)
    assert _result(payload).outputs["ACTOR"].to_numpy().tolist() == [1]  # the other actor
    model.finalize()
    assert cluster.released and cluster.reserved == ["g", "g"]
    assert all(actor.finalized or actor.killed for actor in cluster.actors)


def test_sequence_models_never_move_a_payload_to_another_instance():
    cluster = FakeCluster()
    config = CONFIG + "sequence_batching { }\n"
    model, (first, _, _) = _model(cluster, config=config)
    cluster.actors[0].die("node died")
    assert first.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    payload = _payload(np.ones(1, np.float32))
    first.execute(payload)
    with pytest.raises(UnavailableError, match="'g_0' of model 'm' on Ray is restarting"):
        _result(payload)
    model.finalize()


def test_loads_run_in_parallel_and_the_last_request_waits_for_all():
    cluster = FakeCluster()
    placements = {"g": RayPlacement("g", 2)}
    model = RayBackendModel(LocalBackend(), _context(CONFIG), placements, cluster)
    first = model.create_instance(_info(0))
    assert first.state is InstanceState.STARTING  # launched, not waited for
    second = model.create_instance(_info(1))
    assert first.state is second.state is InstanceState.READY
    model.finalize()


def test_a_failed_load_of_any_instance_fails_the_last_create_and_ends_every_actor():
    cluster = FakeCluster(failing_loads=1)
    placements = {"g": RayPlacement("g", 2)}
    model = RayBackendModel(LocalBackend(), _context(CONFIG), placements, cluster)
    model.create_instance(_info(0))
    with pytest.raises(InternalError, match="load 0 failed"):
        model.create_instance(_info(1))
    model.finalize()  # the engine finalizes the model after a failed load
    assert all(actor.killed or actor.finalized for actor in cluster.actors)


# -- readiness and metrics -------------------------------------------------------------------
def test_a_model_with_every_instance_on_ray_down_is_not_serving_until_one_is_back():
    cluster = FakeCluster()
    placements = {"g": RayPlacement("g", 2, restart_backoff_ms=0)}
    model = RayBackendModel(LocalBackend(), _context(CONFIG), placements, cluster)
    first, second = model.create_instance(_info(0)), model.create_instance(_info(1))
    assert model.serving
    gate = threading.Event()
    launch = cluster.launch

    def held_launch(info):  # restarts wait for the test
        assert gate.wait(WAIT_S)
        return launch(info)

    cluster.launch = held_launch
    cluster.actors[0].die("node died")
    cluster.actors[1].die("node died")
    assert first.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    assert second.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    assert not model.serving
    assert model.health_reason == ("unavailable: 0 of 2 instances on Ray available "
                                   "(g_0 restarting, g_1 restarting)")
    gate.set()
    assert first.wait_for_state([InstanceState.READY], WAIT_S)
    assert model.serving
    assert model.health_reason in ("", "degraded: 1 of 2 instances on Ray available "
                                       "(g_1 restarting)")
    model.finalize()


def test_a_model_with_instances_here_keeps_serving_with_every_ray_instance_down():
    cluster = FakeCluster()
    model, (first, second, _) = _model(cluster)
    cluster.actors[0].die("node died")
    cluster.actors[1].die("node died")
    assert first.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    assert second.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    assert model.serving
    assert model.health_reason.startswith("degraded: 0 of 2 instances on Ray available")
    model.finalize()


def _families(model: RayBackendModel) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(dict(labels), value) for labels, value in f.samples]
            for f in model.metric_families()}


def test_metric_families_count_each_instances_executions_per_node():
    cluster = FakeCluster()
    model, (first, second, _) = _model(cluster, backoff_ms=0)
    first.execute(_payload(np.ones(1, np.float32), np.ones(1, np.float32)))
    first.execute(_payload(np.ones(1, np.float32)))
    second.execute(_payload(np.ones(1, np.float32)))
    # g_0 dies and comes back on a new "node"; its next execution counts there
    cluster.actors[0].die("node died")
    cluster.wait_launched(3)
    assert first.wait_for_state([InstanceState.READY], WAIT_S)
    first.execute(_payload(np.ones(1, np.float32)))
    families = _families(model)
    assert families["infercore_ray_exec_count"] == [
        ({"instance": "g_0", "node": "node-0", "node_ip": ""}, 2.0),
        ({"instance": "g_0", "node": "node-2", "node_ip": ""}, 1.0),
        ({"instance": "g_1", "node": "node-1", "node_ip": ""}, 1.0)]
    assert [v for _, v in families["infercore_ray_inference_count"]] == [3.0, 1.0, 1.0]
    # the fake actor's model time is 1000 ns per execution
    assert [v for _, v in families["infercore_ray_compute_infer_duration_us"]] == [2.0, 1.0, 1.0]
    assert all(v > 0 for _, v in families["infercore_ray_call_duration_us"])
    assert families["infercore_ray_instance_up"] == [
        ({"instance": "g_0", "node": "node-2", "node_ip": ""}, 1.0),
        ({"instance": "g_1", "node": "node-1", "node_ip": ""}, 1.0)]
    assert families["infercore_ray_instance_restart_count"] == [
        ({"instance": "g_0"}, 1.0), ({"instance": "g_1"}, 0.0)]
    model.finalize()
    assert model.metric_families() == ()  # unloaded: nothing left to report


def test_a_failover_execution_counts_for_the_instance_that_ran_it():
    cluster = FakeCluster()
    model, (first, second, _) = _model(cluster)
    cluster.actors[0].die("node died")
    assert first.wait_for_state([InstanceState.RESTARTING], WAIT_S)
    first.execute(_payload(np.ones(1, np.float32)))
    up = {labels["instance"]: value
          for labels, value in _families(model)["infercore_ray_instance_up"]}
    assert up == {"g_0": 0.0, "g_1": 1.0}
    assert _families(model)["infercore_ray_exec_count"] == [
        ({"instance": "g_1", "node": "node-1", "node_ip": ""}, 1.0)]
    model.finalize()
