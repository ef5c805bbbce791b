"""Model repositories: the layout on disk and the lifecycle states of model versions."""

from infercore.repository.layout import (
    DUPLICATE_MODEL_REASON,
    ModelSnapshot,
    ModelSource,
    check_model_name,
    directory_fingerprint,
    find_models,
    list_versions,
    model_file_path,
    no_version_reason,
    resolve_inside,
    scan_repositories,
    select_versions,
    snapshot_model,
    version_dir,
)
from infercore.repository.states import ModelIndexEntry, ModelState, StateTable

__all__ = [
    "DUPLICATE_MODEL_REASON",
    "ModelIndexEntry",
    "ModelSnapshot",
    "ModelSource",
    "ModelState",
    "StateTable",
    "check_model_name",
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

from infercore.repository.manager import RepositoryManager  # noqa: E402
from infercore.repository.overrides import OverrideDirectory  # noqa: E402
from infercore.repository.poller import RepositoryPoller  # noqa: E402

__all__ += ["OverrideDirectory", "RepositoryManager", "RepositoryPoller"]
