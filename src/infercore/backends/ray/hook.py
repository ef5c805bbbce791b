"""The one call the engine makes: the backend model of a model version, on Ray or not.

``create_backend_model`` reads the model's Ray placements (placement.py, no Ray import);
a model without any gets ``backend.create_model(context)``, exactly as before, so Ray is
never imported for it. A model with some gets a RayBackendModel, after connecting this
process to the cluster named by the server's ``ray_address`` or, when that is empty, by
the ``RAY_ADDRESS`` environment variable (Ray's own convention, which KubeRay follows).
"""

from __future__ import annotations

import os
import sys

from ...errors import InvalidArgumentError
from ..base import Backend, BackendModel, ModelContext
from .placement import PARAM_PREFIX, placements_from_config

__all__ = ["create_backend_model"]


def create_backend_model(
    backend: Backend, context: ModelContext, ray_address: str = ""
) -> BackendModel:
    """The backend model of ``context``'s model version.

    Raises:
        InvalidArgumentError: a bad Ray placement, Ray not installed, or no cluster to use.
        UnavailableError: the cluster could not be reached.
    """
    placements = placements_from_config(context.config, context.name)
    if not placements:
        return backend.create_model(context)
    groups = ", ".join(f"'{name}'" for name in placements)
    ray_address = ray_address or os.environ.get("RAY_ADDRESS", "")
    if not ray_address and not _ray_running():
        raise InvalidArgumentError(
            f"model '{context.name}' places instance group(s) {groups} on Ray "
            f"('{PARAM_PREFIX}<group>' parameters), but this server has no Ray cluster: "
            "start it with --ray-address=auto (or the cluster's address, or 'local'), or "
            "set RAY_ADDRESS")
    try:
        from .cluster import RayCluster, connect
    except ImportError as exc:
        raise InvalidArgumentError(
            f"model '{context.name}' places instance group(s) {groups} on Ray, which is not "
            f"installed ({exc}): pip install 'infercore[ray]'") from exc
    from .host import HostSpec
    from .model import RayBackendModel

    connect(ray_address or "auto", context.name)
    spec = HostSpec(
        model_name=context.name,
        model_version=context.version,
        config=context.config.SerializeToString(),
        model_dir=str(context.model_dir),
        version_dir=str(context.version_dir),
        repository=str(context.repository),
        backend=backend.name,
        backend_config=tuple(sorted(context.backend_config.items())),
        metrics=context.metrics,
    )
    return RayBackendModel(backend, context, placements, RayCluster(spec, placements))


def _ray_running() -> bool:
    """True when this process already runs Ray (an application embedding the server that
    called ray.init itself), checked without importing Ray."""
    ray = sys.modules.get("ray")
    is_initialized = getattr(ray, "is_initialized", None)
    return bool(is_initialized is not None and is_initialized())
