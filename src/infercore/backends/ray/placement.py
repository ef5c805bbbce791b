"""Which instance groups of a model run on a Ray cluster, and how: read from its config.

A model places an instance group on Ray with one model-level parameter per group (Triton's
``ModelInstanceGroup`` has no parameters field), whose value is a JSON object::

    instance_group [ { name: "remote", kind: KIND_CPU, count: 2 } ]
    parameters { key: "infercore.ray.remote"
                 value { string_value: '{"num_cpus": 1, "resources": {"node_b": 1},'
                                       ' "strategy": "SPREAD"}' } }

Every key is optional (docs/ray.md lists them). This module only reads and validates: it
never imports Ray, so a bad placement fails the load with a clear error on any server, and
models without Ray groups cost one scan of their parameter names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2

from ...errors import InvalidArgumentError

__all__ = ["PARAM_PREFIX", "STRATEGIES", "RayPlacement", "placements_from_config"]

PARAM_PREFIX = "infercore.ray."
# Ray's placement group strategies; "" places each actor on its own (Ray's default).
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

_KEYS = ("num_cpus", "num_gpus", "memory", "resources", "strategy", "max_restarts",
         "restart_backoff_ms", "start_timeout_s", "runtime_env")
_Group = model_config_pb2.ModelInstanceGroup


@dataclass(frozen=True, slots=True)
class RayPlacement:
    """How the instances of one group are placed on Ray: each one is an actor asking for
    these resources; with a ``strategy`` the group's actors share a placement group."""

    group: str
    count: int
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int = 0  # bytes reserved per actor; 0: none
    resources: tuple[tuple[str, float], ...] = ()  # custom resources per actor
    strategy: str = ""
    max_restarts: int = 3  # consecutive restarts without a successful execution
    restart_backoff_ms: int = 500  # first delay; doubles per restart, at most 30 s
    start_timeout_s: float = 120.0  # placing and loading one actor
    runtime_env: str = ""  # JSON object passed to Ray as the actor's runtime_env

    def bundle(self) -> dict[str, float]:
        """The resources of one actor, as a Ray placement group bundle."""
        bundle: dict[str, float] = {}
        if self.num_cpus:
            bundle["CPU"] = self.num_cpus
        if self.num_gpus:
            bundle["GPU"] = self.num_gpus
        if self.memory:
            bundle["memory"] = float(self.memory)
        bundle.update(self.resources)
        return bundle

    def actor_options(self) -> dict[str, Any]:
        """The keyword options of ``ActorClass.options()`` for one instance."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env:
            options["runtime_env"] = json.loads(self.runtime_env)
        return options


def placements_from_config(
    config: model_config_pb2.ModelConfig, model_name: str
) -> dict[str, RayPlacement]:
    """The Ray placement of each group that has one (group name -> placement); {} for a
    model that runs only here.

    Raises:
        InvalidArgumentError: a parameter names no group or a group that cannot run on Ray,
            is not a JSON object, has an unknown key or a value of the wrong kind.
    """
    keys = [key for key in config.parameters if key.startswith(PARAM_PREFIX)]
    if "infercore.ray" in config.parameters:
        keys.append("infercore.ray")
    if not keys:
        return {}
    groups = {group.name: group for group in config.instance_group}
    placements: dict[str, RayPlacement] = {}
    for key in sorted(keys):
        where = f"model '{model_name}': parameter '{key}'"
        name = key[len(PARAM_PREFIX):] if key.startswith(PARAM_PREFIX) else ""
        group = groups.get(name)
        if group is None:
            known = ", ".join(f"'{g}'" for g in groups) or "none"
            raise InvalidArgumentError(
                f"{where} names no instance group: a Ray placement is set with "
                f"'{PARAM_PREFIX}<group name>' (this model's groups: {known})")
        _check_group(where, config, group)
        text = config.parameters[key].string_value
        placements[name] = _parse(where, name, int(group.count), text)
    return placements


def _check_group(where: str, config: model_config_pb2.ModelConfig, group: Any) -> None:
    if config.model_transaction_policy.decoupled:
        raise InvalidArgumentError(
            f"{where}: decoupled models cannot run on Ray yet (see docs/ray.md)")
    if group.kind == _Group.KIND_GPU:
        raise InvalidArgumentError(
            f"{where}: a group placed on Ray must have kind KIND_CPU or KIND_MODEL; ask "
            "Ray for GPUs with \"num_gpus\" (Ray chooses the devices)")
    if group.passive:
        raise InvalidArgumentError(f"{where}: a passive instance group cannot run on Ray")
    if group.host_policy:
        raise InvalidArgumentError(
            f"{where}: host policies pin threads of this server; a group placed on Ray "
            "cannot have one")


def _parse(where: str, group: str, count: int, text: str) -> RayPlacement:
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"{where} must be a JSON object such as '{{\"num_cpus\": 1}}': {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"{where} must be a JSON object such as '{{\"num_cpus\": 1}}', not {text!r}")
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"{where} has unknown key(s) {', '.join(repr(k) for k in unknown)}; the keys "
            f"are {', '.join(_KEYS)}")
    strategy = value.get("strategy", "")
    if strategy not in ("", *STRATEGIES):
        raise InvalidArgumentError(
            f"{where}: \"strategy\" must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    placement = RayPlacement(
        group=group,
        count=count,
        num_cpus=_number(where, value, "num_cpus", 1.0),
        num_gpus=_number(where, value, "num_gpus", 0.0),
        memory=int(_number(where, value, "memory", 0, integer=True)),
        resources=_resources(where, value.get("resources", {})),
        strategy=strategy,
        max_restarts=int(_number(where, value, "max_restarts", 3, integer=True)),
        restart_backoff_ms=int(_number(where, value, "restart_backoff_ms", 500, integer=True)),
        start_timeout_s=_number(where, value, "start_timeout_s", 120.0),
        runtime_env=_runtime_env(where, value.get("runtime_env")),
    )
    if placement.start_timeout_s <= 0:
        raise InvalidArgumentError(f"{where}: \"start_timeout_s\" must be > 0")
    if strategy and not any(placement.bundle().values()):
        raise InvalidArgumentError(
            f"{where}: a placement group (\"strategy\": \"{strategy}\") needs each instance "
            "to ask for some resource (num_cpus, num_gpus, memory or resources)")
    return placement


def _number(where: str, value: Mapping[str, Any], key: str, default: float, *,
            integer: bool = False) -> float:
    found = value.get(key, default)
    kind = "a whole number" if integer else "a number"
    if (isinstance(found, bool) or not isinstance(found, (int, float))
            or (integer and not float(found).is_integer())
            or not math.isfinite(found) or found < 0):
        raise InvalidArgumentError(f"{where}: \"{key}\" must be {kind} >= 0, not {found!r}")
    return float(found)


def _resources(where: str, found: Any) -> tuple[tuple[str, float], ...]:
    if not isinstance(found, dict):
        raise InvalidArgumentError(
            f"{where}: \"resources\" must be a JSON object of resource name -> amount, such "
            f"as {{\"node_b\": 1}}, not {found!r}")
    resources = []
    for name in sorted(found):
        if name in ("CPU", "GPU", "memory"):
            raise InvalidArgumentError(
                f"{where}: ask for {name} with \"{_BUILTIN_KEY[name]}\", not in \"resources\"")
        resources.append((name, _number(where, found, name, 0.0)))
    return tuple(resources)


_BUILTIN_KEY = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


def _runtime_env(where: str, found: Any) -> str:
    if found is None:
        return ""
    if not isinstance(found, dict):
        raise InvalidArgumentError(
            f"{where}: \"runtime_env\" must be a JSON object (Ray's runtime_env), not "
            f"{found!r}")
    return json.dumps(found, sort_keys=True)
