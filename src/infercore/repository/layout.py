"""The on-disk layout of model repositories: models, versions and version policies.

A repository is a directory; each direct subdirectory is a model; each subdirectory of a
model whose name is a version number holds that version's files:

    <repository>/<model>/config.pbtxt
    <repository>/<model>/<version>/<default_model_filename>

A repository registered at run time may map some of its subdirectories to other model
names (Triton's ``TRITONSERVER_ServerRegisterModelRepository``): such a folder is that
model, under that name only, whatever its config names.

Everything here reads the filesystem and returns values; nothing is loaded or cached. The
repository manager builds on it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from tritonclient.grpc import model_config_pb2

from infercore.errors import InternalError, InvalidArgumentError

__all__ = [
    "DUPLICATE_MODEL_REASON",
    "ModelSnapshot",
    "ModelSource",
    "check_model_name",
    "check_repository",
    "directory_fingerprint",
    "find_models",
    "list_versions",
    "model_file_path",
    "no_version_reason",
    "resolve_inside",
    "scan_repositories",
    "select_versions",
    "snapshot_model",
    "version_dir",
]

# Triton's MODEL_READY_REASON_DUPLICATE: the index reason for a model name that is found in
# more than one repository (such a model is never loaded).
DUPLICATE_MODEL_REASON = "model appears in two or more repositories"

# Largest version Triton can represent (versions are int64 there).
_MAX_VERSION = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where one model lives: its name, its folder and the repository holding it."""

    name: str
    path: Path
    repository: Path
    # the name comes from a repository's mapping, not from the folder: the config's name
    # is replaced by it (Triton sets the config name of a mapped model)
    mapped: bool = False


def check_model_name(name: str) -> None:
    """Refuse, as current Triton refuses on load, a name that could leave the repository.

    Triton 2.51 checks nothing (``..`` loads the repository's parent folder); current
    Triton's ``ValidateModelName`` refuses an empty or blank name and any name holding
    ``..`` or ``/``. Nothing else is refused: a name such as ``a\\b`` names a folder
    that simply is not there.

    Raises:
        InvalidArgumentError: the name is empty, blank, or contains '..' or '/'.
    """
    if not name:
        raise InvalidArgumentError("model name must not be empty")
    if not name.strip(" \t\n\v\f\r"):
        raise InvalidArgumentError("model name must not contain only whitespace characters")
    if ".." in name or "/" in name:
        raise InvalidArgumentError(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def scan_repositories(
    repositories: Sequence[Path | str],
) -> tuple[dict[str, ModelSource], dict[str, str]]:
    """Find the models of every repository.

    Returns ``(models, problems)``: ``models`` maps each model name to its source, sorted by
    name; ``problems`` maps a name found in more than one repository to
    ``DUPLICATE_MODEL_REASON`` (such a name is left out of ``models``). Plain files are
    not models; every folder is, hidden ones too, as Triton takes them ('.ipynb_checkpoints'
    is a model that fails to load). A directory listed twice (even spelled differently) is
    scanned once.

    Raises:
        InvalidArgumentError: a repository does not exist, is not a directory or can't be
            listed.
    """
    models: dict[str, ModelSource] = {}
    problems: dict[str, str] = {}
    for name, sources in find_models(repositories).items():
        if len(sources) == 1:
            models[name] = sources[0]
        else:
            problems[name] = DUPLICATE_MODEL_REASON
    return models, problems


def find_models(repositories: Sequence[Path | str],
                mappings: Mapping[Path, Mapping[str, str]] | None = None,
                ) -> dict[str, list[ModelSource]]:
    """Every model folder of every repository: name -> its sources in repository order.

    A name with more than one source is in several repositories (allowed only with model
    namespacing). Sorted by name; plain files are skipped (hidden folders are not, as in
    Triton); a repository listed twice is scanned once. ``mappings`` (repository ->
    subdirectory -> model name) renames the mapped folders of a repository.

    Raises:
        InvalidArgumentError: a repository does not exist, is not a directory or can't be
            listed.
    """
    roots: list[Path] = []
    seen_roots: set[Path] = set()
    for repository in repositories:
        root = Path(repository)
        check_repository(root)
        real = root.resolve()
        if real not in seen_roots:
            seen_roots.add(real)
            roots.append(root)

    found: dict[str, list[ModelSource]] = {}
    for root in roots:
        renames = (mappings or {}).get(root, {})
        for folder in _subdirectories(root):
            name = renames.get(folder, folder)
            found.setdefault(name, []).append(
                ModelSource(name, root / folder, root, mapped=folder in renames))
    return dict(sorted(found.items()))


def check_repository(root: Path) -> None:
    """Raise Triton's error when ``root`` is not a directory that can be read as one.

    Raises:
        InternalError: ``root`` cannot be stat-ed (it does not exist, say).
        InvalidArgumentError: ``root`` is not a directory (Triton does not name it).
    """
    try:
        is_dir = stat.S_ISDIR(root.stat().st_mode)
    except OSError as exc:
        raise InternalError(f"failed to stat file {root}") from exc
    if not is_dir:
        raise InvalidArgumentError("repository path is not a valid directory")


def _subdirectories(path: Path) -> list[str]:
    """Names of the entries of ``path`` that are directories (symlinks followed), sorted."""
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        raise InvalidArgumentError(f"failed to open directory {path}") from exc
    names = []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=True):
                names.append(entry.name)
        except OSError:
            continue  # vanished or unreadable: not a model folder
    return sorted(names)


def _parse_version(name: str) -> int | None:
    """The version a directory name stands for, or None when it is not a version folder.

    Triton skips names with leading zeros ("007"; "0" alone is version 0) and names that
    are not numbers. Only plain ASCII digits count here: Triton's std::stoll would also
    take "+3", "-1", " 4" or "5abc", which no one means as a version.
    """
    if not name.isascii() or not name.isdigit():
        return None
    if len(name) > 1 and name[0] == "0":
        return None
    version = int(name)
    return version if version <= _MAX_VERSION else None


def list_versions(model_dir: Path) -> list[int]:
    """The version numbers present under a model folder, ascending.

    Raises:
        InvalidArgumentError: the model folder can't be listed.
    """
    versions = {v for v in map(_parse_version, _subdirectories(Path(model_dir))) if v is not None}
    return sorted(versions)


def select_versions(
    available: Sequence[int],
    policy: model_config_pb2.ModelVersionPolicy,
    *,
    model_name: str,
) -> tuple[list[int], dict[int, str]]:
    """Apply a model's version_policy to the versions on disk.

    Returns ``(selected, problems)``: the versions to load, ascending, and for each version
    a ``specific`` policy names that is not on disk, Triton's reason. An unset policy acts
    as ``latest { num_versions: 1 }``. An empty ``selected`` means the model can't load;
    report it with ``no_version_reason``.
    """
    present = set(available)
    choice = policy.WhichOneof("policy_choice")
    if choice == "specific":
        selected: set[int] = set()
        problems: dict[int, str] = {}
        for version in policy.specific.versions:
            if version in present:
                selected.add(version)
            else:
                problems[version] = (
                    f"version {version} is specified for model '{model_name}', "
                    "but the version directory is not present"
                )
        return sorted(selected), problems
    if choice == "all":
        return sorted(present), {}
    num_versions = policy.latest.num_versions if choice == "latest" else 1
    if num_versions <= 0:
        return [], {}
    return sorted(present)[-num_versions:], {}


def no_version_reason(model_name: str) -> str:
    """Triton's error text for a model whose version policy selects no version."""
    return (
        f"at least one version must be available under the version policy of model '{model_name}'"
    )


def version_dir(model_dir: Path, version: int) -> Path:
    """The folder of one version of a model."""
    return Path(model_dir) / str(version)


def model_file_path(model_dir: Path, version: int, default_model_filename: str) -> Path:
    """``<model_dir>/<version>/<default_model_filename>``, not resolved.

    Raises:
        InvalidArgumentError: the file name is absolute or steps out with '..'.
    """
    relative = PurePath(default_model_filename)
    if not default_model_filename or relative.is_absolute() or ".." in relative.parts:
        raise InvalidArgumentError(
            f"invalid default_model_filename '{default_model_filename}': "
            "expected a file name inside the version directory"
        )
    return version_dir(model_dir, version) / relative


def resolve_inside(base: Path, relative: str) -> Path:
    """Resolve ``relative`` under ``base`` (symlinks followed), refusing to leave ``base``.

    The result need not exist. This keeps model files outside the repository from ever
    being opened or imported, whether a path says '../' or a symlink points away.

    Raises:
        InvalidArgumentError: ``relative`` is absolute, or the resolved path is outside
            ``base``.
    """
    if PurePath(relative).is_absolute():
        raise InvalidArgumentError(
            f"invalid path '{relative}': an absolute path is not allowed, "
            f"it must be relative to '{base}'"
        )
    real_base = Path(base).resolve()
    resolved = (real_base / relative).resolve()
    if not resolved.is_relative_to(real_base):
        raise InvalidArgumentError(
            f"invalid path '{relative}': it resolves to '{resolved}', "
            f"which is outside '{real_base}'"
        )
    return resolved


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """What a model folder holds, as fingerprints: tells which parts changed since.

    ``shared`` covers everything that is not a version folder (config.pbtxt, configs/,
    label files, helpers), so a change there reloads every version; ``versions`` has one
    fingerprint per version folder, so a change inside one reloads that version only.
    """

    shared: int
    versions: Mapping[int, int]

    def changed_versions(self, newer: ModelSnapshot) -> set[int]:
        """Versions added, removed or modified in ``newer``; all of them if ``shared``
        changed."""
        if newer.shared != self.shared:
            return set(self.versions) | set(newer.versions)
        return {v for v in set(self.versions) | set(newer.versions)
                if self.versions.get(v) != newer.versions.get(v)}


def snapshot_model(model_dir: Path) -> ModelSnapshot:
    """Fingerprint a model folder (see ``ModelSnapshot``); a missing folder is empty."""
    root = Path(model_dir)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        entries = []
    shared = hashlib.blake2b(digest_size=8)
    versions: dict[int, int] = {}
    for entry in entries:
        version = _parse_version(entry.name)
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError:
            continue  # vanished while listing
        if version is not None and is_dir:
            versions[version] = directory_fingerprint(root / entry.name)
        elif is_dir:
            if entry.name != "__pycache__":
                shared.update(f"d:{entry.name}\0{directory_fingerprint(root / entry.name)}\0"
                              .encode("utf-8", "surrogateescape"))
        else:
            shared.update(_file_line(root / entry.name, entry.name))
    return ModelSnapshot(int.from_bytes(shared.digest(), "big"), versions)


def _file_line(path: Path, rel: str) -> bytes:
    try:
        st = path.stat()
    except OSError:
        return b""
    # The later of mtime and ctime, as Triton's poller uses, so a file moved in with an
    # old mtime still counts as changed.
    changed_ns = max(st.st_mtime_ns, st.st_ctime_ns)
    return f"f:{rel}\0{changed_ns}\0{st.st_size}\0".encode("utf-8", "surrogateescape")


def directory_fingerprint(model_dir: Path) -> int:
    """A number that changes when any file under ``model_dir`` changes.

    It hashes the relative path of every directory and file, and each file's size and
    modification time (the later of mtime and ctime, as Triton's poller uses, so a file
    moved in with an old mtime still counts). ``__pycache__`` folders are skipped: Python
    writes them while importing a model. Symlinks are followed. Entries that vanish during
    the walk are skipped; a missing folder has the fingerprint of an empty one.
    """
    digest = hashlib.blake2b(digest_size=8)
    root = Path(model_dir)
    visited: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        # Symlinked folders are followed (a version folder may be a link), once each, so a
        # link cycle ends the walk instead of looping.
        real = os.path.realpath(dirpath)
        if real in visited:
            dirnames[:] = []
            continue
        visited.add(real)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        current = Path(dirpath)
        rel_dir = current.relative_to(root).as_posix()
        digest.update(f"d:{rel_dir}\0".encode("utf-8", "surrogateescape"))
        for filename in sorted(filenames):
            path = current / filename
            digest.update(_file_line(path, path.relative_to(root).as_posix()))
    return int.from_bytes(digest.digest(), "big")
