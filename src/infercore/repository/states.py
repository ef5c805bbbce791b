"""Lifecycle states of model versions, and the table that records them.

Each model version moves through Triton's ready states:

    (no record) -> LOADING -> READY -> UNLOADING -> UNAVAILABLE
                      |                                ^
                      +--------------------------------+   (the load failed; reason says why)

A version that is UNAVAILABLE may be loaded again (-> LOADING). A reload of a READY version
keeps serving the old one until the new one is ready, so the record stays READY meanwhile.
UNKNOWN is what a version with no record reports. The table does not police transitions:
the repository manager owns that logic; the table only keeps the latest answer.

A reload that fails keeps the previous version serving: its record stays READY and its
reason says why the new one was refused.

With model namespacing the same name may live in several repositories; each is recorded
under its namespace (the repository path; "" without namespacing).

Threads: the manager's load and unload threads write (``set``, ``remove``); frontend and
caller threads read (``get``, ``versions``, ``index``) for readiness checks and the
repository index. One lock guards the whole mapping
``(namespace, name) -> {version -> (state, reason)}``;
every method holds it only for a dict operation or a copy, and never calls out while holding
it, so readers always see each version's state and reason as one consistent pair.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

__all__ = ["NOT_LOADED_NO_VERSION", "ModelIndexEntry", "ModelState", "StateTable"]

# The reason of a model whose version policy selected no version: Triton's model table
# shows it as such, and its repository index leaves the model out.
NOT_LOADED_NO_VERSION = "Not loaded: No model version was found"


class ModelState(str, enum.Enum):
    """A model version's readiness, spelled as Triton spells it in the repository index."""

    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ModelIndexEntry:
    """One row of the repository index.

    ``version`` is the version number as a string, or ``""`` when the row is about the
    model as a whole (Triton's version -1, e.g. a model found in two repositories).
    ``name_only`` marks a model that is in a repository but was never loaded: Triton lists
    those by name alone. ``namespace`` is the repository of the model when model
    namespacing is on ("" otherwise); Triton's index does not show it, so neither does
    ``to_dict``.
    """

    name: str
    version: str
    state: ModelState
    reason: str
    name_only: bool = False
    namespace: str = ""

    def to_dict(self) -> dict[str, str]:
        """Triton's repository index JSON for this row.

        Triton leaves out ``version`` when it is unknown, ``reason`` when it is empty, and
        everything but ``name`` for a model that was never loaded. The gRPC ModelIndex
        message carries the same values with ``""`` for the missing keys.
        """
        out = {"name": self.name}
        if self.name_only:
            return out
        if self.version:
            out["version"] = self.version
        out["state"] = self.state.value
        if self.reason:
            out["reason"] = self.reason
        return out


class StateTable:
    """Thread-safe record of (model, version) -> (state, reason)."""

    __slots__ = ("_lock", "_models")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[tuple[str, str], dict[int, tuple[ModelState, str]]] = {}

    def set(self, name: str, version: int, state: ModelState, reason: str = "", *,
            namespace: str = "") -> None:
        """Record the state of one version, replacing what was there."""
        state = ModelState(state)
        with self._lock:
            self._models.setdefault((namespace, name), {})[int(version)] = (state, reason)

    def get(self, name: str, version: int, *, namespace: str = "") -> tuple[ModelState, str]:
        """The state and reason of one version; ``(UNKNOWN, "")`` when there is no record."""
        with self._lock:
            entry = self._models.get((namespace, name), {}).get(int(version))
        return entry if entry is not None else (ModelState.UNKNOWN, "")

    def remove(self, name: str, version: int | None = None, *, namespace: str = "") -> None:
        """Forget one version of a model, or every version when ``version`` is None."""
        key = (namespace, name)
        with self._lock:
            if version is None:
                self._models.pop(key, None)
                return
            versions = self._models.get(key)
            if versions is None:
                return
            versions.pop(int(version), None)
            if not versions:
                del self._models[key]

    def versions(self, name: str, *, namespace: str = "") -> dict[int, tuple[ModelState, str]]:
        """A copy of every recorded version of a model, in ascending version order."""
        with self._lock:
            versions = dict(self._models.get((namespace, name), {}))
        return dict(sorted(versions.items()))

    def models(self) -> frozenset[tuple[str, str]]:
        """The ``(namespace, name)`` of every model with at least one record."""
        with self._lock:
            return frozenset(self._models)

    def index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        """Every recorded version as index rows, sorted by name, namespace, version."""
        with self._lock:
            snapshot = [
                (name, namespace, version, state, reason)
                for (namespace, name), versions in self._models.items()
                for version, (state, reason) in versions.items()
            ]
        snapshot.sort(key=lambda row: (row[0], row[1], row[2]))
        return [
            ModelIndexEntry(name, str(version) if version != -1 else "", state, reason,
                            namespace=namespace)
            for name, namespace, version, state, reason in snapshot
            if not ready_only or state is ModelState.READY
        ]

    def __repr__(self) -> str:
        with self._lock:
            count = sum(len(v) for v in self._models.values())
        return f"StateTable(models={len(self._models)}, versions={count})"
