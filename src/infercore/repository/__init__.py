"""Model repositories: the layout on disk and the lifecycle states of model versions."""

from infercore.repository.layout import (
    DUPLICATE_MODEL_REASON,
    ModelSource,
    check_model_name,
    directory_fingerprint,
    list_versions,
    model_file_path,
    no_version_reason,
    resolve_inside,
    scan_repositories,
    select_versions,
    version_dir,
)
from infercore.repository.states import ModelIndexEntry, ModelState, StateTable

__all__ = [
    "DUPLICATE_MODEL_REASON",
    "ModelIndexEntry",
    "ModelSource",
    "ModelState",
    "StateTable",
    "check_model_name",
    "directory_fingerprint",
    "list_versions",
    "model_file_path",
    "no_version_reason",
    "resolve_inside",
    "scan_repositories",
    "select_versions",
    "version_dir",
]

from infercore.repository.manager import RepositoryManager  # noqa: E402

__all__ += ["RepositoryManager"]
