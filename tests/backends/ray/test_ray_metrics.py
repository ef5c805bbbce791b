"""The metrics hook models use to add families beside Triton's (metrics.py), and the
reservation of the infercore_ray_* names; no Ray needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import ModelContext
from infercore.backends.ray.metrics import FAMILY_NAMES
from infercore.backends.ray.model import RayBackendModel
from infercore.errors import AlreadyExistsError
from infercore.metrics_settings import MetricsSettings, ModelMetricFamily
from infercore.observability.custom_metrics import CustomMetricsRegistry, MetricKind
from infercore.observability.metrics import ServerMetrics
from infercore.stats import ModelStats


class _Model:
    """What the metrics read of a loaded model version."""

    def __init__(self, name: str, families: tuple[ModelMetricFamily, ...]) -> None:
        self.name, self.version = name, 1
        self.stats = ModelStats(name, 1)
        self.pending_count = 0
        self.response_cache_enabled = False
        self._families = families

    def metric_families(self) -> tuple[ModelMetricFamily, ...]:
        return self._families


def _up(instance: str, value: float) -> ModelMetricFamily:
    return ModelMetricFamily("infercore_ray_instance_up", "up", "gauge",
                             (({"instance": instance, "node": "n1"}, value),))


def test_families_of_several_models_are_merged_into_one_with_model_and_version():
    models = [_Model("a", (_up("a_0", 1.0),)), _Model("b", (_up("b_0", 0.0),)),
              _Model("plain", ())]
    text = ServerMetrics(MetricsSettings(cpu=False), lambda: models).render()
    assert text.count("# TYPE infercore_ray_instance_up gauge") == 1
    found = {family.name: family for family in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in found["infercore_ray_instance_up"].samples] == [
        ({"model": "a", "version": "1", "instance": "a_0", "node": "n1"}, 1.0),
        ({"model": "b", "version": "1", "instance": "b_0", "node": "n1"}, 0.0)]
    # Triton's families keep their label sets
    assert {tuple(sorted(s.labels)) for s in found["nv_inference_exec_count"].samples} == {
        ("model", "version")}


def test_custom_metric_families_cannot_take_the_ray_names():
    assert CustomMetricsRegistry().family(MetricKind.GAUGE, FAMILY_NAMES[0], "mine")
    registry = CustomMetricsRegistry()
    context = ModelContext(name="m", version=1, config=model_config_pb2.ModelConfig(),
                           model_dir=Path("/r/m"), version_dir=Path("/r/m/1"),
                           repository=Path("/r"), metrics=registry)
    # the model reserves the names in the registry it is handed; nothing else is used here
    RayBackendModel(None, context, {}, None)  # type: ignore[arg-type]
    for name in FAMILY_NAMES:
        with pytest.raises(AlreadyExistsError, match="one of the server's own metric families"):
            registry.family(MetricKind.GAUGE, name, "mine")
