"""The repository manager: finds models, loads and unloads their versions, resolves lookups.

Threads: ``load_all``/``load``/``unload`` run on the thread that calls them (the server's
start and stop, later the model-control API), loading several models at once on a pool of
``model_load_thread_count`` threads owned and joined by ``load_all``. ``get`` runs on every
request's thread. ``_lock`` guards writes to ``_models``; ``get`` reads it without the lock:
``_models`` maps a name to a dict that is replaced, never mutated, so a reader sees either
the old or the new versions, both complete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock

from tritonclient.grpc import model_config_pb2

from .. import config as model_config
from ..backends.base import Backend, ModelContext, backend_settings, get_backend
from ..errors import (
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
)
from ..model import LoadedModel, ModelEnvironment
from ..request import InferRequest
from ..response import ResponseStream
from .layout import (
    ModelSource,
    list_versions,
    no_version_reason,
    scan_repositories,
    select_versions,
    version_dir,
)
from .states import ModelIndexEntry, ModelState, StateTable

__all__ = ["RepositoryManager"]

logger = logging.getLogger(__name__)

# The model file each backend looks for, to pick a backend when a config names none.
_BACKEND_BY_FILE: tuple[tuple[str, str], ...] = (
    ("model.py", "python"),
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
)


class RepositoryManager:
    """Owns every loaded model version and the state of every model found."""

    def __init__(
        self,
        repositories: Sequence[Path],
        *,
        infer: Callable[[InferRequest], ResponseStream] | None = None,
        strict_model_config: bool = False,
        model_config_name: str = "",
        backend_configuration: Mapping[str, Mapping[str, str]] | None = None,
        load_thread_count: int = 4,
        environment: ModelEnvironment | None = None,
    ) -> None:
        self._repositories = tuple(repositories)
        self._infer = infer
        self._strict = strict_model_config
        self._config_name = model_config_name or None
        self._backend_configuration = dict(backend_configuration or {})
        self._load_thread_count = load_thread_count
        self._environment = environment or ModelEnvironment()
        self._lock = Lock()
        self._models: dict[str, dict[int, LoadedModel]] = {}
        self._sources: dict[str, ModelSource] = {}
        self.states = StateTable()

    # -- lookups (hot path) ----------------------------------------------------------------
    def get(self, name: str, version: int = -1) -> LoadedModel:
        """The ready model version (``-1``: the highest ready version)."""
        versions = self._models.get(name)
        if versions:
            if version < 0:
                return versions[max(versions)]
            found = versions.get(version)
            if found is not None:
                return found
            raise NotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        if name in self._sources:
            raise UnavailableError(
                f"Request for unknown model: '{name}' has no available versions"
            )
        raise NotFoundError(f"Request for unknown model: '{name}' is not found")

    def ready_versions(self, name: str) -> list[int]:
        return sorted(self._models.get(name, ()))

    def loaded(self) -> list[LoadedModel]:
        return [m for versions in list(self._models.values()) for m in versions.values()]

    def index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return self.states.index(ready_only=ready_only)

    def sources(self) -> dict[str, ModelSource]:
        return dict(self._sources)

    # -- loading ---------------------------------------------------------------------------
    def scan(self) -> dict[str, ModelSource]:
        """Find the models of every repository; models in two repositories are UNAVAILABLE."""
        found, problems = scan_repositories(self._repositories)
        for name, reason in problems.items():
            self.states.set(name, -1, ModelState.UNAVAILABLE, reason)
        self._sources = found
        return found

    def load_all(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Load the named models (all found when None), in parallel; return failures."""
        sources = self.scan()
        wanted = sorted(sources) if names is None else list(names)
        # Ensembles need their steps loaded first: load the rest in parallel, then the
        # ensembles one at a time, those that others use first.
        ensembles: dict[str, list[str]] = {}
        for name in wanted:
            steps = _ensemble_steps(sources[name], self._config_name) if name in sources else None
            if steps is not None:
                ensembles[name] = steps
        failures: dict[str, str] = {}
        with ThreadPoolExecutor(
            max_workers=self._load_thread_count, thread_name_prefix="infercore-load"
        ) as pool:
            futures = {name: pool.submit(self._load_logged, name) for name in wanted
                       if name not in ensembles}
            for name, future in futures.items():
                reason = future.result()
                if reason is not None:
                    failures[name] = reason
        for name in _dependency_order(ensembles):
            reason = self._load_logged(name)
            if reason is not None:
                failures[name] = reason
        return failures

    def _describe(self, name: str, version: int) -> model_config_pb2.ModelConfig:
        """A loaded model's config (ensemble steps); ``version`` <= 0: the latest."""
        return self.get(name, version if version > 0 else -1).config

    def _load_logged(self, name: str) -> str | None:
        try:
            self.load(name)
        except TritonError as exc:
            return exc.message
        return None

    def load(self, name: str, config: model_config_pb2.ModelConfig | None = None) -> None:
        """Load (or reload) every version of ``name`` its version policy selects.

        ``config`` overrides the model's config.pbtxt (Triton's load with a config
        override). Raises the load error; the states record it per version as well.
        """
        source = self._sources.get(name)
        if source is None:
            self.scan()
            source = self._sources.get(name)
            if source is None:
                raise NotFoundError(f"failed to load '{name}', failed to poll from model "
                                    "repository")
        try:
            config, backend, versions = self._prepare(source, config)
        except TritonError as exc:
            self.states.set(name, -1, ModelState.UNAVAILABLE, exc.message)
            logger.error("failed to load %s: %s", name, exc.message)
            raise
        except Exception as exc:  # a bug or an unexpected file problem: report, don't crash
            error = InvalidArgumentError(f"failed to load '{name}': {type(exc).__name__}: {exc}")
            self.states.set(name, -1, ModelState.UNAVAILABLE, error.message)
            logger.exception("failed to load %s", name)
            raise error from exc
        self.states.remove(name, -1)
        loaded: dict[int, LoadedModel] = {}
        first_error: TritonError | None = None
        for version in versions:
            self.states.set(name, version, ModelState.LOADING)
            try:
                model = self._load_version(source, config, backend, version)
            except Exception as exc:
                version_error: TritonError = exc if isinstance(exc, TritonError) else (
                    InvalidArgumentError(f"failed to load '{name}' version {version}: "
                                         f"{type(exc).__name__}: {exc}"))
                reason = version_error.message
                self.states.set(name, version, ModelState.UNAVAILABLE, reason)
                logger.error("failed to load %s version %d: %s", name, version, reason)
                first_error = first_error or version_error
                continue
            loaded[version] = model
            self.states.set(name, version, ModelState.READY)
            logger.info("successfully loaded '%s' version %d", name, version)
        # A reload that loaded nothing keeps the previous versions serving.
        previous: dict[int, LoadedModel] = {}
        if loaded:
            with self._lock:
                previous = self._models.get(name, {})
                self._models[name] = loaded
        for version, old in previous.items():
            if version not in loaded:
                self.states.set(name, version, ModelState.UNAVAILABLE, "unloaded")
            old.unload()
        if first_error is not None:
            raise first_error

    def _prepare(
        self, source: ModelSource, override: model_config_pb2.ModelConfig | None = None
    ) -> tuple[model_config_pb2.ModelConfig, Backend | None, list[int]]:
        name = source.name
        available = list_versions(source.path)
        if override is not None:
            config: model_config_pb2.ModelConfig | None = model_config_pb2.ModelConfig()
            config.CopyFrom(override)  # type: ignore[union-attr]
        else:
            config = model_config.read_model_config(
                source.path, model_name=name, config_name=self._config_name
            )
        if config is None:
            if self._strict:
                raise InvalidArgumentError(
                    f"failed to load '{name}': model configuration file config.pbtxt is "
                    "missing and auto-complete is disabled (strict model config)"
                )
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
        backend = (None if config.platform == "ensemble" else get_backend(
            backend_name, backend_settings(self._backend_configuration, backend_name)))
        if backend is not None and not self._strict and available:
            backend.auto_complete_config(config, source.path, version_dir(source.path,
                                                                          max(available)))
        model_config.normalize_model_config(config, model_name=name, gpu_count=0)
        model_config.validate_model_config(
            config, model_name=name,
            backend_can_batch=backend.supports_batching if backend is not None else True,
            gpu_count=0,
        )
        versions, problems = select_versions(available, config.version_policy, model_name=name)
        for version, reason in problems.items():
            self.states.set(name, version, ModelState.UNAVAILABLE, reason)
        if not versions:
            raise InvalidArgumentError(no_version_reason(name))
        return config, backend, versions

    def _load_version(
        self,
        source: ModelSource,
        config: model_config_pb2.ModelConfig,
        backend: Backend | None,
        version: int,
    ) -> LoadedModel:
        version_config = model_config_pb2.ModelConfig()
        version_config.CopyFrom(config)
        context = ModelContext(
            name=source.name,
            version=version,
            config=version_config,
            model_dir=source.path,
            version_dir=version_dir(source.path, version),
            repository=source.repository,
            backend_config=backend_settings(self._backend_configuration,
                                            backend.name if backend is not None else ""),
            infer=self._infer,
        )
        model = LoadedModel(context, backend, self._environment, describe=self._describe)
        model.load()
        return model

    # -- unloading -------------------------------------------------------------------------
    def unload(self, name: str, timeout: float = 30.0) -> None:
        with self._lock:
            versions = self._models.pop(name, None)
        if versions is None:
            if name not in self._sources:
                raise NotFoundError(f"failed to unload '{name}', model is not loaded")
            return
        for version in versions:
            self.states.set(name, version, ModelState.UNLOADING)
        for version, model in versions.items():
            model.unload(timeout)
            self.states.set(name, version, ModelState.UNAVAILABLE, "unloaded")

    def unload_all(self, timeout: float = 30.0) -> None:
        """Unload every model; in-flight requests get until ``timeout`` seconds in total."""
        deadline = time.monotonic() + timeout
        for name in list(self._models):
            self.unload(name, max(0.0, deadline - time.monotonic()))


def _ensemble_steps(source: ModelSource, config_name: str | None) -> list[str] | None:
    """The step model names of an ensemble's config, or None for any other model."""
    try:
        config = model_config.read_model_config(source.path, model_name=source.name,
                                                config_name=config_name)
    except TritonError:
        return None  # reported when the model itself is loaded
    if config is None or config.platform != "ensemble":
        return None
    return [step.model_name for step in config.ensemble_scheduling.step]


def _dependency_order(ensembles: Mapping[str, list[str]]) -> list[str]:
    """Ensembles ordered so that one used as a step loads before the ensembles using it."""
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered or name in visiting:
            return  # a cycle is reported by the ensemble's own validation
        visiting.add(name)
        for step in ensembles.get(name, []):
            if step in ensembles:
                visit(step)
        visiting.discard(name)
        ordered.append(name)

    for name in sorted(ensembles):
        visit(name)
    return ordered


def _backend_from_files(model_dir: Path, versions: Sequence[int]) -> str:
    for version in sorted(versions, reverse=True):
        folder = version_dir(model_dir, version)
        for filename, backend in _BACKEND_BY_FILE:
            if (folder / filename).exists():
                return backend
    return ""
