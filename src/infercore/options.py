"""Server options, named as Triton's in-process API names them (``tritonserver.Options``).

Every ``infercore serve`` flag that configures the server (not a network frontend) has a
field here, so an embedding application can configure exactly what the command line can;
``docs/inprocess_api.md`` maps each flag to its field. Options are validated when they are
made, with a clear ``InvalidArgumentError`` per bad value (Triton's Python API validates
them only at ``start()``): types, ranges, enumerations, the local cache, metrics and trace
configurations. What depends on the installation or the file system is checked later, as
Triton checks it: ``Server()`` refuses a cache implementation it does not have,
``Server.start()`` a repository folder that is not there, a "*" among other startup
models, a model that fails to load.

Fields Triton uses only for GPU memory and devices (``pinned_memory_pool_size``,
``cuda_memory_pool_sizes``, ...) are validated and kept, and have no effect;
``model_load_device_limits`` refuse instances on a GPU whose memory is used beyond them.
``devices`` is where the GPUs are found (infercore.devices).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .clock import Clock, MonotonicClock
from .devices import Devices, NvmlDevices
from .errors import InternalError, InvalidArgumentError
from .log_settings import LogFormat
from .metrics_settings import MetricsSettings
from .trace_settings import TraceConfig, parse_trace_config

__all__ = ["LOCAL_CACHE", "ModelControlMode", "ModelLoadDeviceLimit", "Options", "RateLimitMode",
           "RateLimiterResource", "local_cache_size"]

# The one response cache implementation infercore has (Triton also loads e.g. "redis" from
# a shared library under --cache-dir).
LOCAL_CACHE = "local"


class ModelControlMode(str, enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


class RateLimitMode(str, enum.Enum):
    OFF = "off"
    EXEC_COUNT = "execution_count"


@dataclass(frozen=True, slots=True)
class RateLimiterResource:
    name: str
    count: int
    device: int = -1  # -1: a global resource

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):  # "" is a name too, as tritonserver takes it
            raise InvalidArgumentError("a rate limiter resource's name must be a string")
        _check_int(f"the count of rate limiter resource '{self.name}'", self.count, 0)
        _check_int(f"the device of rate limiter resource '{self.name}'", self.device, -1)


@dataclass(frozen=True, slots=True)
class ModelLoadDeviceLimit:
    """tritonserver's ``--model-load-gpu-limit <device>:<fraction>``: an instance is not
    created on GPU ``device`` while more than ``fraction`` of its memory is in use (checked
    right after the instance is made, as Triton checks it). The refusals are Triton's
    (TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit)."""

    kind: str
    device: int
    fraction: float

    def __post_init__(self) -> None:
        kind = str(getattr(self.kind, "name", self.kind)).upper().removeprefix("KIND_")
        if kind != "GPU":
            raise InvalidArgumentError(
                f"model load device limits apply to GPU devices only, not '{self.kind}'")
        object.__setattr__(self, "kind", kind)
        if isinstance(self.device, bool) or not isinstance(self.device, int):
            raise InvalidArgumentError(
                f"the device of a model load limit must be an integer, got {self.device!r}")
        if self.device < 0:
            raise InvalidArgumentError(f"expects device ID >= 0, got {self.device}")
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise InvalidArgumentError(
                f"a model load limit's fraction must be a number, got {fraction!r}")
        if fraction < 0.0 or fraction > 1.0:  # Triton's check: NaN passes it, as in Triton
            raise InvalidArgumentError(
                f"expects limit fraction to be in range [0.0, 1.0], got {fraction:f}")
        object.__setattr__(self, "fraction", float(fraction))


@dataclass(frozen=True, slots=True)
class Options:
    """Everything a Server is started with. Validated at construction.

    ``exit_timeout`` is in seconds, as tritonserver's ``--exit-timeout-secs``;
    ``metrics_interval`` in milliseconds (``--metrics-interval-ms``).
    ``metrics_configuration`` is tritonserver's (group "" -> {setting: value}: see
    metrics_settings.MetricsSettings); ``trace_config`` is what ``--trace-config`` gives: a
    TraceConfig, its fields as a dict, or the flag values themselves
    (``["level=TIMESTAMPS", "rate=1"]``). ``strict_model_config`` is what
    ``--disable-auto-complete-config`` sets (Triton's Options has only this name).
    ``clock`` is the engine's time (infercore.clock; no flag): ``infercore.testing``'s
    ManualClock makes timeouts, delays and polls move only when a test advances it.
    """

    model_repository: str | Path | Sequence[str | Path] = ()
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: Sequence[str] = ()
    # seconds between repository polls in POLL mode (--repository-poll-secs)
    repository_poll_secs: float = 15.0
    strict_model_config: bool = False
    model_config_name: str = ""
    exit_on_error: bool = True
    strict_readiness: bool = True
    # which models strict readiness waits for (--readiness-policy, infercore's own): "all"
    # (Triton's), "any" (at least one model READY) or "listed:<model>,<model>"
    readiness_policy: str = "all"
    exit_timeout: int = 30
    model_load_thread_count: int = 4
    # retries of a failed model load before it is reported (--model-load-retry-count)
    model_load_retry_count: int = 0
    # the same model name may live in several repositories (--model-namespacing)
    model_namespacing: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: Sequence[RateLimiterResource] = ()
    backend_configuration: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # folders of backend plugin modules (--backend-directory, repeatable; Triton's is one
    # folder): registered when the server starts; "" or () for the built-in backends only
    backend_directory: str | Sequence[str] = ()
    repo_agent_directory: str = ""  # --repoagent-directory: accepted, no repository agents
    # name -> settings, as tritonserver's --host-policy=<name>,<setting>=<value>
    # ("cpu-cores": "0-3,6-6" pins the policy's instance threads; "numa-node" is accepted)
    host_policies: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    log_verbose: int = 0
    log_info: bool = True
    log_warn: bool = True
    log_error: bool = True
    log_file: str = ""  # None (Triton's "no file") is taken as ""
    log_format: LogFormat | str = "default"
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000
    metrics_configuration: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # also given as a dict of TraceConfig's fields or a list of --trace-config values
    trace_config: TraceConfig = field(default_factory=TraceConfig)
    # response cache: implementation name -> settings, as tritonserver's
    # --cache-config=local,size=1048576 gives {"local": {"size": "1048576"}}
    cache_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cache_directory: str = ""  # --cache-directory: accepted (the local cache is built in)
    # the Ray cluster of instance groups placed on Ray (--ray-address): "auto", "local",
    # "<host>:<port>" or "ray://<host>:<port>"; "" (the default) never imports Ray
    ray_address: str = ""
    # GPU memory and devices: validated and shown, no effect on a CPU host (but
    # model_load_device_limits, which refuse instances on a GPU short of memory)
    pinned_memory_pool_size: int = 1 << 28
    cuda_memory_pool_sizes: Mapping[int, int] = field(default_factory=dict)
    cuda_virtual_address_sizes: Mapping[int, int] = field(default_factory=dict)
    min_supported_compute_capability: float = 0.0
    buffer_manager_thread_count: int = 0
    model_load_device_limits: Sequence[ModelLoadDeviceLimit] = ()
    enable_peer_access: bool = True
    clock: Clock = field(default_factory=MonotonicClock, compare=False, repr=False)
    # the GPUs instances may go on (infercore.devices; no flag): NVML by default,
    # infercore.testing's FakeDevices in tests
    devices: Devices = field(default_factory=NvmlDevices, compare=False, repr=False)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def repositories(self) -> tuple[Path, ...]:
        return self.model_repository  # type: ignore[return-value]


# -- validation ------------------------------------------------------------------------------
def readiness_models(policy: str) -> tuple[str, ...] | None:
    """The models a ``listed:`` readiness policy names, or None for "all" and "any"."""
    kind, _, names = policy.partition(":")
    return tuple(names.split(",")) if kind == "listed" else None


def _readiness_policy(policy: Any) -> str:
    if not isinstance(policy, str):
        raise InvalidArgumentError(
            f"readiness_policy must be a string, got {type(policy).__name__}")
    kind, colon, names = policy.partition(":")
    if (kind in ("all", "any") and not colon) or (
            kind == "listed" and names and all(names.split(","))):
        return policy
    raise InvalidArgumentError(
        f"invalid readiness policy '{policy}': expected all, any or "
        "listed:<model>[,<model>...]")


_BOOLS = ("strict_model_config", "exit_on_error", "strict_readiness", "model_namespacing",
          "log_info", "log_warn", "log_error", "metrics", "gpu_metrics", "cpu_metrics",
          "enable_peer_access")
_STRINGS = ("server_id", "model_config_name", "repo_agent_directory", "cache_directory",
            "ray_address")
# name -> smallest value
_INTS = {"exit_timeout": 0, "model_load_thread_count": 1, "model_load_retry_count": 0,
         "metrics_interval": 1, "pinned_memory_pool_size": 0,
         "buffer_manager_thread_count": 0}
_UNITS = {"exit_timeout": " seconds", "metrics_interval": " milliseconds"}
_SETTING_MAPS = ("backend_configuration", "host_policies", "metrics_configuration",
                 "cache_config")


def _validate(options: Options) -> None:
    """Check and normalise every field (frozen: fields are set through object.__setattr__)."""
    def put(name: str, value: Any) -> None:
        object.__setattr__(options, name, value)

    put("model_repository", _repositories(options.model_repository))
    for name in _BOOLS:
        _check_bool(name, getattr(options, name))
    for name in _STRINGS:
        if not isinstance(getattr(options, name), str):
            raise InvalidArgumentError(
                f"{name} must be a string, got {type(getattr(options, name)).__name__}")
    for name, minimum in _INTS.items():
        _check_int(name, getattr(options, name), minimum, _UNITS.get(name, ""))
    put("model_control_mode", _enum(ModelControlMode, "model_control_mode",
                                    options.model_control_mode))
    put("rate_limiter_mode", _enum(RateLimitMode, "rate_limiter_mode",
                                   options.rate_limiter_mode))
    put("startup_models", _startup_models(options.startup_models))
    put("readiness_policy", _readiness_policy(options.readiness_policy))
    poll = _check_number("repository_poll_secs", options.repository_poll_secs, 0.0)
    put("repository_poll_secs", poll)
    # tritonserver takes true/false for --log-verbose as 1/0
    verbose = options.log_verbose
    put("log_verbose", _check_int("log_verbose", int(verbose) if isinstance(verbose, bool)
                                  else verbose, 0))
    log_file = "" if options.log_file is None else options.log_file
    if not isinstance(log_file, (str, Path)):
        raise InvalidArgumentError(f"log_file must be a path, got {type(log_file).__name__}")
    put("log_file", str(log_file))
    put("log_format", _log_format(options.log_format))
    put("rate_limiter_resources", _sequence_of(
        RateLimiterResource, "rate_limiter_resources", options.rate_limiter_resources))
    put("model_load_device_limits", _sequence_of(
        ModelLoadDeviceLimit, "model_load_device_limits", options.model_load_device_limits))
    put("backend_directory", _directories(options.backend_directory))
    for name in _SETTING_MAPS:
        put(name, _settings_map(name, getattr(options, name)))
    for name in ("cuda_memory_pool_sizes", "cuda_virtual_address_sizes"):
        put(name, _device_sizes(name, getattr(options, name)))
    _check_number("min_supported_compute_capability",
                  options.min_supported_compute_capability, 0.0)
    put("trace_config", _trace_config(options.trace_config))
    if not isinstance(options.clock, Clock):
        raise InvalidArgumentError(
            f"clock must be an infercore.clock.Clock (now_ns and wait), got "
            f"{type(options.clock).__name__}")
    if not isinstance(options.devices, Devices):
        raise InvalidArgumentError(
            "devices must be an infercore.devices.Devices (gpu_count, memory and sample), "
            f"got {type(options.devices).__name__}")
    _check_configurations(options)


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


def _check_int(name: str, value: Any, minimum: int, unit: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}{unit}, got {value}")
    return value


def _check_number(name: str, value: Any, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum:g}, got {value}")
    return float(value)


def _enum(kind: type[enum.Enum], name: str, value: Any) -> Any:
    """An enum member from itself, its value ("explicit") or its name ("EXPLICIT")."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        for member in kind:
            if lowered in (member.value, member.name.lower()):
                return member
    choices = ", ".join(repr(member.value) for member in kind)
    raise InvalidArgumentError(f"invalid {name} {value!r}, expected one of {choices}")


def _repositories(value: Any) -> tuple[Path, ...]:
    paths = (value,) if isinstance(value, (str, Path)) else value
    if not isinstance(paths, Sequence):
        raise InvalidArgumentError(
            f"model_repository must be a path or a list of paths, got {type(value).__name__}")
    found = []
    for path in paths:
        if not isinstance(path, (str, Path)) or not str(path):
            raise InvalidArgumentError(
                f"model_repository entries must be non-empty paths, got {path!r}")
        found.append(Path(path))
    return tuple(found)


def _startup_models(value: Any) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, Sequence) or not all(
            isinstance(name, str) and name for name in names):
        raise InvalidArgumentError(
            f"startup_models must be a list of model names, got {value!r}")
    # tritonserver keeps them in a set; "*" beside other names is refused by start(), as
    # Triton's model repository manager refuses it
    return tuple(dict.fromkeys(names))


def _log_format(value: Any) -> str:
    try:
        return LogFormat(value).value
    except ValueError:
        pass
    if isinstance(value, str):
        for member in LogFormat:
            if value.lower() == member.value.lower():
                return member.value
    raise InvalidArgumentError(
        f"invalid log_format {value!r}, expected one of "
        + ", ".join(repr(member.value) for member in LogFormat))


def _sequence_of(kind: type, name: str, value: Any) -> tuple[Any, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(
            isinstance(item, kind) for item in value):
        raise InvalidArgumentError(f"{name} must be a list of {kind.__name__}, got {value!r}")
    return tuple(value)


def _directories(value: Any) -> tuple[str, ...]:
    folders = (value,) if isinstance(value, (str, Path)) else value
    if not isinstance(folders, Sequence) or not all(
            isinstance(folder, (str, Path)) for folder in folders):
        raise InvalidArgumentError(
            f"backend_directory must be a folder or a list of folders, got {value!r}")
    return tuple(str(folder) for folder in folders if str(folder))


def _setting_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _settings_map(name: str, value: Any) -> dict[str, dict[str, str]]:
    """``{group: {setting: value}}`` with the values as text (numbers and booleans are
    written as the command line would give them)."""
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{name} must map names to {{setting: value}} dicts, got {type(value).__name__}")
    checked: dict[str, dict[str, str]] = {}
    for group, settings in value.items():
        if not isinstance(group, str) or not isinstance(settings, Mapping):
            raise InvalidArgumentError(
                f"{name} must map names to {{setting: value}} dicts, got {group!r}: "
                f"{settings!r}")
        checked[group] = {}
        for key, setting in settings.items():
            text = _setting_text(setting)
            if not isinstance(key, str) or not key or text is None:
                raise InvalidArgumentError(
                    f"invalid {name} setting {key!r}={setting!r} for '{group}': settings "
                    "are named and have a string, number or boolean value")
            checked[group][key] = text
    return checked


def _device_sizes(name: str, value: Any) -> dict[int, int]:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must map device ids to byte sizes, got {value!r}")
    for device, size in value.items():
        _check_int(f"a device id of {name}", device, 0)
        _check_int(f"the size of device {device} in {name}", size, 0)
    return dict(value)


def _trace_config(value: Any) -> TraceConfig:
    if isinstance(value, TraceConfig):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in fields(TraceConfig)}
        unknown = sorted(str(key) for key in value if key not in known)
        if unknown:
            raise InvalidArgumentError(
                f"unknown trace_config setting '{unknown[0]}', expected one of "
                + ", ".join(sorted(known)))
        return TraceConfig(**value)
    if isinstance(value, Sequence) and not isinstance(value, str) and all(
            isinstance(item, str) for item in value):
        return parse_trace_config(value)
    raise InvalidArgumentError(
        "trace_config must be a TraceConfig, a dict of its fields or a list of "
        f"--trace-config values, got {value!r}")


def _check_configurations(options: Options) -> None:
    """The cache and metrics configurations, by the parsers the server itself uses.

    Whether another cache implementation exists depends on what is installed (Triton
    loads it from ``cache_directory``), so ``Server()`` refuses those, as it does a
    repository that is not there at ``start()``; the built-in local cache's settings are
    checked here."""
    if LOCAL_CACHE in options.cache_config:
        local_cache_size(options.cache_config[LOCAL_CACHE])
    MetricsSettings.from_configuration(options.metrics_configuration,
                                       interval_ms=options.metrics_interval)


def local_cache_size(settings: Mapping[str, str]) -> int:
    """The byte size the ``local`` response cache's settings give (``{"size": "N"}``; 0:
    no cache, as for Triton's ``--response-cache-byte-size 0``). Raises
    InvalidArgumentError for a missing or negative size or a setting it does not have."""
    settings = dict(settings)
    extra = sorted(set(settings) - {"size"})
    if extra:
        raise InvalidArgumentError(
            f"unknown setting '{extra[0]}' for the {LOCAL_CACHE} cache; it takes only 'size'")
    if "size" not in settings:
        raise InvalidArgumentError(
            f"the {LOCAL_CACHE} cache needs a size: --cache-config {LOCAL_CACHE},size=<bytes>")
    text = str(settings["size"]).strip()
    try:
        size = int(text)
    except ValueError:
        # Triton's words: its local cache reads the size with std::stoull
        raise InternalError("Failed to initialize LocalCache: stoull") from None
    if size < 0:
        raise InvalidArgumentError(
            f"invalid size '{text}' for the {LOCAL_CACHE} cache: it cannot be negative")
    return size
