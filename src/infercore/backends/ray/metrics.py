"""The metric families of a model's instances on Ray: per instance, with the Ray node.

Triton's families (``nv_inference_*``, labelled ``model`` and ``version``) already hold
the remote executions: the engine records them like local ones. These add the view
Triton has no label for, where each instance runs, without touching Triton's label sets
(dashboards and alerts written for Triton keep working)::

    infercore_ray_instance_up{model,version,instance,node,node_ip}      gauge, 1 or 0
    infercore_ray_instance_restart_count{model,version,instance}        counter
    infercore_ray_exec_count{model,version,instance,node,node_ip}       counter
    infercore_ray_inference_count{...same}                              counter
    infercore_ray_compute_infer_duration_us{...same}                    counter
    infercore_ray_call_duration_us{...same}                             counter

``node`` is the Ray node id, ``node_ip`` its address. The counters count completed
executions per node an instance ran on (a restarted instance may move), and a payload
run on another instance's actor (failover) counts for that instance. ``call`` minus
``compute_infer`` is what Ray adds: shipping, the call, the result's return.

The server's metrics (observability/metrics.py) call ``RayBackendModel.metric_families`` at
scrape time through ``LoadedModel.metric_families``; a RayBackendModel reserves
``FAMILY_NAMES`` in the custom metrics registry it is handed (``ModelContext.metrics``), so a
custom metric family cannot take them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...metrics_settings import ModelMetricFamily
from .instance import InstanceState, RayInstanceStatus

__all__ = ["FAMILY_NAMES", "instance_families"]

UP = "infercore_ray_instance_up"
RESTARTS = "infercore_ray_instance_restart_count"
# name, help, NodeFigures field, divisor (ns -> us)
_PER_NODE = (
    ("infercore_ray_exec_count",
     "Number of model executions an instance on Ray completed on a Ray node", "executions", 1),
    ("infercore_ray_inference_count",
     "Number of inferences an instance on Ray performed on a Ray node", "inferences", 1),
    ("infercore_ray_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds of an instance on Ray on a Ray "
     "node, measured in its actor", "infer_ns", 1_000),
    ("infercore_ray_call_duration_us",
     "Cumulative duration in microseconds of an instance's Ray calls on a Ray node, from "
     "shipping the inputs to the outputs' return (compute infer included)", "call_ns", 1_000),
)
FAMILY_NAMES = (UP, RESTARTS, *(name for name, _, _, _ in _PER_NODE))


def instance_families(statuses: Sequence[RayInstanceStatus]) -> tuple[ModelMetricFamily, ...]:
    """The families of one model version's instances on Ray (none stopped)."""
    statuses = [s for s in statuses if s.state is not InstanceState.STOPPED]
    if not statuses:
        return ()
    families = [
        ModelMetricFamily(UP, "Whether an instance on Ray can run requests (1) or not (0: "
                          "starting, restarting or failed), with its last Ray node", "gauge",
                          tuple((_node_labels(s.name, s.node_id, s.node_ip),
                                 1.0 if s.state is InstanceState.READY else 0.0)
                                for s in statuses)),
        ModelMetricFamily(RESTARTS, "Number of times an instance on Ray was restarted in a "
                          "new actor after its actor or node died", "counter",
                          tuple(({"instance": s.name}, float(s.restarts)) for s in statuses)),
    ]
    for name, help_text, field, divisor in _PER_NODE:
        families.append(ModelMetricFamily(name, help_text, "counter", tuple(
            (_node_labels(s.name, f.node_id, f.node_ip), float(getattr(f, field) // divisor))
            for s in statuses for f in s.figures)))
    return tuple(families)


def _node_labels(instance: str, node_id: str, node_ip: str) -> Mapping[str, str]:
    return {"instance": instance, "node": node_id, "node_ip": node_ip}
