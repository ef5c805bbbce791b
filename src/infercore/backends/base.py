"""The backend authors' API, after TRITONBACKEND's lifecycle, and the backend registry.

    factory(settings) -> Backend                                once per backend and settings
    Backend.auto_complete_config(config, model_dir, version_dir) before a model's config is
                                                                normalised (not in strict mode)
    Backend.create_model(ModelContext)         -> BackendModel  once per model version
    BackendModel.create_instance(InstanceInfo) -> BackendInstance  once per instance
    BackendInstance.execute(Payload)                            on the instance's thread
    BackendInstance.finalize(), BackendModel.finalize()         at unload, in that order

What the server hands a model version comes in its ``ModelContext``: ``infer`` (BLS),
``control`` (load and unload other models) and ``metrics`` (the custom metrics registry,
a ``CustomMetrics``), so no backend imports the engine or its services.

A backend answers each request of a payload through ``request.sender`` (from any thread,
during or after ``execute``), so batching and decoupled models share one path. Errors a
backend raises from ``execute`` fail that payload's unanswered requests only.

Optional capabilities are declared here as small protocols, never probed by name: an
object has one when it has its members (no base class needed), and without it the engine
uses the documented default (docs/backends.md, "Optional capabilities"):

    DeviceBlocking     Backend.device_blocking: one backend thread per device  (False)
    GpuCapable         Backend.gpu_capable: can run instances on this host's GPUs (True)
    HealthReporting    BackendModel.serving / health_reason                     (True, "")
    MetricContributor  BackendModel.metric_families(): families beside Triton's  (none)
    LoopInstance       BackendInstance.loop_ready / execute_on_loop /
                       finish_from_loop: runs payloads from an event loop       (never)
    ReadinessCheck     BackendModel.checks_readiness / check_ready(): the model
                       decides its own readiness (a Python model's is_ready())  (ready)

Where backends come from, in the order a name is looked up (docs/backends.md):

1. ``register_backend(name, target)`` and ``load_backend_directory(path)`` (the CLI's
   ``--backend-directory``): explicit, so they replace a built-in of the same name;
2. the built-ins: "python", "onnxruntime", "pytorch";
3. the ``infercore.backends`` entry point group of installed distributions, searched when a
   name is not found above (so an installed plugin never shadows a built-in silently).

Every target is an import string, a file, or an entry point, imported on first use, so
``import infercore`` never imports onnxruntime, torch or a plugin. A factory is called
with the backend's settings (``--backend-config=<name>,<key>=<value>``, read-only) when it
takes a positional parameter, else with none; one backend object is made per name and
settings.

Threads: the repository manager's loading threads call ``get_backend`` concurrently.
``_LOCK`` guards ``_REGISTRY``, ``_LOADED`` and ``_CREATING`` and is never held while a
plugin is imported or built; a per-name lock in ``_CREATING`` makes concurrent first loads
of one backend create it once, while other backends' models keep loading (both are
re-entrant: a plugin may call ``register_backend`` or ``get_backend`` while it is
imported). Backend objects are shared by every model of that backend and must be safe to
call from several loading threads at once.
"""

from __future__ import annotations

import enum
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError, TritonError

if TYPE_CHECKING:
    import asyncio

    from ..custom_metric_rules import MetricKind
    from ..metrics_settings import ModelMetricFamily
    from ..payload import Payload
    from ..request import InferRequest
    from ..response import ResponseStream

__all__ = [
    "ENTRY_POINT_GROUP",
    "FRAMEWORK_EXTRAS",
    "Backend",
    "BackendInstance",
    "BackendModel",
    "CustomMetrics",
    "DeviceBlocking",
    "GpuCapable",
    "HealthReporting",
    "InstanceInfo",
    "InstanceState",
    "LoopInstance",
    "MetricContributor",
    "ModelContext",
    "ModelControl",
    "backend_settings",
    "device_blocking",
    "gpu_capable",
    "get_backend",
    "list_backends",
    "load_backend_directory",
    "parse_backend_config",
    "register_backend",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "infercore.backends"
# What a module of a backend directory must define: the backend's factory.
DIRECTORY_FACTORY = "create_backend"


class ModelControl(Protocol):
    """The server's model control, as a model sees it (pb_utils.load_model and friends).

    Each raises the server's TritonError: the load error, or the refusal outside EXPLICIT
    model control mode."""

    def load(self, name: str, config: str, files: Mapping[str, bytes]) -> None:
        """Load (or reload) ``name``; ``config`` "" keeps its config.pbtxt; ``files`` are
        Triton's load parameters ("file:1/model.py" -> content)."""

    def unload(self, name: str, unload_dependents: bool) -> None: ...

    def is_ready(self, name: str, version: int) -> bool:
        """Whether the version (-1: the latest) is ready; False for an unknown model."""


class CustomMetrics(Protocol):
    """The server's custom metrics registry, as a backend sees it: where families and
    metrics a model defines live (Triton's TRITONSERVER_MetricFamilyNew / MetricNew, which
    a backend calls; pb_utils.MetricFamily). Process-wide in Triton and here
    (``custom_metrics.CustomMetricsRegistry`` implements it).

    Families and metrics are objects with the interface of ``custom_metrics.MetricFamily``
    (``name``, ``kind``, ``description``) and ``custom_metrics.Metric`` (``increment``,
    ``set_value``, ``observe``, ``value``), raising the registry's typed errors; dropping
    the last object of a family or metric removes it, as Triton's delete calls do."""

    def family(self, kind: MetricKind, name: str, description: str) -> Any:
        """A family (one of that name and kind is shared).

        Raises:
            TritonError: a bad name, a name taken by another kind or reserved.
        """

    def metric(self, family: Any, labels: Mapping[str, str] | None,
               buckets: Sequence[float] | None) -> Any:
        """A metric of ``family`` (one made by ``family``); equal labels share a value.

        Raises:
            TritonError: bad labels or buckets, or the family was deleted.
        """

    def reserve(self, names: Sequence[str]) -> None:
        """Names custom families may not take: families the backend reports itself
        (``MetricContributor``)."""


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a backend is told about the model version it loads."""

    name: str
    version: int
    config: model_config_pb2.ModelConfig  # normalised; treat as read-only
    model_dir: Path  # <repository>/<name>
    version_dir: Path  # <repository>/<name>/<version>
    repository: Path
    backend_config: Mapping[str, str] = field(default_factory=dict)
    # Runs a request on any loaded model, in-process (BLS). Set by the server.
    infer: Callable[[InferRequest], ResponseStream] | None = None
    # Loads, unloads and checks other models (pb_utils.load_model ...). Set by the server.
    control: ModelControl | None = None
    # Where the model's custom metrics live (pb_utils.MetricFamily). Set by the server.
    metrics: CustomMetrics | None = None

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)


class InstanceState(str, enum.Enum):
    """The life of an instance that runs outside the server's threads (a worker process,
    a Ray actor): started, serving, being replaced after a death, given up, finalized."""

    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One model instance, as Triton describes it to a backend."""

    # "<group name>_<index in group>", e.g. "add_sub_0_0"; a KIND_GPU group's instances
    # on different GPUs share their names, as in Triton
    name: str
    group_name: str
    index: int  # index within its group (of its count: the same on each of its GPUs)
    kind: str  # "KIND_CPU", "KIND_GPU", "KIND_MODEL"
    device_id: int
    passive: bool = False
    profiles: tuple[str, ...] = ()
    secondary_devices: tuple[tuple[str, int], ...] = ()
    host_policy: str = ""

    @property
    def kind_name(self) -> str:
        """The kind as Triton's Python backend names it in ``args``: "CPU", "GPU", "MODEL"."""
        return self.kind.removeprefix("KIND_")


@runtime_checkable
class BackendInstance(Protocol):
    def execute(self, payload: Payload) -> None: ...

    def finalize(self) -> None: ...


@runtime_checkable
class BackendModel(Protocol):
    def create_instance(self, info: InstanceInfo) -> BackendInstance: ...

    def finalize(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A backend: a factory of models, plus what the server asks before loading one.

    Optional: ``device_blocking`` (see ``DeviceBlocking``).
    """

    name: str
    supports_batching: bool

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        """Fill what the backend can tell about the model into ``config`` (in place)."""
        ...

    def create_model(self, context: ModelContext) -> BackendModel: ...


# -- optional capabilities (module docstring) ---------------------------------------------
@runtime_checkable
class DeviceBlocking(Protocol):
    """On a Backend: ``device_blocking = True`` makes the instances of one device share one
    backend thread (Triton's TRITONBACKEND_EXECUTION_DEVICE_BLOCKING). Default: False."""

    device_blocking: bool


def device_blocking(backend: Backend) -> bool:
    """Whether ``backend`` asks for one backend thread per device."""
    return isinstance(backend, DeviceBlocking) and bool(backend.device_blocking)


@runtime_checkable
class GpuCapable(Protocol):
    """On a Backend: ``gpu_capable = False`` when it cannot run instances on this host's
    GPUs (its framework was built without CUDA). KIND_AUTO groups and a config without
    instance groups then get CPU instances even on a GPU host; KIND_GPU groups still reach
    ``create_instance``, which refuses them with its own reason. Default: True (Triton's
    rule: the host's GPUs alone decide)."""

    gpu_capable: bool


def gpu_capable(backend: Backend) -> bool:
    """Whether ``backend`` can run instances on this host's GPUs."""
    return not isinstance(backend, GpuCapable) or bool(backend.gpu_capable)


@runtime_checkable
class HealthReporting(Protocol):
    """On a BackendModel whose instances can go down while the version stays loaded (Ray).

    ``serving`` False reports the version not ready until an instance is back;
    ``health_reason`` is what the repository index shows while it is degraded. Read from
    any thread, so both must be cheap. Default: always serving, no reason."""

    @property
    def serving(self) -> bool: ...

    @property
    def health_reason(self) -> str: ...


@runtime_checkable
class MetricContributor(Protocol):
    """On a BackendModel: families it adds to the metrics beside Triton's, read at each
    scrape (the server adds the ``model`` and ``version`` labels). Default: none."""

    def metric_families(self) -> Iterable[ModelMetricFamily]: ...


@runtime_checkable
class ReadinessCheck(Protocol):
    """On a BackendModel whose readiness its model decides itself, asked at each model
    readiness request (HTTP GET /v2/models/<m>/ready, gRPC ModelReady, BLS
    is_model_ready): a Python model's ``is_ready()`` (current Triton's python_backend).
    Default: ready while loaded.

    ``checks_readiness``: whether a check would run now (False: ready, at no cost); read
    from any thread, so cheap. ``check_ready()``: the model's answer; it blocks, bounded
    by the backend (not ready past its bound), so callers on an event loop run it off
    the loop. Any thread may call it, several at once."""

    @property
    def checks_readiness(self) -> bool: ...

    def check_ready(self) -> bool: ...


@runtime_checkable
class LoopInstance(Protocol):
    """On a BackendInstance that can run a payload from an event loop without blocking it
    (the Python backend's process-isolated instances), so a frontend's loop drives it with
    no thread crossing (dispatch.py, the loop-driven chain). Default: it never does. Only
    for models that are not decoupled; the engine's reservation keeps every other thread
    off the instance until ``done`` or ``unstarted`` was called.

    ``loop_ready()``: whether ``execute_on_loop`` may be used now (not while restarting).
    ``execute_on_loop`` starts ``payload`` from ``loop`` (the running one) and returns;
    ``done`` is called on the loop once it is answered, or ``unstarted`` instead when it
    could not be started at all (its requests untouched: the engine hands it back to the
    instance's threads); raising means nothing was sent (the engine answers).
    ``finish_from_loop(loop)``: ``loop`` is being detached (on its thread, before it
    closes): finish on the calling thread a payload still in flight from it."""

    def loop_ready(self) -> bool: ...

    def execute_on_loop(self, payload: Payload, loop: asyncio.AbstractEventLoop,
                        done: Callable[[], None], unstarted: Callable[[], None]) -> None: ...

    def finish_from_loop(self, loop: asyncio.AbstractEventLoop) -> None: ...


# -- the registry ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Target:
    """Where a backend comes from: a description for messages, and how to import it."""

    origin: str  # e.g. "import string 'pkg.mod:Factory'", "file '/dir/name.py'"
    load: Callable[[], Any]  # -> a factory, or a ready Backend object


_BUILTINS: dict[str, str] = {
    "python": "infercore.backends.python.backend:PythonBackend",
    "onnxruntime": "infercore.backends.onnxruntime:OnnxRuntimeBackend",
    "pytorch": "infercore.backends.pytorch:PyTorchBackend",
}

# Built-in backends whose framework is an extra: the framework's module and the extra
# that installs it (pyproject.toml).
FRAMEWORK_EXTRAS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime", "onnx"),
    "pytorch": ("torch", "torch"),
}

_SettingsKey = tuple[tuple[str, str], ...]

_LOCK = threading.RLock()
_REGISTRY: dict[str, _Target] = {}
_LOADED: dict[tuple[str, _SettingsKey], Backend] = {}
_CREATING: dict[str, threading.RLock] = {}  # one per name: its first creation in progress


def _import_target(target: str) -> _Target:
    module_name, colon, attribute = target.partition(":")
    if not module_name or not colon or not attribute:
        raise InvalidArgumentError(
            f"invalid backend import string '{target}', expected '<module>:<attribute>'"
        )

    def load() -> Any:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
        return value

    return _Target(f"import string '{target}'", load)


def _object_target(value: Any) -> _Target:
    return _Target(f"object {value!r}", lambda: value)


for _name, _target in _BUILTINS.items():
    _REGISTRY[_name] = _import_target(_target)


def register_backend(name: str, target: str | Backend | Callable[..., Backend]) -> None:
    """Make a backend available under ``name``, replacing any earlier one of that name.

    ``target`` is an import string ("package.module:Factory"), a factory (a class or
    function returning a Backend), or a ready Backend object. Nothing is imported or
    created until a model uses the backend.
    """
    if not name:
        raise InvalidArgumentError("a backend needs a non-empty name")
    source = _import_target(target) if isinstance(target, str) else _object_target(target)
    with _LOCK:
        _REGISTRY[name] = source
        _forget(name)


def _forget(name: str) -> None:
    for key in [key for key in _LOADED if key[0] == name]:
        del _LOADED[key]


def get_backend(name: str, settings: Mapping[str, str] | None = None) -> Backend:
    """The backend registered under ``name`` for these settings, created on first use.

    Raises:
        InvalidArgumentError: no backend has that name, or its plugin failed to import,
            to build, or does not implement the Backend interface.
    """
    settings_key: _SettingsKey = tuple(sorted((settings or {}).items()))
    key = (name, settings_key)
    with _LOCK:
        backend = _LOADED.get(key)
        if backend is not None:
            return backend
        creating = _CREATING.setdefault(name, threading.RLock())
    # Importing a framework takes seconds: only loads of this backend wait for it, while
    # models of other backends keep loading.
    with creating:
        with _LOCK:
            backend = _LOADED.get(key)
            if backend is not None:
                return backend
            target = _REGISTRY.get(name) or _entry_point_target(name)
        if target is None:
            # Triton's words first (clients match them), then what infercore has instead.
            raise InvalidArgumentError(
                f"unable to find backend library for backend '{name}', try specifying "
                f"runtime on the model configuration. infercore has no '{name}' backend; "
                f"the backends here are {', '.join(list_backends())} (more can be added "
                "as plugins, see docs/backends.md)"
            )
        backend = _create(name, target, MappingProxyType(dict(settings_key)))
        with _LOCK:
            if _REGISTRY.get(name) is target:  # not replaced meanwhile
                _LOADED[key] = backend
        return backend


def _create(name: str, target: _Target, settings: Mapping[str, str]) -> Backend:
    def failure(exc: BaseException) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"unable to load backend '{name}' from {target.origin}: "
            f"{type(exc).__name__}: {exc}"
        )

    try:
        made = target.load()
    except TritonError:
        raise
    except ModuleNotFoundError as exc:
        raise _missing_extra(name, exc) or failure(exc) from exc
    except Exception as exc:  # a broken plugin
        raise failure(exc) from exc
    if isinstance(made, type) or (callable(made) and not hasattr(made, "create_model")):
        try:
            made = _call_factory(made, settings)
        except TritonError:
            raise
        except Exception as exc:
            raise failure(exc) from exc
    missing = [member for member in ("name", "supports_batching", "auto_complete_config",
                                     "create_model") if not hasattr(made, member)]
    if missing:
        raise InvalidArgumentError(
            f"backend '{name}' from {target.origin} does not implement the Backend "
            f"interface: it has no {', '.join(missing)}"
        )
    if made.name != name:
        # The server looks the backend's settings up by this name: they must agree.
        raise InvalidArgumentError(
            f"backend registered as '{name}' (from {target.origin}) calls itself "
            f"'{made.name}'; the two names must be the same"
        )
    return made  # type: ignore[no-any-return]


def _missing_extra(name: str, exc: ModuleNotFoundError) -> InvalidArgumentError | None:
    """The install line for a built-in backend whose framework is not installed."""
    framework, extra = FRAMEWORK_EXTRAS.get(name, ("", ""))
    if not framework or exc.name != framework:
        return None
    return InvalidArgumentError(
        f"unable to load backend '{name}': it needs {framework}, which is not installed "
        f"here; install it with: pip install 'infercore[{extra}]'"
    )


def _call_factory(factory: Callable[..., Any], settings: Mapping[str, str]) -> Any:
    """Call ``factory(settings)`` when it takes a positional parameter, else ``factory()``."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return factory()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    if any(p.kind in positional for p in parameters):
        return factory(settings)
    return factory()


def list_backends() -> list[str]:
    """Every backend name known now: registered, built in, or offered by an entry point."""
    with _LOCK:
        names = set(_REGISTRY)
    names.update(entry.name for entry in _entry_points())
    return sorted(names)


# -- entry points ---------------------------------------------------------------------------
def _entry_points() -> list[importlib.metadata.EntryPoint]:
    # Read afresh each time: installing a plugin (or adding to sys.path) must be seen, and
    # this runs only when a name is missing from the registry, i.e. once per plugin.
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _entry_point_target(name: str) -> _Target | None:
    """Register and return the target of the entry point named ``name``. Holds _LOCK."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for entry in _entry_points():
        if entry.name == name:
            found.setdefault(entry.value, entry)  # a distribution seen twice on sys.path
    if not found:
        return None
    entries = list(found.values())
    if len(entries) > 1:
        logger.warning(
            "several distributions offer backend '%s' (%s); using '%s'",
            name, ", ".join(e.value for e in entries), entries[0].value,
        )
    entry = entries[0]
    dist = getattr(entry, "dist", None)
    where = f" of distribution '{dist.name}'" if dist is not None else ""
    target = _Target(f"entry point '{entry.name} = {entry.value}'{where}", entry.load)
    _REGISTRY[name] = target
    return target


# -- backend directories --------------------------------------------------------------------
def load_backend_directory(path: str | Path) -> list[str]:
    """Register the backends of a directory of Python modules; return their names.

    Each ``<name>.py`` or package ``<name>/__init__.py`` is the backend ``<name>``; the
    module must define ``create_backend``, its factory. Modules are imported on first use;
    names starting with "_" or "." are skipped. A backend found here replaces a registered
    or built-in one of the same name, as Triton lets a backend directory replace its
    bundled backends.

    Raises:
        InvalidArgumentError: ``path`` is not a directory.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise InvalidArgumentError(
            f"backend directory '{directory}' does not exist or is not a directory"
        )
    names: list[str] = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(("_", ".")):
            continue
        if entry.is_file() and entry.suffix == ".py":
            name, module_file, package = entry.stem, entry, False
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            name, module_file, package = entry.name, entry / "__init__.py", True
        else:
            continue
        target = _file_target(name, module_file, package)
        with _LOCK:
            if name in _REGISTRY:
                logger.info("backend '%s' from %s replaces the one from %s", name,
                            target.origin, _REGISTRY[name].origin)
            _REGISTRY[name] = target
            _forget(name)
        names.append(name)
    logger.info("backend directory %s: %s", directory, ", ".join(names) or "no backends")
    return names


def _file_target(name: str, module_file: Path, package: bool) -> _Target:
    origin = f"file '{module_file}'"

    def load() -> Any:
        module = _import_file(f"_infercore_backend_{name}", module_file, package)
        factory = getattr(module, DIRECTORY_FACTORY, None)
        if factory is None:
            raise AttributeError(
                f"the module defines no '{DIRECTORY_FACTORY}' (the backend's factory)"
            )
        return factory

    return _Target(origin, load)


def _import_file(module_name: str, module_file: Path, package: bool) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        module_name, module_file,
        submodule_search_locations=[str(module_file.parent)] if package else None,
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{module_file}'")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it, so dataclasses, pickling and relative imports of a
    # package find the module; removed again if it fails, so a fixed file can be retried.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


# -- backend settings (--backend-config) ----------------------------------------------------
def parse_backend_config(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """``--backend-config`` values -> {backend name: {setting: value}}.

    Each item is ``<backend>,<setting>=<value>``, or ``<setting>=<value>`` for a setting
    of every backend (kept under the name "", see ``backend_settings``), split as
    tritonserver splits it: the backend name ends at the first ',', the setting at the
    first '=' after it (so ``a=b,c`` names a backend "a=b" and is refused).
    """
    result: dict[str, dict[str, str]] = {}
    for item in items:
        comma = item.find(",")
        equals = item.find("=", comma + 1)
        if comma == 0:
            raise InvalidArgumentError(
                "No backend specified. --backend-config option format is <backend name>,"
                f"<setting>=<value> or <setting>=<value>. Got {item}")
        setting, value = item[comma + 1:equals], item[equals + 1:]
        if equals < 0 or not setting or not value:
            raise InvalidArgumentError(
                "--backend-config option format is '<backend name>,<setting>=<value>'. "
                f"Got {item}")
        result.setdefault(item[:max(comma, 0)], {})[setting] = value
    return result


def backend_settings(
    configuration: Mapping[str, Mapping[str, str]], name: str
) -> dict[str, str]:
    """One backend's settings: the global ones ("") overridden by its own."""
    merged = dict(configuration.get("", {}))
    merged.update(configuration.get(name, {}))
    return merged
