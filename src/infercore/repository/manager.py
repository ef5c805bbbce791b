"""The repository manager: which model versions are loaded, and model control.

It finds the models of the repositories, loads and unloads their versions (at startup,
through the load and unload API, when polling finds changes), keeps ensembles consistent
with the models they use, and answers lookups. Model control follows Triton's model
repository manager:

- A model is keyed by ``(namespace, name)``. The namespace is the repository path with
  model namespacing on, "" otherwise. Without namespacing, a name found in two
  repositories is not loaded (its index row says why). With it, a bare name matching
  several loaded models is ambiguous to a request, and an ensemble (or a BLS call) finds
  a model in its own repository first.
- A load is all-or-nothing per model: new versions load beside the serving ones and are
  swapped in together once all are ready. If any fails, the new ones are discarded and
  the serving versions stay, with the reason in the index. Replaced versions are then
  unloaded: they stop admitting and finish their in-flight requests (``unload_timeout``).
- Loading an unchanged model does nothing; a changed one reloads what changed (a version
  folder: that version; anything else: every version). A config or file override always
  reloads, and so does the next plain load after a file override; after a config
  override only a change on disk does (Triton 2.51 stamps the override with the time of
  its load, so the folder looks older).
- A load has two stages, as in Triton. The poll reads the config (or the override, or
  writes the override's files) and normalises and validates it; a model refused there
  is left exactly as it was (nothing in the index, still serving if it was) and the
  answer is only "failed to poll from model repository", the reason being logged. A model
  that passes is known from then on; a version that then fails to load is UNAVAILABLE
  with "<code>: <message>" as its reason, and the answer lists each such version.
- Names are checked only when loading (current Triton's ``ValidateModelName``: no empty
  or blank name, no '..' or '/'); any other name simply finds no model folder.
- The index lists the model folders of the repositories: a model loaded from override
  files alone is served but not listed.
- Repositories may be registered and unregistered while serving (Triton's repository
  registration, which SageMaker's multi-model endpoint uses), with some of their folders
  mapped to other model names; unregistering leaves loaded models loaded.
- Loading an ensemble first loads the models its steps use. Unloading a model first
  unloads the ensembles using it (they load again when it comes back);
  ``unload_dependents`` also unloads the steps of an unloaded ensemble that were loaded
  only for it and nothing else uses.

Threads: model control operations (``load_all``, ``load``, ``unload``, ``poll``,
``unload_all``) are serialised by ``_control`` (re-entrant) and run on the caller's
thread; ``load_all`` and ``poll`` also load models at once on a pool of
``load_thread_count`` threads they own and join. ``_records`` belongs to the operation in
progress (pool threads each touch their own model's record; ``_lock`` guards adding
one). Lookups (``get``, ``ready_versions``, ``loaded``: the catalog's; ``index``) run on
any thread and never wait for an operation (see catalog.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from threading import Lock, RLock

from tritonclient.grpc import model_config_pb2

from ..backends.base import ModelControl
from ..clock import Clock, MonotonicClock, deadline_after, seconds_until
from ..config import ConfigParseError
from ..errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
)
from ..memory import release_memory
from ..model import LoadedModel, ModelEnvironment
from ..request import InferRequest
from ..response import ResponseStream
from .catalog import ModelCatalog, ModelKey, scoped_infer
from .layout import (
    DUPLICATE_MODEL_REASON,
    ModelSnapshot,
    ModelSource,
    check_model_name,
    find_models,
    snapshot_model,
)
from .loader import ModelLoader, NoVersions, PollFailed, PreparedModel, VersionsFailed
from .overrides import OverrideDirectory
from .states import NOT_LOADED_NO_VERSION, ModelIndexEntry, ModelState, StateTable

__all__ = ["ModelKey", "RepositoryManager"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Record:
    """What the manager remembers about one model (written by control operations)."""

    source: ModelSource
    explicit: bool = False  # asked for by name (not only loaded for an ensemble)
    attempted: ModelSnapshot | None = None  # the folder at the last load attempt
    loaded: ModelSnapshot | None = None  # the folder the serving versions came from
    overridden: bool = False  # serving a load request's files (a plain load reloads)
    override: OverrideDirectory | None = None  # where file overrides were written
    steps: tuple[ModelKey, ...] = ()  # an ensemble's step models, resolved at load
    waiting: bool = False  # an ensemble unloaded because a step model went away


class _Operation:
    """One control operation's bookkeeping: each model tried once, and what changed."""

    __slots__ = ("changed", "results", "unpolled")

    def __init__(self) -> None:
        self.results: dict[ModelKey, str | None] = {}  # None: loaded (or unchanged)
        self.changed: set[ModelKey] = set()  # models whose serving versions were replaced
        self.unpolled: set[ModelKey] = set()  # refused at the poll stage


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
        namespacing: bool = False,
        load_retry_count: int = 0,
        unload_timeout: float = 30.0,
        control: ModelControl | None = None,
    ) -> None:
        self._repositories = tuple(repositories)
        # registered repositories' folders mapped to model names: repository -> folder
        # -> name (changed under _control and _lock, read by index at any time)
        self._mappings: dict[Path, dict[str, str]] = {}
        self._infer = infer
        self._namespacing = namespacing
        self._load_thread_count = load_thread_count
        # seconds an unloaded version may drain (Server.set_exit_timeout changes it)
        self.unload_timeout = unload_timeout
        # the engine's time (Options.clock), for the unload deadlines
        self._clock: Clock = MonotonicClock() if environment is None else environment.clock
        self._loader = ModelLoader(
            strict_model_config=strict_model_config, model_config_name=model_config_name,
            backend_configuration=backend_configuration, environment=environment,
            retry_count=load_retry_count, control=control)
        self._control = RLock()
        self._lock = Lock()
        # True until the server's startup loads end (Server.start); the names they load
        self.starting_up = True
        self._startup_names: frozenset[str] = frozenset()
        self._catalog = ModelCatalog(namespacing, self._tried_not_ready, self._loading_at_startup)
        # The lookups every request makes go straight to the catalog (no extra call).
        self.get = self._catalog.get
        self.ready_versions = self._catalog.ready_versions
        self.loaded = self._catalog.loaded
        self._sources: dict[ModelKey, ModelSource] = {}
        self._duplicates: frozenset[str] = frozenset()
        self._records: dict[ModelKey, _Record] = {}
        self.states = StateTable()

    # -- lookups -------------------------------------------------------------------------
    def index(self, ready_only: bool = False, *, unlisted: bool = False
              ) -> list[ModelIndexEntry]:
        """Every model folder of the repositories (read now), with the state and reason
        of each version; models never loaded appear by name alone. A model whose version
        policy selected no version is left out, as Triton's index leaves it out, unless
        ``unlisted`` (its model table shows it)."""
        rows = self.states.index()
        try:
            found = find_models(self._repositories, self._mappings)
        except TritonError:
            found = {}
        duplicated = set() if self._namespacing else {n for n, s in found.items() if len(s) > 1}
        folders = {(self._namespace(source), name) for name, sources in found.items()
                   for source in sources}
        entries = [e for e in rows
                   if (e.name in duplicated and e.reason == DUPLICATE_MODEL_REASON)
                   or ((e.namespace, e.name) in folders and e.name not in duplicated
                       and (e.version or e.reason != DUPLICATE_MODEL_REASON))]
        recorded = {(e.namespace, e.name) for e in entries}
        for name, sources in found.items():
            if name in duplicated:
                if ("", name) not in recorded:
                    entries.append(ModelIndexEntry(name, "", ModelState.UNAVAILABLE,
                                                   DUPLICATE_MODEL_REASON))
                continue
            for source in sources:
                namespace = self._namespace(source)
                if (namespace, name) not in recorded:
                    entries.append(ModelIndexEntry(name, "", ModelState.UNKNOWN, "",
                                                   name_only=True, namespace=namespace))
        entries = [self._with_health(e) for e in entries
                   if unlisted or e.reason != NOT_LOADED_NO_VERSION]
        if ready_only:
            entries = [e for e in entries if e.state is ModelState.READY]
        entries.sort(key=lambda e: (e.name, e.namespace, int(e.version or -1)))
        return entries

    def _with_health(self, entry: ModelIndexEntry) -> ModelIndexEntry:
        """A READY version that reports itself degraded (e.g. instances on Ray down,
        docs/ray.md) says why in its reason; one with every instance down is UNAVAILABLE
        (it is loaded, but not ready) until one is back."""
        if entry.state is not ModelState.READY or entry.reason or not entry.version:
            return entry
        model = self._catalog.models.get((entry.namespace, entry.name), {}).get(int(entry.version))
        if model is None:
            return entry
        reason = model.health_reason
        if not model.serving:
            return replace(entry, state=ModelState.UNAVAILABLE, reason=reason)
        return replace(entry, reason=reason) if reason else entry

    # -- repository scan -------------------------------------------------------------------
    def _namespace(self, source: ModelSource) -> str:
        return str(source.repository) if self._namespacing else ""

    def scan(self) -> dict[ModelKey, ModelSource]:
        """Read the repositories; a name in two of them (without namespacing) is
        UNAVAILABLE with Triton's reason and left out."""
        with self._control:
            sources: dict[ModelKey, ModelSource] = {}
            duplicates: set[str] = set()
            for name, found in find_models(self._repositories, self._mappings).items():
                if self._namespacing or len(found) == 1:
                    for source in found:
                        sources[(self._namespace(source), name)] = source
                else:
                    duplicates.add(name)
            for name in duplicates:
                self.states.set(name, -1, ModelState.UNAVAILABLE, DUPLICATE_MODEL_REASON)
            for name in self._duplicates - duplicates:
                if self.states.get(name, -1) == (ModelState.UNAVAILABLE,
                                                 DUPLICATE_MODEL_REASON):
                    self.states.remove(name, -1)
            with self._lock:
                self._sources = sources
                self._duplicates = frozenset(duplicates)
            return sources

    def register_repository(self, repository: Path, mapping: Mapping[str, str]) -> None:
        """Add a repository, ``mapping`` its subdirectories (folder -> model name) to the
        names they are loaded under, as Triton registers one; nothing is loaded.

        Raises:
            InvalidArgumentError: ``repository`` is not a directory.
            AlreadyExistsError: it is registered already, or a name is mapped already.
        """
        if not repository.is_dir():
            raise InvalidArgumentError(
                f"failed to register '{repository}', repository not found")
        with self._control:
            if repository in self._repositories:
                raise AlreadyExistsError(
                    f"model repository '{repository}' has already been registered")
            mapped = {name for renames in self._mappings.values() for name in renames.values()}
            for name in mapping.values():
                if name in mapped:
                    raise AlreadyExistsError(
                        f"failed to register '{name}', there is a conflicting mapping for "
                        f"'{name}'")
            with self._lock:
                self._repositories = (*self._repositories, repository)
                if mapping:
                    self._mappings[repository] = dict(mapping)
        logger.info("Model repository registered: %s", repository)

    def unregister_repository(self, repository: Path) -> None:
        """Remove a repository and its mappings; its loaded models stay loaded.

        Raises:
            InvalidArgumentError: ``repository`` is not registered.
        """
        with self._control:
            if repository not in self._repositories:
                raise InvalidArgumentError(
                    f"failed to unregister '{repository}', repository not found")
            with self._lock:
                self._repositories = tuple(r for r in self._repositories if r != repository)
                self._mappings.pop(repository, None)
        logger.info("Model repository unregistered: %s", repository)

    def _keys_named(self, name: str) -> list[ModelKey]:
        """The repository models called ``name``, for a load by name."""
        keys = sorted(key for key in self._sources if key[1] == name)
        if keys:
            return keys
        if name in self._duplicates:
            raise self.poll_failure(name, "not unique across all model repositories")
        raise self.poll_failure(name, "model not found in any model repository")

    def poll_failure(self, name: str, reason: str) -> InternalError:
        """Log why ``name`` was refused at the poll stage; the error Triton answers then."""
        logger.error("Poll failed for model directory '%s': %s", name, reason)
        return InternalError(_poll_failed(name))

    def _record(self, key: ModelKey, source: ModelSource) -> _Record:
        record = self._records.get(key)
        if record is None:
            record = _Record(source)
            with self._lock:
                self._records[key] = record
        return record

    # -- model control: loading ------------------------------------------------------------
    def load_all(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Load the named models (every model found when None); return name -> failure.

        Models load in parallel; ensembles load after the models their steps use.
        """
        with self._control:
            sources = self.scan()
            failures: dict[str, str] = {}
            if names is None:
                keys = sorted(sources)
                failures.update(dict.fromkeys(self._duplicates, DUPLICATE_MODEL_REASON))
            else:
                keys = []
                for name in dict.fromkeys(names):
                    try:
                        keys += self._keys_named(name)
                    except TritonError as exc:
                        failures[name] = exc.message
            for key in keys:
                self._record(key, sources[key]).explicit = True
            if self.starting_up:
                self._startup_names = frozenset(name for _, name in keys)
            operation = _Operation()
            self._load_keys(keys, operation)
            self._settle(operation)
            for key in keys:
                reason = operation.results.get(key)
                if reason:
                    failures[key[1]] = reason
            return failures

    def load(self, name: str, config: model_config_pb2.ModelConfig | None = None,
             files: Mapping[str, bytes] | None = None) -> None:
        """Load (or reload) ``name`` as Triton's load API does; raises its load error.

        ``config`` replaces the model's config.pbtxt for this load. ``files`` (paths
        relative to the model folder -> contents) are written to a temporary model folder
        that the model then loads from; they need ``config``.
        """
        with self._control:
            check_model_name(name)
            override = None
            if files:
                if config is None:
                    raise self.poll_failure(
                        name, "Load parameter 'config' must be specified for model file "
                        "override")
                try:
                    override = OverrideDirectory(name, files)
                except InvalidArgumentError as exc:  # a path that would leave its folder
                    raise self.poll_failure(name, exc.message) from exc
                keys = [self._override_key(name)]
                sources = {keys[0]: override.source}
            else:
                sources = self.scan()
                keys = self._keys_named(name)
            operation = _Operation()
            for key in keys:
                self._record(key, sources[key]).explicit = True
                self._load_key(key, operation, config=config, override=override,
                               force=config is not None)
            self._settle(operation)
            if operation.unpolled.intersection(keys):
                raise InternalError(_poll_failed(name))
            reasons = [reason for key in keys if (reason := operation.results.get(key))]
            if reasons:
                raise InvalidArgumentError("".join(f"load failed for model '{name}': {reason}\n"
                                                   for reason in reasons))

    def _override_key(self, name: str) -> ModelKey:
        loaded = [key for key in self._catalog.models if key[1] == name]
        return loaded[0] if len(loaded) == 1 else ("", name)

    def _load_keys(self, keys: Sequence[ModelKey], operation: _Operation,
                   snapshots: Mapping[ModelKey, ModelSnapshot] | None = None) -> None:
        """Load models in parallel, then ensembles, those that others use first."""
        snapshots = snapshots or {}
        ensembles: dict[ModelKey, list[str]] = {}
        for key in keys:
            steps = self._loader.ensemble_steps(self._sources.get(key,
                                                                  self._records[key].source))
            if steps is not None:
                ensembles[key] = steps
        plain = [key for key in keys if key not in ensembles]
        if len(plain) > 1 and self._load_thread_count > 1:
            with ThreadPoolExecutor(max_workers=self._load_thread_count,
                                    thread_name_prefix="infercore-load") as pool:
                for future in [pool.submit(self._load_key, key, operation,
                                           snapshot=snapshots.get(key)) for key in plain]:
                    future.result()
        else:
            for key in plain:
                self._load_key(key, operation, snapshot=snapshots.get(key))
        order = _dependency_order({key: [(key[0], s) for s in steps]
                                   for key, steps in ensembles.items()})
        for key in order:
            self._load_key(key, operation, snapshot=snapshots.get(key))

    def _load_key(self, key: ModelKey, operation: _Operation, *,
                  config: model_config_pb2.ModelConfig | None = None,
                  override: OverrideDirectory | None = None, force: bool = False,
                  snapshot: ModelSnapshot | None = None,
                  chain: tuple[ModelKey, ...] = ()) -> str | None:
        """Load one model once per operation; returns why it failed, or None.

        ``chain`` is the ensembles whose steps led here, to report a circular dependency.
        """
        if key in operation.results:
            return operation.results[key]
        if key in chain:
            loop = chain[chain.index(key):] + (key,)
            return "circular dependency between ensembles: " + " -> ".join(k[1] for k in loop)
        try:
            reason = self._load_model(key, operation, config, override, force, snapshot,
                                      chain + (key,))
        except Exception as exc:  # a bug or an unexpected file problem: report, don't crash
            logger.exception("failed to load '%s'", key[1])
            reason = f"failed to load '{key[1]}': {type(exc).__name__}: {exc}"
        operation.results[key] = reason
        return reason

    def _load_model(self, key: ModelKey, operation: _Operation,
                    config: model_config_pb2.ModelConfig | None,
                    override: OverrideDirectory | None, force: bool,
                    snapshot: ModelSnapshot | None,
                    chain: tuple[ModelKey, ...]) -> str | None:
        namespace, name = key
        record = self._records[key]
        if override is not None:
            source, current = override.source, None
        else:
            found = self._sources.get(key)
            if found is None:
                operation.unpolled.add(key)
                return _poll_failed(name)
            source = found
            current = snapshot or snapshot_model(source.path)
        live = self._catalog.models.get(key, {})
        plain_reload = (config is None and override is None and not record.overridden
                        and record.loaded is not None and current is not None and bool(live)
                        and record.source.path == source.path)
        changed: set[int] | None = None  # None: every version
        if plain_reload and not force:
            assert record.loaded is not None and current is not None
            changed = record.loaded.changed_versions(current)
            if not changed:
                record.attempted = current
                return None  # unchanged: keep serving as is
        record.attempted = current
        try:
            prepared = self._loader.prepare(source, config)
        except PollFailed as exc:  # left as it was, as Triton leaves a model it cannot poll
            operation.unpolled.add(key)
            if override is not None:
                override.remove()
            error = exc.error
            if isinstance(error, ConfigParseError):  # Triton's two lines: why, then which file
                logger.error("%s", error.detail)
                self.poll_failure(name, error.poll_reason)
            else:
                self.poll_failure(name, error.message)
            return _poll_failed(name)
        except VersionsFailed as exc:  # each version fails to load, as in Triton
            self._catalog.remember([name])
            if not exc.versions:
                return self._refuse(key, live, exc.error.message, override)
            reason = f"{exc.error.code_name}: {exc.error.message}"
            for version in exc.versions:
                logger.error("failed to load '%s' version %d: %s", name, version, reason)
            return self._discard(key, list(exc.versions), live, {},
                                 dict.fromkeys(exc.versions, reason), override)
        except NoVersions as exc:
            self._catalog.remember([name])
            return self._refuse(key, live, exc.message, override, no_versions=True)
        except TritonError as exc:
            self._catalog.remember([name])
            return self._refuse(key, live, exc.message, override)
        self._catalog.remember([name])  # polled: Triton's lifecycle knows it from now on
        try:
            steps = self._load_steps(key, prepared, operation, chain)
        except TritonError as exc:
            return self._refuse(key, live, exc.message, override)
        for reason in prepared.missing.values():  # Triton's index never lists them
            logger.error("%s", reason)
        self.states.remove(name, -1, namespace=namespace)
        kept = {v: live[v] for v in prepared.versions
                if changed is not None and v in live and v not in changed}
        fresh = [v for v in prepared.versions if v not in kept]
        for version in fresh:
            if version not in live:
                self.states.set(name, version, ModelState.LOADING, namespace=namespace)
        loaded: dict[int, LoadedModel] = {}
        errors: dict[int, str] = {}
        for version in fresh:
            logger.info("loading: %s:%d", name, version)  # Triton's, as each version starts
            try:
                loaded[version] = self._loader.load_version(
                    prepared, version, infer=self._infer_from(namespace),
                    describe=self._describer(namespace))
            except TritonError as exc:
                errors[version] = f"{exc.code_name}: {exc.message}"  # Triton's AsString
                logger.error("failed to load '%s' version %d: %s", name, version, exc.message)
        if errors:
            return self._discard(key, fresh, live, loaded, errors, override)
        versions = {**kept, **loaded}
        self._catalog.publish(key, versions)
        for version in versions:
            self.states.set(name, version, ModelState.READY, namespace=namespace)
        for _ in loaded:  # once per version loaded, in Triton's words: no version
            logger.info("successfully loaded '%s'", name)
        previous_override = record.override
        record.source = source
        record.loaded = current
        record.overridden = override is not None
        record.override = override
        record.steps = steps
        record.waiting = False
        operation.changed.add(key)
        self._retire(key, {v: m for v, m in live.items() if versions.get(v) is not m},
                     still_serving=set(versions))
        if previous_override is not None and previous_override is not override:
            previous_override.remove()
        for version in self.states.versions(name, namespace=namespace):
            if version >= 0 and version not in versions and version not in live \
                    and version not in prepared.missing:
                self.states.remove(name, version, namespace=namespace)  # no longer on disk
        return None

    def _load_steps(self, key: ModelKey, prepared: PreparedModel, operation: _Operation,
                    chain: tuple[ModelKey, ...]) -> tuple[ModelKey, ...]:
        """Load what an ensemble's steps use (Triton loads them with the ensemble)."""
        steps: list[ModelKey] = []
        for step in dict.fromkeys(prepared.steps):
            step_key = self._resolve(key[0], step)
            if step_key is None:
                raise InvalidArgumentError(
                    f"ensemble {key[1]} contains models that are not available or "
                    f"ambiguous: {step}")
            if step_key not in self._catalog.models:
                self._record(step_key, self._sources[step_key])
                reason = self._load_key(step_key, operation, chain=chain)
                if reason is not None:
                    raise InvalidArgumentError(
                        f"ensemble '{key[1]}' depends on '{step}' which has no loaded "
                        f"version. Model '{step}' loading failed with error: {reason}")
            steps.append(step_key)
        return tuple(steps)

    def _resolve(self, namespace: str, name: str) -> ModelKey | None:
        """The model a step of an ensemble in ``namespace`` means: the one of its own
        repository, else the only one with that name."""
        if (namespace, name) in self._sources or (namespace, name) in self._catalog.models:
            return (namespace, name)
        candidates = {key for key in [*self._sources, *self._catalog.models] if key[1] == name}
        return candidates.pop() if len(candidates) == 1 else None

    def _refuse(self, key: ModelKey, live: Mapping[int, LoadedModel], message: str,
                override: OverrideDirectory | None, *, no_versions: bool = False) -> str:
        """Record a load that failed before any version loaded. ``no_versions``: the
        version policy selected none (Triton's words, and its index leaves it out)."""
        namespace, name = key
        if no_versions:
            logger.error("failed to load model '%s': %s", name, message)
        else:
            logger.error("failed to load '%s': %s", name, message)
        if live:
            for version in live:
                # as Triton: the serving version stays READY, the reason only logged
                self.states.set(name, version, ModelState.READY, namespace=namespace)
        else:
            for version in self.states.versions(name, namespace=namespace):
                self.states.remove(name, version, namespace=namespace)
            self.states.set(name, -1, ModelState.UNAVAILABLE,
                            NOT_LOADED_NO_VERSION if no_versions else message,
                            namespace=namespace)
        if override is not None:
            override.remove()
        return message

    def _discard(self, key: ModelKey, fresh: Sequence[int],
                 live: Mapping[int, LoadedModel], loaded: Mapping[int, LoadedModel],
                 errors: Mapping[int, str], override: OverrideDirectory | None) -> str:
        """A version failed: drop the new versions, keep the serving ones (Triton's
        all-or-nothing load)."""
        namespace, name = key
        for model in loaded.values():
            model.unload(self.unload_timeout)  # never served, nothing in flight
        summary = "".join(f"version {v} is at UNAVAILABLE state: {reason};"
                          for v, reason in sorted(errors.items()))
        for version in fresh:
            if version in live:
                self.states.set(name, version, ModelState.READY, namespace=namespace)
            else:
                self.states.set(name, version, ModelState.UNAVAILABLE,
                                errors.get(version, summary), namespace=namespace)
        if override is not None:
            override.remove()
        return summary

    def _loading_at_startup(self, name: str) -> bool:
        """Whether the startup loads have ``name`` still to load or loading (asked by the
        catalog for a model it has no version of)."""
        if not self.starting_up or name not in self._startup_names:
            return False
        return not any(state is ModelState.UNAVAILABLE  # failed: its reason answers
                       for namespace, model in self.states.models() if model == name
                       for state, _ in self.states.versions(name, namespace=namespace).values())

    def _tried_not_ready(self, name: str, version: int) -> bool:
        state, _ = self.states.get(name, version)
        return state not in (ModelState.UNKNOWN, ModelState.READY)

    def _infer_from(self, namespace: str) -> Callable[..., ResponseStream] | None:
        """The infer function a model's BLS calls and ensemble steps use."""
        if self._infer is None or not self._namespacing:
            return self._infer
        return scoped_infer(self._infer, namespace)

    def _describer(self, namespace: str) -> Callable[[str, int], model_config_pb2.ModelConfig]:
        """How an ensemble in ``namespace`` reads its step models' configs."""

        def describe(name: str, version: int) -> model_config_pb2.ModelConfig:
            key = self._resolve(namespace, name)
            versions = self._catalog.models.get(key) if key is not None else None
            if not versions:
                raise NotFoundError(f"Request for unknown model: '{name}' is not found")
            if version > 0:
                if version not in versions:
                    raise NotFoundError(f"Request for unknown model: '{name}' version "
                                        f"{version} is not found")
                return versions[version].config
            return versions[max(versions)].config

        return describe

    def _settle(self, operation: _Operation) -> None:
        """After loads and unloads: ensembles using a replaced model check their wiring
        against it again, and ensembles waiting for a model that is back load again."""
        while True:
            todo: dict[ModelKey, list[ModelKey]] = {}
            for key, record in list(self._records.items()):
                if key in operation.results or not record.steps:
                    continue
                if key in self._catalog.models and operation.changed.intersection(record.steps):
                    todo[key] = list(record.steps)
                elif record.waiting and all(s in self._catalog.models for s in record.steps):
                    todo[key] = list(record.steps)
            if not todo:
                return
            for key in _dependency_order(todo):
                reason = self._load_key(key, operation, force=True)
                if reason is not None and key in self._catalog.models:
                    # The wiring no longer fits: Triton leaves such an ensemble unloaded.
                    self._unload_keys([key], cascade=False, reason=reason)
                    self._records[key].waiting = True

    # -- model control: unloading ----------------------------------------------------------
    def unload(self, name: str, timeout: float | None = None, *,
               unload_dependents: bool = False) -> None:
        """Unload every version of ``name`` once its in-flight requests finish.

        Ensembles using it are unloaded first. With ``unload_dependents`` the models an
        unloaded ensemble's steps use go too, unless loaded by name or used elsewhere.
        Unloading a model that is not loaded does nothing, as in Triton.
        """
        with self._control:
            for key, record in self._records.items():
                if key[1] == name:
                    record.explicit = False
                    record.waiting = False
            keys = [key for key in self._catalog.models if key[1] == name]
            if keys:
                self._unload_keys(keys, cascade=unload_dependents, timeout=timeout)

    def _unload_keys(self, keys: Iterable[ModelKey], *, cascade: bool,
                     timeout: float | None = None, reason: str = "unloaded") -> None:
        targets = set(keys)
        users = self._users_of(targets)
        # Ensembles using the models go first, so their in-flight requests can finish.
        for key in reversed(_dependency_order({k: list(self._records[k].steps)
                                               for k in users})):
            # "unloaded", as Triton reports it (readiness ignores unloaded versions)
            self._unload_model(key, "unloaded", timeout)
            self._records[key].waiting = True
        for key in reversed(_dependency_order({k: list(self._records[k].steps)
                                               for k in targets})):
            self._unload_model(key, reason, timeout)
        if cascade:
            steps = {step for key in targets for step in self._records[key].steps}
            for step in sorted(steps):
                step_record = self._records.get(step)
                used = any(step in r.steps for k, r in self._records.items()
                           if k in self._catalog.models)
                if step in self._catalog.models and step_record is not None \
                        and not step_record.explicit and not used:
                    self._unload_keys([step], cascade=True, timeout=timeout)

    def _users_of(self, keys: set[ModelKey]) -> set[ModelKey]:
        """Loaded ensembles that use any of ``keys``, directly or through others."""
        users: set[ModelKey] = set()
        frontier = set(keys)
        while frontier:
            found = {k for k, r in self._records.items()
                     if k in self._catalog.models and k not in users and k not in keys
                     and frontier.intersection(r.steps)}
            users |= found
            frontier = found
        return users

    def _unload_model(self, key: ModelKey, reason: str, timeout: float | None = None) -> None:
        versions = self._catalog.models.get(key)
        record = self._records.get(key)
        if versions:
            self._catalog.publish(key, None)
            self._retire(key, versions, still_serving=set(), reason=reason, timeout=timeout)
        if record is not None:
            record.loaded = None
            record.overridden = False
            if record.override is not None:
                record.override.remove()
                record.override = None

    def _retire(self, key: ModelKey, models: Mapping[int, LoadedModel], *,
                still_serving: set[int], reason: str = "unloaded",
                timeout: float | None = None) -> None:
        """Unload versions no longer published: each drains its in-flight requests."""
        namespace, name = key
        timeout = self.unload_timeout if timeout is None else timeout
        for version in models:
            if version not in still_serving:
                self.states.set(name, version, ModelState.UNLOADING, namespace=namespace)
        deadline = deadline_after(self._clock, timeout)
        for version, model in models.items():
            model.unload(seconds_until(self._clock, deadline))
            if version not in still_serving:
                self.states.set(name, version, ModelState.UNAVAILABLE, reason,
                                namespace=namespace)
                logger.info("successfully unloaded '%s' version %d", name, version)
        if any(version not in still_serving for version in models):
            # what the unloaded versions reached (a Python model's module and globals)
            # goes back to the system now, as it does when Triton's stub process exits
            release_memory()

    def unload_all(self, timeout: float = 30.0) -> None:
        """Unload every model; in-flight requests get until ``timeout`` seconds in total."""
        with self._control:
            deadline = deadline_after(self._clock, timeout)
            order = _dependency_order({k: list(self._records[k].steps) if k in self._records
                                       else [] for k in self._catalog.models})
            for key in reversed(order):
                self._unload_model(key, "unloaded", seconds_until(self._clock, deadline))
            for record in self._records.values():
                if record.override is not None:
                    record.override.remove()
                    record.override = None

    # -- model control: polling ------------------------------------------------------------
    def poll(self) -> dict[str, str]:
        """Apply what changed in the repositories since the last look (POLL mode).

        New models load, removed ones unload (after their in-flight requests), changed
        ones reload what changed; a failed reload keeps the serving versions. A model
        whose load failed is tried again when its folder changes. Returns name -> failure.
        """
        with self._control:
            try:
                sources = self.scan()
            except TritonError as exc:
                logger.error("failed to poll the model repository: %s", exc.message)
                return {}
            gone = [key for key, record in self._records.items()
                    if key not in sources and record.override is None]
            self._unload_keys([key for key in gone if key in self._catalog.models], cascade=False)
            for key in gone:
                self._forget(key)
            operation = _Operation()
            changed: dict[ModelKey, ModelSnapshot] = {}
            for key, source in sources.items():
                current = snapshot_model(source.path)
                record = self._records.get(key)
                if record is None or record.attempted != current:
                    changed[key] = current
                    self._record(key, source).explicit = True
            self._load_keys(sorted(changed), operation, snapshots=changed)
            self._settle(operation)
            return {key[1]: reason for key, reason in operation.results.items() if reason}

    def _forget(self, key: ModelKey) -> None:
        """Drop a model whose folder is gone, keeping a duplicate-name row."""
        namespace, name = key
        for version in self.states.versions(name, namespace=namespace):
            if version >= 0 or name not in self._duplicates:
                self.states.remove(name, version, namespace=namespace)
        with self._lock:
            self._records.pop(key, None)


def _poll_failed(name: str) -> str:
    """Triton's answer to a load refused at the poll stage (the reason is only logged)."""
    return f"failed to load '{name}', failed to poll from model repository"


def _dependency_order(steps: Mapping[ModelKey, Sequence[ModelKey]]) -> list[ModelKey]:
    """The keys of ``steps`` ordered so that a model comes after the ones it uses."""
    ordered: list[ModelKey] = []
    placed: set[ModelKey] = set()
    visiting: set[ModelKey] = set()

    def visit(key: ModelKey) -> None:
        if key in placed or key in visiting:
            return  # a cycle is reported when the ensemble loads
        visiting.add(key)
        for step in steps.get(key, ()):
            if step in steps:
                visit(step)
        visiting.discard(key)
        placed.add(key)
        ordered.append(key)

    for key in sorted(steps):
        visit(key)
    return ordered
