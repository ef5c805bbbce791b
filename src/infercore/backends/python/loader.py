"""Import a Triton Python model file (``model.py``) safely, once per model version.

Each load gets a fresh, uniquely named package, ``_infercore_model_<key>_<n>``, whose
``__path__`` is the version directory and then the model directory; the file is imported as
``<package>.__triton_model__``. So two models both called ``model.py`` never collide, a
reload re-executes the file, and the model's relative imports (``from .utils import x``)
find its siblings.

Triton's stub appends the version directory and the model directory to ``sys.path``, so
``import utils`` (or ``import model``, which imports the file afresh, as
``unittest.main("model")`` in Triton's QA models does) finds a sibling. One interpreter
serves every model here, so a sibling never enters ``sys.modules`` by its bare name:
``import utils`` from a model's code imports ``<package>.utils`` and hands that module
back (its ``__name__`` then reads ``utils``, as in Triton). Which model imports is decided
by the importing code itself, never by thread or context: ``builtins.__import__`` is
wrapped (``_import_hook``) and reads the importer's ``__package__``, or, for imports made
on a model's behalf by other code (``unittest.main("model")``), the nearest frame of a
model's code on the caller's stack. So threads a model starts import their own siblings
too. As in Triton, a module found on ``sys.path`` (or built in) wins over a sibling of the
same name. Classes a sibling defines keep the full module name, so ``pickle`` finds them.
``importlib.import_module("utils")`` bypasses ``__import__`` and does not find siblings.

Threads: loads run on whatever thread loads models; ``_LOCK`` serialises loads and
unloads (``_PACKAGES`` changes only under it; readers take its entries lock-free). The
hook runs on any thread; the per-package sibling answers it caches are plain dict writes.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import re
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InternalError, InvalidArgumentError

__all__ = ["MODEL_CLASS_NAME", "load_model_class", "model_package", "unload_model_class"]

MODEL_CLASS_NAME = "TritonPythonModel"
PACKAGE_PREFIX = "_infercore_model_"
MAIN_MODULE = "__triton_model__"  # the model file's module, inside its package

_LOCK = threading.Lock()
_SEQUENCE = itertools.count(1)
_UNSAFE = re.compile(r"[^0-9A-Za-z_]")


@dataclass(slots=True)
class _Folders:
    """Where one loaded model's siblings live, and which bare names are siblings."""

    folders: tuple[str, ...]
    siblings: dict[str, bool] = field(default_factory=dict)  # top-level name -> sibling?

    def is_sibling(self, name: str) -> bool:
        known = self.siblings.get(name)
        if known is None:
            known = self.siblings[name] = _finds_sibling(name, self.folders)
        return known


_PACKAGES: dict[str, _Folders] = {}  # package of a loaded model -> its folders


def load_model_class(
    model_file: Path,
    *,
    repository: Path,
    module_key: str,
    model_name: str | None = None,
) -> type:
    """Import ``model_file`` and return its ``TritonPythonModel`` class.

    Args:
        repository: the model repository; the file, symlinks resolved, must lie inside it.
        module_key: names the module (e.g. "<model>_<version>"); a counter keeps each load
            distinct.
        model_name: for messages; defaults to the model directory's name.

    Raises:
        InvalidArgumentError: the file is outside the repository, missing, not a ``.py``
            file, or fails to import.
        InternalError: it has no ``TritonPythonModel`` class.
    """
    model_file = Path(os.path.abspath(model_file))
    if model_name is None:
        model_name = model_file.parent.parent.name
    real_file = model_file.resolve()
    real_repository = Path(repository).resolve()
    if not real_file.is_relative_to(real_repository):
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': model file '{model_file}' resolves to "
            f"'{real_file}', which is outside the model repository '{real_repository}'"
        )
    if not model_file.name.endswith(".py"):
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': Model name must end with '.py'. Model "
            f'name is "{model_file.name}".'
        )
    if not real_file.is_file():
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': Python model file not found in "
            f"'{model_file}'"
        )
    version_dir = model_file.parent.resolve()
    model_dir = version_dir.parent
    package = f"{PACKAGE_PREFIX}{_UNSAFE.sub('_', module_key)}_{next(_SEQUENCE)}"
    stem = model_file.name[: -len(".py")]
    # Triton imports the file as "<version>.<stem>"; messages use that name.
    triton_name = f"{model_file.parent.name}.{stem}"
    with _LOCK:
        module = _import(package, real_file, version_dir, model_dir, model_name)
    model_class = getattr(module, MODEL_CLASS_NAME, None)
    if not isinstance(model_class, type):
        with _LOCK:
            _drop_package(package)
        # Triton's words, and its code (tests/conformance: repository_explicit)
        raise InternalError(
            f"AttributeError: module '{triton_name}' has no attribute '{MODEL_CLASS_NAME}'")
    return model_class


def model_package(model_class: type) -> str:
    """The unique package a loaded model class lives in."""
    return model_class.__module__.partition(".")[0]


def unload_model_class(model_class: type) -> None:
    """Forget the modules of a loaded model, so its memory can be freed."""
    package = model_package(model_class)
    if package.startswith(PACKAGE_PREFIX):
        with _LOCK:
            _drop_package(package)


def _import(
    package: str,
    real_file: Path,
    version_dir: Path,
    model_dir: Path,
    model_name: str,
) -> types.ModuleType:
    folders = (str(version_dir), str(model_dir))
    package_module = types.ModuleType(package)
    package_module.__path__ = list(folders)
    package_module.__package__ = package
    name = f"{package}.{MAIN_MODULE}"
    spec = importlib.util.spec_from_file_location(name, real_file)
    if spec is None or spec.loader is None:  # not expected for a .py file
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': cannot import '{real_file}'"
        )
    module = importlib.util.module_from_spec(spec)
    _PACKAGES[package] = _Folders(folders)
    sys.modules[package] = package_module
    sys.modules[name] = module
    setattr(package_module, MAIN_MODULE, module)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        _drop_package(package)
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': unable to import '{real_file}': "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return module


def _drop_package(package: str) -> None:
    _PACKAGES.pop(package, None)
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def _finds_sibling(name: str, folders: tuple[str, ...]) -> bool:
    """Whether Triton's stub would import ``name`` from the model's folders: found there,
    and neither built in nor on ``sys.path`` (the folders come last on Triton's)."""
    if name in sys.builtin_module_names or not name.isidentifier():
        return False
    if importlib.machinery.PathFinder.find_spec(name, list(folders)) is None:
        return False
    try:
        elsewhere = (importlib.machinery.FrozenImporter.find_spec(name)
                     or importlib.machinery.PathFinder.find_spec(name))
    except (ImportError, ValueError):
        elsewhere = None
    return elsewhere is None


def _importing_package(importer: Mapping[str, Any] | None) -> str | None:
    """The loaded model whose code imports: the importer's, else the nearest on the stack."""
    if importer is not None:
        package = str(importer.get("__package__") or "").partition(".")[0]
        if package in _PACKAGES:
            return package
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        package = str(frame.f_globals.get("__package__") or "").partition(".")[0]
        if package in _PACKAGES:
            return package
        frame = frame.f_back
    return None


_builtin_import = builtins.__import__


def _import_hook(
    name: str,
    globals: Mapping[str, Any] | None = None,  # noqa: A002 - __import__'s own names
    locals: Mapping[str, Any] | None = None,  # noqa: A002
    fromlist: Sequence[str] | None = (),
    level: int = 0,
) -> types.ModuleType:
    """``builtins.__import__``, finding a model's siblings by their bare names."""
    if level == 0 and _PACKAGES:
        top = name.partition(".")[0]
        if top not in sys.modules:
            package = _importing_package(globals)
            folders = _PACKAGES.get(package) if package is not None else None
            if folders is not None and folders.is_sibling(top):
                module = _builtin_import(f"{package}.{name}", None, None, fromlist, 0)
                return module if fromlist else sys.modules[f"{package}.{top}"]
    return _builtin_import(name, globals, locals, fromlist, level)


class _BareNamed(importlib.abc.Loader):
    """Names a model's module as Triton's stub does (``utils``, not ``<package>.utils``)
    once it ran: ``utils.__name__`` reads as in Triton. What it defined while it ran keeps
    the full name, under which ``sys.modules`` holds it, so ``pickle`` finds its classes."""

    def __init__(self, inner: importlib.abc.Loader, bare: str) -> None:
        self._inner = inner
        self._bare = bare

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._inner.exec_module(module)
        module.__name__ = self._bare

    def __getattr__(self, name: str) -> Any:  # get_data, get_resource_reader, ...
        return getattr(self._inner, name)


class _ModelModules(importlib.abc.MetaPathFinder):
    """Finds the modules inside a loaded model's package (its siblings, by ``__path__``)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        package, dot, rest = fullname.partition(".")
        if not dot or package not in _PACKAGES or rest == MAIN_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _BareNamed(spec.loader, rest)
        return spec


sys.meta_path.insert(0, _ModelModules())
builtins.__import__ = _import_hook
