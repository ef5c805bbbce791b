"""The serving model versions: what every request looks its model up in.

Models are keyed by ``(namespace, name)``: the namespace is the repository path with
model namespacing on, "" otherwise. A bare name resolves to the only loaded model with
that name; with namespacing, a request made by a model (an ensemble step, a BLS call)
resolves in that model's own repository first (``scoped_infer`` marks the calling thread
for the duration of the call), and a name loaded from several repositories is otherwise
ambiguous, as in Triton.

Threads: ``publish`` and ``remember`` run on the repository manager's control threads,
under ``_lock``; lookups run on every request's thread without a lock: ``_models``,
``_live`` and ``_known`` are replaced, never mutated, so a reader sees the old or the new
value, each complete.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from threading import Lock
from typing import Any

from ..errors import InvalidArgumentError, NotFoundError, TritonError, UnavailableError
from ..model import LoadedModel
from ..request import InferRequest
from ..response import ResponseStream

__all__ = ["ModelCatalog", "ModelKey", "scoped_infer"]

ModelKey = tuple[str, str]  # (namespace, name)

# The namespace in which a request made by a model looks for the model it names first.
_SCOPE: ContextVar[str | None] = ContextVar("infercore_model_namespace", default=None)


def scoped_infer(infer: Callable[..., ResponseStream], namespace: str
                 ) -> Callable[..., ResponseStream]:
    """``infer`` for requests made by a model of ``namespace`` (model namespacing)."""

    def scoped(request: InferRequest, **kwargs: Any) -> ResponseStream:
        token = _SCOPE.set(namespace)
        try:
            return infer(request, **kwargs)  # the lookup happens on this thread, now
        finally:
            _SCOPE.reset(token)

    return scoped


class ModelCatalog:
    """The loaded versions of every model, and the lookups requests make."""

    __slots__ = ("_known", "_live", "_lock", "_models", "_namespacing", "_not_ready",
                 "_starting_up")

    def __init__(self, namespacing: bool = False,
                 not_ready: Callable[[str, int], bool] | None = None,
                 starting_up: Callable[[str], bool] | None = None) -> None:
        self._namespacing = namespacing
        # whether a version was tried and is not ready (a failed load): asked only on the
        # error path of a lookup naming that version
        self._not_ready = not_ready
        # whether the model is loading as the server starts: asked on the error path only
        self._starting_up = starting_up
        self._lock = Lock()
        self._models: dict[ModelKey, dict[int, LoadedModel]] = {}
        self._live: dict[str, dict[int, LoadedModel]] = {}  # names with one loaded model
        self._known: frozenset[str] = frozenset()  # names found in a repository at all

    @property
    def models(self) -> Mapping[ModelKey, dict[int, LoadedModel]]:
        """The serving versions of each model now (a snapshot: never changes)."""
        return self._models

    # -- lookups (hot path) ----------------------------------------------------------------
    def get(self, name: str, version: int = -1) -> LoadedModel:
        """The ready model version (``-1``: the highest ready version).

        Raises:
            NotFoundError: no such model or version is ready (any name: none is checked).
            UnavailableError: the version named was tried and is not ready (Triton: "is
                not at ready state", 503), or the model is loading as the server starts.
            InvalidArgumentError: with model namespacing, the name names models of
                several repositories.
        """
        versions = self._live.get(name)
        if self._namespacing:
            versions = self._scoped(name, versions)
        if versions:
            if version < 0:
                return versions[max(versions)]
            found = versions.get(version)
            if found is not None:
                return found
        elif version < 0 or name not in self._known:
            raise self._lookup_error(name)
        if self._not_ready is not None and self._not_ready(name, version):
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state")
        raise NotFoundError(
            f"Request for unknown model: '{name}' version {version} is not found")

    def _scoped(self, name: str, versions: dict[int, LoadedModel] | None
                ) -> dict[int, LoadedModel] | None:
        scope = _SCOPE.get()
        if scope is not None:
            return self._models.get((scope, name)) or versions
        return versions

    def _lookup_error(self, name: str) -> TritonError:
        # Triton checks no name on lookup: '../x' or '' is simply not found
        repositories = sorted(namespace for namespace, model in self._models if model == name)
        if len(repositories) > 1:
            return InvalidArgumentError(
                f"There are {len(repositories)} identifiers of model '{name}' in global map, "
                "model namespace must be provided to resolve ambiguity.")
        if self._starting_up is not None and self._starting_up(name):
            # tritonserver does not listen until its startup loads end, so it has no answer
            # here; a client (or a probe) that retries on UNAVAILABLE gets the model soon
            return UnavailableError(
                f"Request for model '{name}': the model is loading as the server starts; "
                "retry once it is ready")
        if name in self._known:  # NOT_FOUND too, as Triton (tests/conformance metadata)
            return NotFoundError(
                f"Request for unknown model: '{name}' has no available versions")
        return NotFoundError(f"Request for unknown model: '{name}' is not found")

    def ready_versions(self, name: str) -> list[int]:
        versions = self._live.get(name)
        if self._namespacing:
            versions = self._scoped(name, versions)
        return sorted(versions or ())

    def loaded(self) -> list[LoadedModel]:
        return [m for versions in self._models.values() for m in versions.values()]

    # -- changes (control threads) ---------------------------------------------------------
    def publish(self, key: ModelKey, versions: dict[int, LoadedModel] | None) -> None:
        """Make ``versions`` the serving versions of ``key`` (None or empty: none)."""
        with self._lock:
            models = dict(self._models)
            if versions:
                models[key] = versions
            else:
                models.pop(key, None)
            counts = Counter(name for _, name in models)
            self._models = models
            self._live = {name: v for (_, name), v in models.items() if counts[name] == 1}

    def remember(self, names: Iterable[str]) -> None:
        """Names found in a repository: a request for one gets "no available versions"
        rather than "not found" while it is not loaded."""
        with self._lock:
            self._known = self._known | frozenset(names)

    def __repr__(self) -> str:
        return f"ModelCatalog(models={len(self._models)})"
