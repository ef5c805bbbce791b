"""Optional backend capabilities (backends/base.py): declared protocols with defaults.

A plugin written against docs/backends.md, importing nothing of infercore's backend API,
still gets each capability from plain attributes and methods, and the defaults without
them."""

from __future__ import annotations

import numpy as np
import pytest

from infercore import Options, Server
from infercore.backends.base import (
    DeviceBlocking,
    HealthReporting,
    LoopInstance,
    MetricContributor,
    device_blocking,
)

pytestmark = pytest.mark.usefixtures("isolated_registry")

# A backend directory module as a third party writes it from the docs: no base classes.
PLUGIN = '''
import threading

from infercore import DataType, Tensor
from infercore.metrics_settings import ModelMetricFamily


class CapableBackend:
    name = "capable"
    supports_batching = False
    device_blocking = BLOCKING

    def auto_complete_config(self, config, model_dir, version_dir):
        pass

    def create_model(self, context):
        return CapableModel() if HEALTH else PlainModel()


class PlainModel:
    def create_instance(self, info):
        return CapableInstance()

    def finalize(self):
        pass


class CapableModel(PlainModel):
    serving = False  # plain attributes satisfy the protocol's properties
    health_reason = "the accelerator is resetting"

    def metric_families(self):
        return [ModelMetricFamily("capable_up", "whether it is up", "gauge",
                                  (({"part": "a"}, 0.0),))]


class CapableInstance:
    def execute(self, payload):
        for request in payload.requests:
            name = threading.current_thread().name.encode()
            request.sender.send({"THREAD": Tensor(DataType.BYTES, [name])})

    def finalize(self):
        pass


def create_backend():
    return CapableBackend()
'''

CONFIG = """
backend: "capable"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "THREAD", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 2, kind: KIND_CPU } ]
"""


def _server(tmp_path, repo, *, blocking: bool, health: bool) -> Server:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "capable.py").write_text(
        PLUGIN.replace("BLOCKING", str(blocking)).replace("HEALTH", str(health)))
    repo.add_model("m", config=CONFIG)
    (repo.path / "m" / "1").mkdir(exist_ok=True)
    return Server(Options(model_repository=repo.path, backend_directory=str(plugins),
                          strict_readiness=False))


def _threads(server: Server, count: int) -> set[str]:
    x = np.array([1.0], np.float32)
    streams = [server.model("m").infer({"X": x}) for _ in range(count)]
    return {stream.result(30).outputs["THREAD"].to_numpy()[0].decode() for stream in streams}


def test_a_device_blocking_plugin_shares_one_thread_per_device(tmp_path, repo):
    with _server(tmp_path, repo, blocking=True, health=False) as server:
        assert _threads(server, 8) == {"infercore-m-cpu0"}


def test_a_plugin_without_capabilities_gets_the_defaults(tmp_path, repo):
    with _server(tmp_path, repo, blocking=False, health=False) as server:
        assert server.model("m").ready()
        assert not _threads(server, 8) & {"infercore-m-cpu0"}  # a thread per instance
        assert "capable_up" not in server.metrics()


def test_a_plugin_model_reports_its_health_and_metrics(tmp_path, repo):
    with _server(tmp_path, repo, blocking=False, health=True) as server:
        assert not server.model("m").ready()  # not serving: reported not ready
        [entry] = [e for e in server.repository_index() if e.name == "m"]
        assert entry.reason == "the accelerator is resetting"
        assert 'capable_up{model="m",part="a",version="1"} 0\n' in server.metrics()


def test_capabilities_are_structural_and_default_to_off():
    class Plain:
        pass

    class Blocking:
        device_blocking = True

    assert not device_blocking(Plain()) and device_blocking(Blocking())  # type: ignore[arg-type]
    assert isinstance(Blocking(), DeviceBlocking)
    for capability in (HealthReporting, MetricContributor, LoopInstance):
        assert not isinstance(Plain(), capability)
