"""Server options, named as Triton's in-process API names them (``tritonserver.Options``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InvalidArgumentError
from .tracing import TraceConfig

__all__ = ["ModelControlMode", "Options", "RateLimitMode", "RateLimiterResource"]


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


@dataclass(frozen=True, slots=True)
class Options:
    """Everything a Server is started with. Validated at construction.

    ``exit_timeout`` is in seconds, as tritonserver's ``--exit-timeout-secs``;
    ``metrics_interval`` in milliseconds (``--metrics-interval-ms``).
    ``metrics_configuration`` is tritonserver's (group "" -> {setting: value}: see
    metrics.MetricsSettings); ``trace_config`` is what ``--trace-config`` gives
    (tracing.parse_trace_config).
    """

    model_repository: str | Path | Sequence[str | Path] = ()
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: Sequence[str] = ()
    strict_model_config: bool = False
    model_config_name: str = ""
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    model_load_thread_count: int = 4
    # retries of a failed model load before it is reported (--model-load-retry-count)
    model_load_retry_count: int = 0
    # the same model name may live in several repositories (--model-namespacing)
    model_namespacing: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: Sequence[RateLimiterResource] = ()
    backend_configuration: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # name -> settings, as tritonserver's --host-policy=<name>,<setting>=<value>
    # ("cpu-cores": "0-3,6" pins the policy's instance threads; "numa-node" is accepted)
    host_policies: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    log_verbose: int = 0
    log_info: bool = True
    log_warn: bool = True
    log_error: bool = True
    log_file: str = ""
    log_format: str = "default"
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000
    metrics_configuration: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    trace_config: TraceConfig = field(default_factory=TraceConfig)
    # response cache: implementation name -> settings, as tritonserver's
    # --cache-config=local,size=1048576 gives {"local": {"size": "1048576"}}
    cache_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        repositories = self.model_repository
        if isinstance(repositories, (str, Path)):
            repositories = (repositories,)
        object.__setattr__(self, "model_repository", tuple(Path(p) for p in repositories))
        object.__setattr__(self, "model_control_mode", ModelControlMode(self.model_control_mode))
        object.__setattr__(self, "rate_limiter_mode", RateLimitMode(self.rate_limiter_mode))
        if self.exit_timeout < 0:
            raise InvalidArgumentError("exit_timeout must be >= 0 seconds")
        if self.model_load_thread_count < 1:
            raise InvalidArgumentError("model_load_thread_count must be >= 1")
        if self.model_load_retry_count < 0:
            raise InvalidArgumentError("model_load_retry_count must be >= 0")
        if self.log_verbose < 0:
            raise InvalidArgumentError("log_verbose must be >= 0")
        if self.metrics_interval <= 0:
            raise InvalidArgumentError("metrics_interval must be > 0 milliseconds")

    @property
    def repositories(self) -> tuple[Path, ...]:
        return self.model_repository  # type: ignore[return-value]
