"""Preparing a model's configuration and loading its versions.

``ModelLoader.prepare`` reads a model's config (or takes a load request's override), picks
the backend, auto-completes, normalises and validates the config and applies the version
policy. What Triton checks when it polls the repository (reading, normalising and
validating the config) fails with ``PollFailed``: Triton then answers only "failed to poll
from model repository" and leaves the model as it was; what fails later is a load error.
``ModelLoader.load_version`` creates one ``LoadedModel``, retrying a failed load
``retry_count`` times (tritonserver's ``--model-load-retry-count``). Nothing here records
states or decides what to load: the repository manager does.

Threads: the manager's load threads call in at once; the loader keeps no mutable state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from .. import config as model_config
from ..backends.base import (
    Backend,
    ModelContext,
    ModelControl,
    backend_settings,
    get_backend,
    gpu_capable,
)
from ..errors import InvalidArgumentError, TritonError
from ..model import LoadedModel, ModelEnvironment
from ..response import ResponseStream
from .layout import (
    ModelSource,
    list_versions,
    no_version_reason,
    select_versions,
    version_dir,
)

__all__ = ["ModelLoader", "NoVersions", "PollFailed", "PreparedModel", "VersionsFailed"]

logger = logging.getLogger(__name__)

# The model file each backend looks for, to pick a backend when a config names none.
_BACKEND_BY_FILE: tuple[tuple[str, str], ...] = (
    ("model.py", "python"),
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
)

Describe = Callable[[str, int], model_config_pb2.ModelConfig]
Infer = Callable[..., ResponseStream]


class PollFailed(Exception):
    """The model's config was refused where Triton's poll of the repository refuses it;
    ``error`` says why (Triton logs it and answers only that the poll failed)."""

    def __init__(self, error: TritonError) -> None:
        super().__init__(error.message)
        self.error = error


class NoVersions(InvalidArgumentError):
    """The version policy selects no version folder: Triton fails the load, shows the
    model "Not loaded" in its table and leaves it out of its index."""


class VersionsFailed(Exception):
    """The backend is missing or refused to complete the config: in Triton that happens as
    each version loads, so each of ``versions`` failed with ``error``."""

    def __init__(self, error: TritonError, versions: tuple[int, ...]) -> None:
        super().__init__(error.message)
        self.error = error
        self.versions = versions


@dataclass(frozen=True, slots=True)
class PreparedModel:
    """A model ready to have its versions loaded: its final config and chosen versions.

    ``missing`` maps each version a ``specific`` version policy names but the folder
    lacks to Triton's reason.
    """

    source: ModelSource
    config: model_config_pb2.ModelConfig
    backend: Backend | None  # None for an ensemble
    versions: tuple[int, ...]
    missing: Mapping[int, str]

    @property
    def steps(self) -> tuple[str, ...]:
        """The models an ensemble's steps name, in step order (empty for other models)."""
        return tuple(step.model_name for step in self.config.ensemble_scheduling.step)


class ModelLoader:
    """Turns a model folder (or an override) into loaded model versions."""

    def __init__(
        self,
        *,
        strict_model_config: bool = False,
        model_config_name: str = "",
        backend_configuration: Mapping[str, Mapping[str, str]] | None = None,
        environment: ModelEnvironment | None = None,
        retry_count: int = 0,
        control: ModelControl | None = None,
    ) -> None:
        self._strict = strict_model_config
        self._config_name = model_config_name or None
        self._backend_configuration = dict(backend_configuration or {})
        self._environment = environment or ModelEnvironment()
        self._retry_count = max(0, retry_count)
        self._control = control  # the server's, for the models' pb_utils.load_model ...

    def ensemble_steps(self, source: ModelSource) -> list[str] | None:
        """The step model names of an ensemble's config.pbtxt, or None for other models.

        Read without loading anything, to order loads; a config that cannot be read is
        reported when the model itself loads.
        """
        try:
            config = model_config.read_model_config(source.path, model_name=source.name,
                                                    config_name=self._config_name)
        except TritonError:
            return None
        if config is None or config.platform != "ensemble":
            return None
        return [step.model_name for step in config.ensemble_scheduling.step]

    def prepare(
        self, source: ModelSource, override: model_config_pb2.ModelConfig | None = None
    ) -> PreparedModel:
        """The model's final config and the versions its policy selects.

        Raises:
            PollFailed: the config is unreadable, or invalid once normalised.
            VersionsFailed: the backend could not complete the config, or its instance
                groups are invalid (on this host: KIND_GPU without its GPUs).
            TritonError: no backend fits, auto-completion fails, or the version policy
                selects no version.
        """
        name = source.name
        available = list_versions(source.path)
        if override is not None:
            config: model_config_pb2.ModelConfig | None = model_config_pb2.ModelConfig()
            config.CopyFrom(override)  # type: ignore[union-attr]
        else:
            try:
                config = model_config.read_model_config(
                    source.path, model_name=name, config_name=self._config_name
                )
            except TritonError as exc:
                raise PollFailed(exc) from exc
        if config is not None and source.mapped:
            config.name = name  # a mapped folder is the model it is mapped to
        if config is None:
            if self._strict:
                raise PollFailed(InvalidArgumentError(
                    f"failed to load '{name}': model configuration file config.pbtxt is "
                    "missing and auto-complete is disabled (strict model config)"
                ))
            config = model_config_pb2.ModelConfig(name=name)
        backend_name = model_config.resolve_backend(config)
        if not backend_name and config.platform != "ensemble":
            backend_name = _backend_from_files(source.path, available)
            if not backend_name:
                raise InvalidArgumentError(
                    f"failed to load '{name}': unable to determine the backend: the model "
                    "configuration sets neither 'backend' nor 'platform', and no known "
                    "model file was found"
                )
            config.backend = backend_name
        try:  # Triton finds the backend, then completes the config, as each version loads
            backend = (None if config.platform == "ensemble" else get_backend(
                backend_name, backend_settings(self._backend_configuration, backend_name)))
            if backend is not None and not self._strict and available:
                backend.auto_complete_config(config, source.path,
                                             version_dir(source.path, max(available)))
        except TritonError as exc:
            versions, _ = select_versions(available, config.version_policy, model_name=name)
            raise VersionsFailed(exc, tuple(versions)) from exc
        # the GPUs this process sees (CUDA_VISIBLE_DEVICES), asked at each poll as Triton
        # asks the CUDA runtime
        gpus = self._environment.devices.gpu_count()
        try:
            model_config.normalize_model_config(
                config, model_name=name, gpu_count=gpus,
                backend_gpus=gpus > 0 and (backend is None or gpu_capable(backend)))
            model_config.validate_model_config(
                config, model_name=name,
                backend_can_batch=backend.supports_batching if backend is not None else True,
                instance_groups=False,
            )
        except TritonError as exc:  # Triton validates at poll (its IO checks come later)
            raise PollFailed(exc) from exc
        versions, missing = select_versions(available, config.version_policy, model_name=name)
        if not versions:
            raise NoVersions(no_version_reason(name))
        try:  # Triton checks the instance groups as each version loads (TritonModel::Create)
            model_config.validate_instance_groups(config, gpu_count=gpus)
        except TritonError as exc:
            raise VersionsFailed(exc, tuple(versions)) from exc
        return PreparedModel(source, config, backend, tuple(versions), missing)

    def load_version(
        self,
        prepared: PreparedModel,
        version: int,
        *,
        infer: Infer | None,
        describe: Describe,
    ) -> LoadedModel:
        """Load one version, retrying ``retry_count`` times; raises the last error.

        Anything a backend raises that is not a TritonError is reported as an
        InvalidArgumentError naming the model, the version and the exception.
        """
        attempts = 1 + self._retry_count
        for attempt in range(1, attempts + 1):
            try:
                return self._load_once(prepared, version, infer, describe)
            except Exception as exc:
                error = exc if isinstance(exc, TritonError) else InvalidArgumentError(
                    f"failed to load '{prepared.source.name}' version {version}: "
                    f"{type(exc).__name__}: {exc}")
                if attempt == attempts:
                    if error is not exc:
                        raise error from exc
                    raise
                logger.warning("failed to load '%s' version %d (attempt %d of %d), "
                               "retrying: %s", prepared.source.name, version, attempt,
                               attempts, error.message)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _load_once(self, prepared: PreparedModel, version: int, infer: Infer | None,
                   describe: Describe) -> LoadedModel:
        source, backend = prepared.source, prepared.backend
        version_config = model_config_pb2.ModelConfig()
        version_config.CopyFrom(prepared.config)
        context = ModelContext(
            name=source.name,
            version=version,
            config=version_config,
            model_dir=source.path,
            version_dir=version_dir(source.path, version),
            repository=source.repository,
            backend_config=backend_settings(self._backend_configuration,
                                            backend.name if backend is not None else ""),
            infer=infer,
            control=self._control,
            metrics=self._environment.custom_metrics,
        )
        model = LoadedModel(context, backend, self._environment, describe=describe)
        model.load()
        return model


def _backend_from_files(model_dir: Path, versions: Sequence[int]) -> str:
    for version in sorted(versions, reverse=True):
        folder = version_dir(model_dir, version)
        for filename, backend in _BACKEND_BY_FILE:
            if (folder / filename).exists():
                return backend
    return ""
