"""Model instances on a Ray cluster (docs/ray.md). Importing this package never imports Ray.

    placement.py   the ``infercore.ray.<group>`` parameters -> RayPlacement, validated
    hook.py        create_backend_model: the engine's one call; Ray only when placed
    model.py       RayBackendModel: creates instances on Ray or here, group by group
    instance.py    RayInstance: the BackendInstance the engine drives; restarts, failover
    host.py        InstanceHost: the actor's body, running the model through its backend
    wire.py        requests out, responses back (large arrays through the object store)
    metrics.py     the infercore_ray_* metric families: per instance, with the Ray node
    cluster.py     every Ray API call (imports Ray)
"""

from . import metrics as _metrics  # noqa: F401 - reserves the metric family names
from .hook import create_backend_model
from .placement import PARAM_PREFIX, RayPlacement, placements_from_config

__all__ = ["PARAM_PREFIX", "RayPlacement", "create_backend_model", "placements_from_config"]
